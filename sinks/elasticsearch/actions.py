"""Rows to bulk entries, and bulk entries to NDJSON ``_bulk`` bodies.

Each written row is encoded once, when the writer accepts it (with the HTTP sink's JSON
rules, ``asyncsink.sinks.http.encoding``): its source line and as much of its action line as is
known then. A document id derived from the call (see ``document_id``) is only known when
the request is made, so such an entry keeps its action line in two pieces and the id goes
between them as the body is joined::

    {"index":{"_id":"<derived id>","_index":"logs","routing":"eu"}}
    {"user":"ada","n":1}

The fixed ``index`` is not repeated in each action line: it is in the request path
(``/{index}/_bulk``), as is the ``pipeline`` (``?pipeline=...``). With ``versionField``,
an ``index`` or ``delete`` action line carries the row's version::

    {"delete":{"_id":"42","version":17,"version_type":"external"}}
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from asyncsink.encoding import JsonEntryEncoder
from asyncsink.entries.arrow_rows import ArrowRows
from asyncsink.entries.rows import fields_of

from .options import OPERATIONS, ElasticsearchOptions

__all__ = ["ID_SIZE_ALLOWANCE", "BulkEntry", "EntryBuilder", "bulk_body", "document_id"]

ID_SIZE_ALLOWANCE = 16 + 1 + 20
"""The longest derived id in bytes: a 16-character scope digest, a dot, a 64-bit number."""

_PERSON = b"asyncsink-es-id"


class BulkEntry(NamedTuple):
    """One document's share of a ``_bulk`` body.

    ``tail`` is empty when ``head`` is the whole action line (an id mapped from the row);
    otherwise the action line is ``head + derived id + tail``. ``body`` is the line after
    the action line (``None`` for ``delete``). ``source`` is the row as JSON: what a dead
    letter holds and what the call log digests. ``size`` is what the entry adds to a body,
    newlines included (for a derived id, the longest it can be).
    """

    head: bytes
    tail: bytes
    body: bytes | None
    source: bytes
    size: int
    op: str = ""
    """The entry's operation, when each row names its own (``operationField``)."""


@functools.lru_cache(maxsize=256)
def _scope_digest(scope: str) -> str:
    digest = hashlib.blake2b(scope.encode(), digest_size=12, person=_PERSON).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


def document_id(scope: str, seq: int) -> str:
    """The ``_id`` derived for the entry at sequence number ``seq`` of ``scope``.

    A digest of the scope's name (16 URL-safe characters), a dot and the number: the
    same on every re-send and every replay of the scope, and different for every other
    entry of any scope. ``scope`` is ``current_call().scope``.
    """
    return f"{_scope_digest(scope)}.{seq}"


def bulk_body(entries: Sequence[BulkEntry], scope: str, seqs: Sequence[int]) -> bytes:
    """The NDJSON body of one request: each entry's action line (with its derived id, from
    ``scope`` and its sequence number in ``seqs``) and its source line, each line ending
    in a newline."""
    prefix = _scope_digest(scope).encode("ascii") + b"."
    parts: list[bytes] = []
    append = parts.append
    for entry, seq in zip(entries, seqs, strict=True):
        if entry.tail:
            append(b"%s%s%d%s" % (entry.head, prefix, seq, entry.tail))
        else:
            append(entry.head)
        if entry.body is not None:
            append(entry.body)
    append(b"")
    return b"\n".join(parts)


def as_mapping(element: Any) -> Mapping[str, Any]:
    """The fields of a row: a Spark ``Row`` (anything with ``asDict``), a mapping, a
    dataclass or a named tuple.

    Raises:
        TypeError: the element has no named fields.
    """
    if type(element) is dict:
        return element
    if hasattr(element, "asDict"):
        return fields_of(element)  # nested rows are encoded, and checked, as values
    if isinstance(element, Mapping):
        return element
    named = getattr(element, "_asdict", None)
    if isinstance(element, tuple) and named is not None:
        fields: Mapping[str, Any] = named()
        return fields
    if dataclasses.is_dataclass(element) and not isinstance(element, type):
        return {f.name: getattr(element, f.name) for f in dataclasses.fields(element)}
    raise TypeError(
        f"a row must be a Spark Row, a mapping, a dataclass or a named tuple, "
        f"not {type(element).__name__}"
    )


def _lookup(row: Mapping[str, Any], name: str) -> Any:
    """The value of field ``name``; a dotted name reaches into nested objects when the row
    has no field of that exact name."""
    if name in row or "." not in name:
        return row.get(name)
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _text(row: Mapping[str, Any], name: str, option: str) -> str | None:
    value = _lookup(row, name)
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    shown = "an empty string" if value == "" else f"a {type(value).__name__}"
    raise TypeError(f"field {name!r} ({option}) holds {shown}, not a string or an integer")


