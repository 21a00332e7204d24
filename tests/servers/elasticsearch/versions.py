"""Document versions as Elasticsearch keeps them: internal and external versioning, and
delete tombstones.

Each document id of an index has a current version: its live document's, or, once it was
deleted, its tombstone's. Elasticsearch keeps a tombstone for ``index.gc_deletes`` (60 s
by default); this server keeps it for the life of the index, so a stale write after a
delete is always refused.

- ``version_type`` ``external``: a write needs a version above the current one;
  ``external_gte``: at least the current one. A refused write is a 409
  ``version_conflict_engine_exception``. The document (or tombstone) takes the given version.
- Internal versioning (no ``version_type``): each write adds one to the current version.
- A ``delete`` of an id with no live document still leaves a tombstone (``not_found``,
  404), carrying its external version or the next internal one.

Elasticsearch validates a bulk request before it executes any item: an external version
on ``create`` or ``update``, a ``version`` without an external ``version_type``, an
unknown ``version_type`` or an external one without a valid ``version`` fail the whole
request with 400 ``action_request_validation_exception`` (see ``version_problem``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXTERNAL", "conflict_reason", "next_version", "version_problem"]

EXTERNAL = frozenset({"external", "external_gte"})
_TYPES = frozenset({"internal", *EXTERNAL})
_MAX = 2**63 - 1
_CAS = (
    "internal versioning can not be used for optimistic concurrency control. "
    "Please use `if_seq_no` and `if_primary_term` instead"
)


def version_problem(op: str, meta: dict[str, Any]) -> str | None:
    """Why Elasticsearch's validation refuses the versioning of one action, or ``None``."""
    version_type = meta.get("version_type", "internal")
    version = meta.get("version")
    if version_type not in _TYPES:
        return f"No version type match [{version_type}]"
    if op == "update":
        if version_type != "internal":
            return f"version type [{version_type.upper()}] is not supported by the update API"
        return _CAS if version is not None else None
    if version_type == "internal":
        return _CAS if version is not None else None
    if op == "create":
        return "create operations only support internal versioning. use index instead"
    if type(version) is not int or not 0 <= version <= _MAX:
        shown = -3 if version is None else version
        return f"illegal version value [{shown}] for version type [{version_type.upper()}]"
    return None


def next_version(current: int | None, meta: dict[str, Any]) -> int | None:
    """The version a write gets, given the id's ``current`` version (``None``: never
    written, or its tombstone is gone); ``None``: the write is refused (a 409)."""
    version_type = meta.get("version_type")
    if version_type not in EXTERNAL:
        return 1 if current is None else current + 1
    wanted: int = meta["version"]
    if current is None:
        return wanted
    if version_type == "external" and wanted > current:
        return wanted
    if version_type == "external_gte" and wanted >= current:
        return wanted
    return None


def conflict_reason(doc_id: str, current: int, meta: dict[str, Any]) -> str:
    """The reason of the 409 for a refused external version."""
    than = "higher or equal to" if meta.get("version_type") == "external" else "higher than"
    return (
        f"[{doc_id}]: version conflict, current version [{current}] is {than} the one "
        f"provided [{meta.get('version')}]"
    )
