"""The documents behind the Elasticsearch test endpoint, and what ``_bulk`` / ``_mget`` do.

Sources are kept as the JSON bytes the client sent and embedded into responses as they are,
so storing and returning a document costs no re-encoding. Every write is visible at once
(``refresh`` does nothing) and ``_primary_term`` is always 1. Writing to a missing index
creates it; a ``delete`` in a missing index is a 404 item. Field kinds are checked by
:mod:`tests.servers.elasticsearch.mapping` (400 ``mapper_parsing_exception``); a source with
``"_bad": true`` at its top level is always refused with 400 ``document_parsing_exception``.
Versions, external ones and delete tombstones included, follow :mod:`.versions`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from .errors import (
    EsRequestError,
    index_not_found,
    item_failure,
    missing_index_cause,
    raise_validation,
)
from .mapping import MARKER_FIELD, index_name_problem, mapping_problem
from .ndjson import parse_bulk
from .versions import conflict_reason, next_version

__all__ = ["EsStore"]

_SHARDS = {"total": 2, "successful": 1, "failed": 0}
_NOOP_SHARDS = {"total": 0, "successful": 0, "failed": 0}
_FAULTS = {
    429: (
        "es_rejected_execution_exception",
        "rejected execution of coordinating operation [shard_detail=[{}][0][P]]",
    ),
    503: ("unavailable_shards_exception", "[{}][0] primary shard is not active Timeout: [1m]"),
}

_SHARDS_JSON = orjson.dumps(_SHARDS).decode()
_NOTHING: frozenset[type] = frozenset()

# A stored document: (source bytes, _version, _seq_no, whether the server generated its id).
_Doc = tuple[bytes, int, int, bool]


class _Index:
    __slots__ = (
        "name",
        "uuid",
        "docs",
        "fields",
        "accept",
        "name_json",
        "seq_no",
        "auto_sources",
        "duplicate_sources",
        "tombstones",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.uuid = os.urandom(16).hex()[:22]
        self.docs: dict[str, _Doc] = {}
        self.fields: dict[str, str] = {}
        self.accept: dict[str, frozenset[type]] = {}
        self.name_json = orjson.dumps(name).decode()
        self.seq_no = -1
        self.auto_sources: dict[bytes, int] = {}
        self.duplicate_sources = 0
        self.tombstones: dict[str, int] = {}  # deleted id -> its version (see .versions)

    def current_version(self, doc_id: str, old: _Doc | None) -> int | None:
        """The id's version: its live document's, else its tombstone's."""
        return old[1] if old is not None else self.tombstones.get(doc_id)

    def next_seq_no(self) -> int:
        self.seq_no += 1
        return self.seq_no

    def put(self, doc_id: str, doc: _Doc) -> None:
        old = self.docs.get(doc_id)
        if old is not None and old[3]:
            self._forget(old[0])
        self.docs[doc_id] = doc
        if doc[3]:
            count = self.auto_sources.get(doc[0], 0)
            if count:
                self.duplicate_sources += 1
            self.auto_sources[doc[0]] = count + 1

    def remove(self, doc_id: str) -> None:
        old = self.docs.pop(doc_id, None)
        if old is not None and old[3]:
            self._forget(old[0])

    def _forget(self, source: bytes) -> None:
        count = self.auto_sources[source]
        if count > 1:
            self.duplicate_sources -= 1
            self.auto_sources[source] = count - 1
        else:
            del self.auto_sources[source]

    def failure(
        self, doc_id: str | None, status: int, error_type: str, reason: str
    ) -> dict[str, Any]:
        return item_failure(
            self.name,
            doc_id,
            status,
            error_type,
            reason,
            index_uuid=self.uuid,
            shard="0",
            index=self.name,
        )

    def success(
        self, doc_id: str, version: int, result: str, seq_no: int, status: int
    ) -> dict[str, Any]:
        return {
            "_index": self.name,
            "_id": doc_id,
            "_version": version,
            "result": result,
            "_shards": _SHARDS if result != "noop" else _NOOP_SHARDS,
            "_seq_no": seq_no,
            "_primary_term": 1,
            "status": status,
        }


