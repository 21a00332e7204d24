"""Parsing a ``_bulk`` body into operations, refusing it whole when it is malformed.

Elasticsearch reads every action line before it executes any item, so a malformed body
applies nothing: this module runs first and raises :class:`EsRequestError` (400).
"""

from __future__ import annotations

from typing import Any, NoReturn

import orjson

from .errors import EsRequestError, raise_validation
from .versions import version_problem

__all__ = ["BulkOp", "parse_bulk"]

_OPS = frozenset({"index", "create", "update", "delete"})
_META_KEYS = frozenset(
    {
        "_index",
        "_id",
        "routing",
        "pipeline",
        "version",
        "version_type",
        "if_seq_no",
        "if_primary_term",
        "require_alias",
        "require_data_stream",
        "retry_on_conflict",
        "dynamic_templates",
        "_source",
        "list_executed_pipelines",
    }
)


# One operation: (op, index, _id or None to generate one, metadata, parsed source, raw source).
BulkOp = tuple[str, str, str | None, dict[str, Any], Any, bytes]


def parse_bulk(body: bytes, default_index: str | None) -> list[BulkOp]:
    """Split an NDJSON bulk body into operations.

    Raises:
        EsRequestError: a line is not JSON, an action line is malformed or names an unknown
            parameter, a source line is missing, an index or id is missing, or the body does
            not end with a newline.
    """
    values, raws, numbers = _split(body)
    ops: list[BulkOp] = []
    problems: list[str] = []
    i, n = 0, len(values)
    while i < n:
        action = values[i]
        line = i + 1 if numbers is None else numbers[i]
        if type(action) is not dict or len(action) != 1:
            _malformed(action, line)
        ((op, meta),) = action.items()
        if op not in _OPS or type(meta) is not dict or not meta.keys() <= _META_KEYS:
            _malformed(action, line)
        index = meta.get("_index", default_index)
        doc_id = meta.get("_id")
        source: Any = None
        raw = b""
        if op == "delete":
            i += 1
        elif i + 1 < n:
            source, raw = values[i + 1], raws[i + 1]
            i += 2
        else:
            raise EsRequestError(
                400,
                "illegal_argument_exception",
                f"Malformed action/metadata line [{line}], [{op}] needs a source line after it",
            )
        if (
            type(index) is not str
            or type(doc_id) is not str
            or not 0 < len(doc_id) <= 128
            or op == "update"
        ):
            index, doc_id = _check_op(op, index, doc_id, source, problems)
        if "version" in meta or "version_type" in meta:
            problem = version_problem(op, meta)
            if problem is not None:
                problems.append(problem)
        ops.append((op, index, doc_id, meta, source, raw))
    raise_validation(problems)
    return ops


def _check_op(
    op: str, index: Any, doc_id: Any, source: Any, problems: list[str]
) -> tuple[str, str | None]:
    if not isinstance(index, str):
        problems.append("index is missing")
        index = ""
    if doc_id is not None:
        doc_id = doc_id if type(doc_id) is str else str(doc_id)
        if not doc_id:
            problems.append("if _id is specified it must not be empty")
        elif len(doc_id.encode()) > 512:
            problems.append(f"id [{doc_id}] is too long, must be no longer than 512 bytes")
    elif op == "update" or op == "delete":
        problems.append("id is missing")
    if op == "update" and not (
        type(source) is dict and ("doc" in source or "upsert" in source or "script" in source)
    ):
        problems.append("script or doc is missing")
    return index, doc_id


def _malformed(value: Any, line: int) -> NoReturn:
    if type(value) is not dict or len(value) != 1:
        raise EsRequestError(
            400,
            "illegal_argument_exception",
            f"Malformed action/metadata line [{line}], expected an object with one key",
        )
    ((op, meta),) = value.items()
    if op not in _OPS:
        raise EsRequestError(
            400,
            "illegal_argument_exception",
            f"Malformed action/metadata line [{line}], expected field [create], [delete], "
            f"[index] or [update] but found [{op}]",
        )
    if type(meta) is not dict:
        raise EsRequestError(
            400,
            "illegal_argument_exception",
            f"Malformed action/metadata line [{line}], expected START_OBJECT",
        )
    unknown = sorted(meta.keys() - _META_KEYS)[0]
    raise EsRequestError(
        400,
        "illegal_argument_exception",
        f"Action/metadata line [{line}] contains an unknown parameter [{unknown}]",
    )


def _split(body: bytes) -> tuple[list[Any], list[bytes], list[int] | None]:
    """Parsed lines, their raw bytes, and their line numbers (None: line i is i + 1)."""
    if not body.strip():
        raise EsRequestError(
            400, "action_request_validation_exception", "Validation Failed: 1: no requests added;"
        )
    if not body.endswith(b"\n"):
        raise EsRequestError(
            400,
            "illegal_argument_exception",
            "The bulk request must be terminated by a newline [\\n]",
        )
    lines = body.split(b"\n")
    lines.pop()
    # One parse of all lines as a JSON array is the fast path. It is exact: every line yields
    # at least one value, so a line holding more (or less) than one changes the count.
    try:
        values = orjson.loads(b"[" + b",".join(lines) + b"]")
        if len(values) == len(lines):
            return values, lines, None
    except orjson.JSONDecodeError:
        pass
    values, raws, numbers = [], [], []
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            values.append(orjson.loads(stripped))
        except orjson.JSONDecodeError as exc:
            raise EsRequestError(
                400, "x_content_parse_exception", f"[{number}:1] Malformed line [{number}]: {exc}"
            ) from None
        raws.append(stripped)
        numbers.append(number)
    return values, raws, numbers