class EntryBuilder:
    """Turns rows into ``BulkEntry`` objects for the configured operation.

    ``indices`` collects the index names rows named through ``indexField`` (for
    ``refresh``).

    Raises:
        TypeError, ValueError: from ``__call__``, for a row that cannot become a document
            (a missing id or index, a value that cannot be encoded); the writer makes it a
            bad record with its position and this reason.
    """

    def __init__(self, options: ElasticsearchOptions) -> None:
        self.indices: set[str] = set()
        self._encode = JsonEntryEncoder(options.contract)
        self._op = options.operation
        self._op_key = options.operation.encode("ascii")
        self._fallback_index = options.index
        self._index_field = options.index_field
        self._id_field = options.id_field
        self._routing_field = options.routing_field
        self._op_field = options.operation_field
        self._version_field = options.version_field
        self._version_type = options.version_type
        self._exclude = frozenset(options.excluded_fields)
        self._plain = not (
            self._index_field
            or self._id_field
            or self._routing_field
            or self._op_field
            or self._version_field
            or self._exclude
        )
        self._head = b'{"%s":{"_id":"' % self._op_key
        self._plain_tail = b'"}}'
        self._auto_ids = options.auto_ids
        if self._auto_ids:  # the cluster picks each _id: the action line is whole
            self._head = b'{"%s":{}}' % self._op_key
            self._plain_tail = b""

    def __call__(self, element: Any) -> BulkEntry:
        if self._plain:
            source = self._encode(element)
            return self._entry(self._head, self._plain_tail, source, self._op)
        row = as_mapping(element)
        op = self._op if self._op_field is None else _operation(row, self._op_field)
        meta: dict[str, Any] = {}
        if self._id_field is not None:
            doc_id = _text(row, self._id_field, "idField")
            if doc_id is None:
                raise ValueError(f"field {self._id_field!r} (idField) is missing or null")
            if len(doc_id.encode()) > 512:
                raise ValueError(f"field {self._id_field!r} (idField) is longer than 512 bytes")
            meta["_id"] = doc_id
        if self._index_field is not None:
            index = _text(row, self._index_field, "indexField") or self._fallback_index
            if index is None:
                raise ValueError(
                    f"field {self._index_field!r} (indexField) is missing or null and no "
                    "index option is set"
                )
            meta["_index"] = index
            self.indices.add(index)
        if self._routing_field is not None:
            routing = _text(row, self._routing_field, "routingField")
            if routing is not None:
                meta["routing"] = routing
        if self._version_field is not None:
            meta["version"] = _version(row, self._version_field, op)
            meta["version_type"] = self._version_type
        source = self._encode(row)
        doc = None
        if self._exclude and op != "delete":
            doc = self._encode({k: v for k, v in row.items() if k not in self._exclude})
        if "_id" in meta or self._auto_ids:
            return self._entry(orjson.dumps({op: meta}), b"", source, op, doc)
        if not meta:
            return self._entry(self._head, self._plain_tail, source, op, doc)
        inner = orjson.dumps(meta)[1:-1]
        return self._entry(self._head, b'",' + inner + b"}}", source, op, doc)

    def build_all(self, elements: Sequence[Any]) -> list[BulkEntry] | None:
        """The entries of the rows of an Arrow record batch (``ArrowRows``) with derived
        ids, their documents encoded at once; ``None`` for any other run (``__call__``
        on each element gives the same entries).

        Raises:
            EntryEncodingError: a value cannot be encoded.
        """
        if not self._plain or not isinstance(elements, ArrowRows):
            return None
        head, tail, entry, op = self._head, self._plain_tail, self._entry, self._op
        return [entry(head, tail, source, op) for source in self._encode.encode_all(elements)]

    def _entry(
        self, head: bytes, tail: bytes, source: bytes, op: str, doc: bytes | None = None
    ) -> BulkEntry:
        """``doc``: the document, when it is not the whole row (``excludeFields``)."""
        document = source if doc is None else doc
        body: bytes | None
        if op == "index" or op == "create":
            body = document
        elif op == "update":
            body = b'{"doc":' + document + b',"doc_as_upsert":true}'
        else:
            body = None
        size = len(head) + len(tail) + 1 + (len(body) + 1 if body is not None else 0)
        if tail:
            size += ID_SIZE_ALLOWANCE
        return BulkEntry(head, tail, body, source, size, op if self._op_field else "")


def _operation(row: Mapping[str, Any], name: str) -> str:
    """The operation a row names in field ``name`` (``operationField``)."""
    value = _lookup(row, name)
    if isinstance(value, str) and value in OPERATIONS:
        return value
    shown = "null" if value is None else repr(value)[:60]
    raise ValueError(
        f"field {name!r} (operationField) holds {shown}, not one of 'index', 'create', "
        "'update' or 'delete'"
    )


_MAX_VERSION = 2**63 - 1


def _version(row: Mapping[str, Any], name: str, op: str) -> int:
    """The version a row holds in field ``name`` (``versionField``), for operation ``op``."""
    if op not in ("index", "delete"):
        raise ValueError(
            f"operation {op!r} takes no version (versionField): Elasticsearch versions only "
            "'index' and 'delete'; send 'index' to replace the whole document"
        )
    value = _lookup(row, name)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_VERSION:
        return value
    shown = "null" if value is None else f"{value!r}"[:60]
    raise ValueError(
        f"field {name!r} (versionField) holds {shown}, not an integer from 0 to 2^63-1"
    )