class EsStore:
    """Indices and documents, and the item counters of :class:`EsStats`."""

    def __init__(self) -> None:
        self.indices: dict[str, _Index] = {}
        self.items_by_status: dict[int, int] = {}
        self.duplicate_applications = 0
        self._id_prefix = os.urandom(8).hex()[:10]
        self._id_counter = 0

    def duplicate_sources(self) -> int:
        """See :attr:`EsStats.duplicate_sources`."""
        return sum(idx.duplicate_sources for idx in self.indices.values())

    # -- writes -----------------------------------------------------------------------------

    def bulk(
        self,
        body: bytes,
        default_index: str | None,
        item_fault: Callable[[], int] | None = None,
        *,
        refuse_ids: bool = False,
    ) -> bytes:
        """Apply an NDJSON bulk body and return the response body.

        ``item_fault()``, if given, is asked once per item: 0 applies it, 429 or 503 fails it
        unapplied. ``refuse_ids`` fails every ``index`` or ``create`` item that names an
        ``_id``, as OpenSearch Serverless time-series and vector collections do.

        Raises:
            EsRequestError: the body is malformed; nothing was applied.
        """
        start = time.perf_counter()
        parts: list[str] = []
        errors = False
        by_status = self.items_by_status
        for op, index, doc_id, meta, source, raw in parse_bulk(body, default_index):
            fault = item_fault() if item_fault is not None else 0
            if fault:
                error_type, reason = _FAULTS[fault]
                failure = item_failure(index, doc_id, fault, error_type, reason.format(index))
                status, part, failed = _render(op, failure)
            elif refuse_ids and doc_id is not None and op in ("index", "create"):
                reason = "Document ID is not supported in create/index operation request"
                failure = item_failure(index, doc_id, 400, "illegal_argument_exception", reason)
                status, part, failed = _render(op, failure)
            elif op == "index" or op == "create":
                status, part, failed = self._index(op, index, doc_id, meta, source, raw)
            elif op == "update":
                assert doc_id is not None
                status, part, failed = _render(op, self._update(index, doc_id, meta, source))
            else:
                assert doc_id is not None
                status, part, failed = _render(op, self._delete(index, doc_id, meta))
            by_status[status] = by_status.get(status, 0) + 1
            errors = errors or failed
            parts.append(part)
        took = int((time.perf_counter() - start) * 1000)
        head = f'{{"errors":{"true" if errors else "false"},"took":{took},"items":['
        return (head + ",".join(parts) + "]}").encode()

    def _index(
        self, op: str, name: str, doc_id: str | None, meta: dict[str, Any], source: Any, raw: bytes
    ) -> tuple[int, str, bool]:
        idx = self.indices.get(name) or self._new_index(name)
        if isinstance(idx, str):
            return _render(op, item_failure(name, doc_id, 400, "invalid_index_name_exception", idx))
        auto = doc_id is None
        if doc_id is None:
            self._id_counter += 1
            doc_id = f"{self._id_prefix}{self._id_counter:010d}"
        if type(source) is not dict:
            return _render(op, _not_an_object(idx, doc_id))
        accept = idx.accept
        for key, value in source.items():
            if type(value) not in accept.get(key, _NOTHING):
                problem = _source_problem(idx, source, doc_id)
                if problem is not None:
                    return _render(op, problem)
                break
        old = idx.docs.get(doc_id)
        if "if_seq_no" in meta or "if_primary_term" in meta:
            conflict = _concurrency_conflict(idx, doc_id, old, meta)
            if conflict is not None:
                return _render(op, conflict)
        version = next_version(idx.current_version(doc_id, old), meta)
        if version is None:
            return _render(op, _version_conflict(idx, doc_id, old, meta))
        if old is None:
            result, status = "created", 201
            idx.tombstones.pop(doc_id, None)
        elif op == "create":
            reason = (
                f"[{doc_id}]: version conflict, document already exists "
                f"(current version [{old[1]}])"
            )
            return _render(
                op, idx.failure(doc_id, 409, "version_conflict_engine_exception", reason)
            )
        else:
            result, status = "updated", 200
            self.duplicate_applications += 1
        idx.seq_no += 1
        seq_no = idx.seq_no
        if auto or (old is not None and old[3]):
            idx.put(doc_id, (raw, version, seq_no, auto))
        else:
            idx.docs[doc_id] = (raw, version, seq_no, False)
        id_json = orjson.dumps(doc_id).decode()
        return (
            status,
            (
                f'{{"{op}":{{"_index":{idx.name_json},"_id":{id_json},"_version":{version},'
                f'"result":"{result}","_shards":{_SHARDS_JSON},"_seq_no":{seq_no},'
                f'"_primary_term":1,"status":{status}}}}}'
            ),
            False,
        )

    def _update(
        self, name: str, doc_id: str, meta: dict[str, Any], body: dict[str, Any]
    ) -> dict[str, Any]:
        idx = self._index_for_write(name)
        if not isinstance(idx, _Index):
            return item_failure(name, doc_id, 400, "invalid_index_name_exception", idx)
        if "script" in body:
            reason = "scripted updates are not supported by this test server"
            return idx.failure(doc_id, 400, "illegal_argument_exception", reason)
        old = idx.docs.get(doc_id)
        conflict = _concurrency_conflict(idx, doc_id, old, meta)
        if conflict is not None:
            return conflict
        doc = body.get("doc")
        if old is None:
            merged = doc if body.get("doc_as_upsert") is True else body.get("upsert")
            if merged is None:
                reason = f"[{doc_id}]: document missing"
                return idx.failure(doc_id, 404, "document_missing_exception", reason)
            version, result, status = idx.tombstones.pop(doc_id, 0) + 1, "created", 201
        else:
            current = orjson.loads(old[0])
            merged = _merge(current, doc) if type(doc) is dict else current
            if merged == current:
                return idx.success(doc_id, old[1], "noop", old[2], 200)
            version, result, status = old[1] + 1, "updated", 200
        if type(merged) is not dict:
            return _not_an_object(idx, doc_id)
        problem = _source_problem(idx, merged, doc_id)
        if problem is not None:
            return problem
        seq_no = idx.next_seq_no()
        auto = old[3] if old is not None else False
        idx.put(doc_id, (orjson.dumps(merged), version, seq_no, auto))
        return idx.success(doc_id, version, result, seq_no, status)

    def _delete(self, name: str, doc_id: str, meta: dict[str, Any]) -> dict[str, Any]:
        idx = self.indices.get(name)
        if idx is None:
            cause = missing_index_cause(name)
            return item_failure(name, doc_id, 404, cause.pop("type"), cause.pop("reason"), **cause)
        old = idx.docs.get(doc_id)
        conflict = _concurrency_conflict(idx, doc_id, old, meta)
        if conflict is not None:
            return conflict
        version = next_version(idx.current_version(doc_id, old), meta)
        if version is None:
            return _version_conflict(idx, doc_id, old, meta)
        seq_no = idx.next_seq_no()
        idx.tombstones[doc_id] = version
        if old is None:
            return idx.success(doc_id, version, "not_found", seq_no, 404)
        idx.remove(doc_id)
        return idx.success(doc_id, version, "deleted", seq_no, 200)

    def _index_for_write(self, name: str) -> _Index | str:
        idx = self.indices.get(name)
        return idx if idx is not None else self._new_index(name)

    def _new_index(self, name: str) -> _Index | str:
        problem = index_name_problem(name)
        if problem is not None:
            return problem
        idx = self.indices[name] = _Index(name)
        return idx

    # -- reads and index admin --------------------------------------------------------------

    def mget(self, body: bytes, default_index: str | None, with_source: bool) -> bytes:
        """Answer a multi-get body, ``{"docs": [{"_index", "_id"}, ...]}`` or ``{"ids": [...]}``.

        A missing document is ``{"_index", "_id", "found": false}``; a missing index gives
        that entry an ``index_not_found_exception`` ``error`` instead, as Elasticsearch does.

        Raises:
            EsRequestError: the body is malformed or an entry lacks an index or id.
        """
        try:
            request = orjson.loads(body or b"null")
        except orjson.JSONDecodeError as exc:
            raise EsRequestError(400, "x_content_parse_exception", f"[1:1] {exc}") from None
        specs: list[tuple[Any, Any, Any]]
        if isinstance(request, dict) and isinstance(request.get("docs"), list):
            specs = [
                (s.get("_index", default_index), s.get("_id"), s.get("_source", with_source))
                if isinstance(s, dict)
                else (None, None, None)
                for s in request["docs"]
            ]
        elif isinstance(request, dict) and isinstance(request.get("ids"), list):
            specs = [(default_index, doc_id, with_source) for doc_id in request["ids"]]
        else:
            specs = []
        problems = ["no documents to get"] if not specs else []
        for n, (index, doc_id, _) in enumerate(specs):
            if not isinstance(index, str):
                problems.append(f"index is missing for doc {n}")
            if doc_id is None:
                problems.append(f"id is missing for doc {n}")
        raise_validation(problems)
        docs: list[dict[str, Any]] = []
        for index, doc_id, source in specs:
            idx = self.indices.get(index)
            if idx is None:
                docs.append(
                    {"_index": index, "_id": str(doc_id), "error": missing_index_cause(index)}
                )
            else:
                docs.append(_get_result(idx, str(doc_id), source is not False))
        return orjson.dumps({"docs": docs})

    def get(self, name: str, doc_id: str, with_source: bool) -> tuple[int, bytes]:
        """Answer ``GET /{index}/_doc/{id}`` with (status, body).

        Raises:
            EsRequestError: 404, the index does not exist.
        """
        idx = self.indices.get(name)
        if idx is None:
            raise index_not_found(name)
        result = _get_result(idx, doc_id, with_source)
        return (200 if result["found"] else 404), orjson.dumps(result)

    def count(self, name: str | None) -> bytes:
        """Answer ``_count`` for one index, or every index when ``name`` is None.

        Raises:
            EsRequestError: 404, the index does not exist.
        """
        if name is None:
            total = sum(len(idx.docs) for idx in self.indices.values())
        else:
            idx = self.indices.get(name)
            if idx is None:
                raise index_not_found(name)
            total = len(idx.docs)
        shards = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}
        return orjson.dumps({"count": total, "_shards": shards})

    def create_index(self, name: str) -> bytes:
        """Answer ``PUT /{index}``; settings and mappings in the body are ignored.

        Raises:
            EsRequestError: 400, the name is invalid or the index exists.
        """
        problem = index_name_problem(name)
        if problem is not None:
            raise EsRequestError(400, "invalid_index_name_exception", problem, {"index": name})
        idx = self.indices.get(name)
        if idx is not None:
            raise EsRequestError(
                400,
                "resource_already_exists_exception",
                f"index [{name}/{idx.uuid}] already exists",
                {"index_uuid": idx.uuid, "index": name},
            )
        self.indices[name] = _Index(name)
        return orjson.dumps({"acknowledged": True, "shards_acknowledged": True, "index": name})

    def delete_index(self, name: str) -> bytes:
        """Answer ``DELETE /{index}``.

        Raises:
            EsRequestError: 404, the index does not exist.
        """
        if self.indices.pop(name, None) is None:
            raise index_not_found(name)
        return b'{"acknowledged":true}'

    def documents(self, name: str) -> bytes:
        """``{id: source}`` of one index as JSON (``{}`` when it does not exist)."""
        idx = self.indices.get(name)
        if idx is None:
            return b"{}"
        return orjson.dumps({doc_id: orjson.Fragment(doc[0]) for doc_id, doc in idx.docs.items()})


