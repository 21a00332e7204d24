"""Errors of the Elasticsearch test endpoint, in the shapes Elasticsearch gives them.

A failed request answers ``{"error": {"root_cause": [cause], **cause}, "status": N}``; a
failed ``_bulk`` item is ``{"_index", "_id", "status", "error": cause}`` inside a 200.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "EsRequestError",
    "error_body",
    "index_not_found",
    "item_failure",
    "missing_index_cause",
    "raise_validation",
]


class EsRequestError(Exception):
    """The whole request fails with ``status``, an ES-style body and optional headers."""

    def __init__(
        self,
        status: int,
        error_type: str,
        reason: str,
        details: Mapping[str, Any] | None = None,
        *,
        headers: tuple[tuple[str, str], ...] = (),
        body: bytes | None = None,
    ) -> None:
        super().__init__(f"{status} {error_type}: {reason}")
        self.status = status
        self.headers = headers
        # ``body``: another product's shape (AWS's ``{"message"}``, OpenSearch's 406).
        self.body = body or error_body(status, error_type, reason, **(details or {}))


def error_body(status: int, error_type: str, reason: str, **extra: Any) -> bytes:
    """The JSON body of a failed request."""
    cause = {"type": error_type, "reason": reason, **extra}
    return orjson.dumps({"error": {"root_cause": [cause], **cause}, "status": status})


def missing_index_cause(name: str) -> dict[str, str]:
    """The error object for an index that does not exist."""
    return {
        "type": "index_not_found_exception",
        "reason": f"no such index [{name}]",
        "resource.type": "index_or_alias",
        "resource.id": name,
        "index_uuid": "_na_",
        "index": name,
    }


def index_not_found(name: str) -> EsRequestError:
    """404 for a request naming an index that does not exist."""
    cause = missing_index_cause(name)
    error_type, reason = cause.pop("type"), cause.pop("reason")
    return EsRequestError(404, error_type, reason, cause)


def raise_validation(problems: list[str]) -> None:
    """400 ``action_request_validation_exception`` listing ``problems``, if there are any."""
    if problems:
        reason = "Validation Failed: " + "".join(f"{n}: {p};" for n, p in enumerate(problems, 1))
        raise EsRequestError(400, "action_request_validation_exception", reason)


def item_failure(
    index_name: str, doc_id: str | None, status: int, error_type: str, reason: str, /, **extra: str
) -> dict[str, Any]:
    """One failed ``_bulk`` item; ``extra`` joins its error object."""
    error = {"type": error_type, "reason": reason, **extra}
    return {"_index": index_name, "_id": doc_id, "status": status, "error": error}