def _render(op: str, result: dict[str, Any]) -> tuple[int, str, bool]:
    return result["status"], orjson.dumps({op: result}).decode(), "error" in result


def _not_an_object(idx: _Index, doc_id: str) -> dict[str, Any]:
    reason = "[1:1] failed to parse: the document source must be a JSON object"
    return idx.failure(doc_id, 400, "document_parsing_exception", reason)


def _source_problem(idx: _Index, source: dict[str, Any], doc_id: str) -> dict[str, Any] | None:
    if source.get(MARKER_FIELD) is True:
        reason = "[1:2] failed to parse: the document is marked [_bad]"
        return idx.failure(doc_id, 400, "document_parsing_exception", reason)
    problem = mapping_problem(idx.fields, idx.accept, source, doc_id)
    if problem is not None:
        return idx.failure(doc_id, 400, "mapper_parsing_exception", problem)
    return None


def _merge(current: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    merged = dict(current)
    for key, value in doc.items():
        old = merged.get(key)
        merged[key] = _merge(old, value) if type(value) is dict and type(old) is dict else value
    return merged


def _concurrency_conflict(
    idx: _Index, doc_id: str, old: _Doc | None, meta: dict[str, Any]
) -> dict[str, Any] | None:
    if "if_seq_no" not in meta and "if_primary_term" not in meta:
        return None
    want_seq, want_term = meta.get("if_seq_no"), meta.get("if_primary_term")
    if old is not None and old[2] == want_seq and want_term == 1:
        return None
    if old is None:
        held = "but no document was found"
    else:
        held = f"current document has seqNo [{old[2]}] and primary term [1]"
    reason = (
        f"[{doc_id}]: version conflict, required seqNo [{want_seq}], "
        f"primary term [{want_term}]. {held}"
    )
    return idx.failure(doc_id, 409, "version_conflict_engine_exception", reason)


def _version_conflict(
    idx: _Index, doc_id: str, old: _Doc | None, meta: dict[str, Any]
) -> dict[str, Any]:
    current = idx.current_version(doc_id, old)
    assert current is not None  # a first write is never refused
    reason = conflict_reason(doc_id, current, meta)
    return idx.failure(doc_id, 409, "version_conflict_engine_exception", reason)


def _get_result(idx: _Index, doc_id: str, with_source: bool) -> dict[str, Any]:
    doc = idx.docs.get(doc_id)
    if doc is None:
        return {"_index": idx.name, "_id": doc_id, "found": False}
    result: dict[str, Any] = {
        "_index": idx.name,
        "_id": doc_id,
        "_version": doc[1],
        "_seq_no": doc[2],
        "_primary_term": 1,
        "found": True,
    }
    if with_source:
        result["_source"] = orjson.Fragment(doc[0])
    return result
