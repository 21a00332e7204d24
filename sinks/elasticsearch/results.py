"""What an Elasticsearch answer means for the documents of a request.

Whole requests, by status:

=================================  ======================================================
2xx                                the items of the answer are read (below)
429, 503                           ``ThrottledError``: the same call is re-sent, slower
408, 500, 502, 504, other 5xx      ``RetryableError``: the same call is re-sent
401                                ``FatalError``: the credentials were refused
403                                ``FatalError``: the credentials lack a privilege
404                                ``FatalError``: no such index (or no API at that URL)
413                                ``FatalError``: lower ``maxBatchSizeInBytes``
any other status                   ``FatalError``: the request is malformed
=================================  ======================================================

``Retry-After`` (seconds or an HTTP date) becomes the error's ``retry_after``.

Bulk items, by status (item *i* is document *i*):

- 2xx: delivered; also a ``create`` answered 409 (the document is already there) and a
  ``delete`` answered 404 (there is nothing to delete).
- 409 to a versioned ``index`` or ``delete`` (``versionField``): the index holds this
  version or a newer one. Delivered, and counted as ``skipped_stale``: never retried.
- 429: retried, and the writer slows down; 408, 409 (a concurrent change) and 5xx: retried.
- 401 or 403 (no privilege on that index) and 404 ``index_not_found_exception``: the
  request fails with ``FatalError``, since every other document would fail the same way.
- Any other status (400 ``mapper_parsing_exception``, ``document_parsing_exception``...):
  the document is rejected as a bad record, with the item's error as the reason.

The answer itself is read by the shared rule (``asyncsink.sinks.web.answer``), with items
required: a body that is not JSON (cut short, empty, a proxy's page) is retried as the
same call, and one that does not list an ``{operation: {"status": ...}}`` item per
document fails the request. No document counts as written unless its item says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from asyncsink.errors import DestinationError, FatalError, RetryableError, ThrottledError
from asyncsink.request import SubmitResult

from ..web.answer import load_answer, read_items
from ..web.classify import parse_retry_after
from ..web.redact import Redactor

__all__ = ["error_for_response", "held_by_mget", "read_bulk_items"]

_HINTS = {
    401: "authentication failed: check apiKey, basicUsername/basicPassword or bearerToken",
    403: "the credentials lack a privilege this request needs (writing needs 'index' or "
    "'create_doc' on the index; refresh needs 'maintenance')",
    413: "the request is larger than the cluster takes (http.max_content_length): lower "
    "maxBatchSizeInBytes",
}


def _describe(error: Any, redact: Redactor, limit: int = 300) -> str:
    """``type: reason`` of an Elasticsearch error object (with its first cause)."""
    if isinstance(error, Mapping):
        text = f"{error.get('type', 'error')}: {error.get('reason', '')}".rstrip(": ")
        cause = error.get("caused_by")
        if isinstance(cause, Mapping):
            text += f" (caused by {cause.get('type', 'error')}: {cause.get('reason', '')})"
    elif error is None:
        text = ""
    else:
        text = str(error)
    text = redact(text[: limit + redact.longest])
    return text if len(text) <= limit else text[:limit] + "..."


_ID_HINT = (
    "OpenSearch Serverless time-series and vector collections take no _id: set "
    "autoIds=true to let the collection pick ids (delivery is then at least once), or "
    "write to a search collection"
)


def _refuses_ids(error: Any) -> bool:
    """An item error saying the index takes no client-given ``_id`` (OpenSearch
    Serverless time-series and vector collections)."""
    reason = str(error.get("reason", "")) if isinstance(error, Mapping) else str(error or "")
    return "document id is not supported" in reason.lower()


def _error_type(error: Any) -> str:
    return str(error.get("type", "")) if isinstance(error, Mapping) else ""


def error_for_response(
    response: httpx.Response,
    redact: Redactor,
    *,
    body_size: int | None = None,
    hints: Mapping[int, str] | None = None,
) -> DestinationError:
    """The error for a non-2xx answer: its status, ``Retry-After``, the Elasticsearch
    error type and reason, and a hint for the statuses a user must act on. Secrets are
    masked; the URL carries no credentials (they are refused in ``hosts``)."""
    status = response.status_code
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    error: Any = None
    try:
        payload = orjson.loads(response.content) if response.content else None
    except orjson.JSONDecodeError:
        payload = None
    if isinstance(payload, Mapping):
        error = payload.get("error")
    if error is None and response.content:
        error = response.content[:400].decode("utf-8", errors="replace")
    request = response.request
    where = f"{request.method} {request.url.copy_with(query=None)}"
    detail = _describe(error, redact)
    message = redact(f"Elasticsearch answered HTTP {status} to {where}")
    if detail:
        message += f": {detail}"
    if status in (429, 503):
        return ThrottledError(message, retry_after=retry_after, status=status)
    if status == 408 or 500 <= status <= 599:
        return RetryableError(message, retry_after=retry_after, status=status)
    hint = (hints or {}).get(status) or _HINTS.get(status)
    if status == 404:
        if _error_type(error) == "index_not_found_exception":
            hint = "the index does not exist and the cluster does not create it on write: create it"
        else:
            hint = "check the hosts option: no Elasticsearch API answers at this URL"
    elif status == 413 and body_size is not None:
        hint = f"{hint} (the body was {body_size} bytes)"
    if hint:
        message += f" ({hint})"
    return FatalError(message, retry_after=retry_after, status=status)


def read_bulk_items(
    content: bytes,
    operation: str | None,
    count: int,
    redact: Redactor,
    *,
    retry_after: float | None = None,
    hints: Mapping[int, str] | None = None,
    versioned: bool = False,
) -> SubmitResult | None:
    """Per-document outcomes of a 2xx ``_bulk`` answer for ``count`` documents: ``None``
    when every one was delivered, else the documents to retry and to reject, and those
    a newer version had superseded (``stale``). ``operation`` ``None``: each item's own
    (``operationField``); ``versioned``: index and delete operations carried a version.

    Raises:
        RetryableError: the answer is not JSON (cut short on the way?).
        FatalError: the answer does not list one readable item per document, or an item
            says no document of the request can be written (401, 403, missing index, or
            an OpenSearch Serverless collection that takes no ``_id``).
    """
    what = "the _bulk answer"
    payload = load_answer(content, content_type=None, what=what, required=True)
    items = read_items(
        payload, count, what=what, unit="documents", required=True, operation=operation
    )
    assert items is not None  # required
    retry: list[int] = []
    rejected: dict[int, str] = {}
    stale: list[int] = []
    throttled = False
    for index, status in enumerate(items.statuses):
        if 200 <= status <= 299:
            continue
        op = operation or _operation_of(items.raw[index])
        if (status == 409 and op == "create") or (status == 404 and op == "delete"):
            continue  # already there / nothing to delete: the operation's aim holds
        if status == 409 and versioned and op in ("index", "delete"):
            stale.append(index)  # the index holds this version or a newer one
            continue
        result = items.body(index)
        error = result.get("error")
        if status == 429:
            retry.append(index)
            throttled = True
        elif status in (408, 409) or 500 <= status <= 599:
            retry.append(index)
        elif status == 400 and _refuses_ids(error):
            raise FatalError(
                redact(f"the cluster refused a document id for index {result.get('_index')}")
                + f": {_describe(error, redact)} ({_ID_HINT})",
                status=status,
            )
        elif status in (401, 403) or _error_type(error) == "index_not_found_exception":
            hint = (hints or {}).get(status) or _HINTS.get(
                status, "the index does not exist: create it first"
            )
            raise FatalError(
                redact(f"Elasticsearch refused a document for index {result.get('_index')}")
                + f" with HTTP {status}: {_describe(error, redact)} ({hint})",
                status=status,
            )
        else:
            rejected[index] = f"HTTP {status} {_describe(error, redact)}".rstrip()
    if not retry and not rejected:
        return SubmitResult(stale=stale) if stale else None
    reason = None
    if retry:  # the first to retry, for the message of a DeliveryError
        one = retry[0]
        error = items.body(one).get("error")
        reason = f"document {one}: HTTP {items.statuses[one]} {_describe(error, redact)}"
    return SubmitResult(
        retry=retry,
        rejected=rejected,
        throttled=throttled,
        retry_after=retry_after,
        reason=reason.rstrip() if reason else None,
        stale=stale,
    )


def _operation_of(item: Any) -> str:
    """The operation an item answers: the key of its one-key wrapper."""
    return next(iter(item), "") if isinstance(item, Mapping) and len(item) == 1 else ""


def held_by_mget(
    content: bytes, seqs: Sequence[int], *, ids: Sequence[str] | None = None
) -> list[int] | None:
    """From an ``_mget`` answer for the documents of ``seqs`` (in order, with ``ids`` when
    given): the sequence numbers whose documents the index holds, or ``None`` if the
    answer cannot be read: not JSON, not one doc per id, a doc for another id than the one
    asked at its place, a ``found`` that is not a boolean, or an error other than a
    missing index (which holds no document)."""
    try:
        payload = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    docs = payload.get("docs") if isinstance(payload, Mapping) else None
    if not isinstance(docs, list) or len(docs) != len(seqs):
        return None
    held: list[int] = []
    for index, (seq, doc) in enumerate(zip(seqs, docs, strict=True)):
        if not isinstance(doc, Mapping):
            return None
        if ids is not None and doc.get("_id") != ids[index]:
            return None
        if "error" in doc:
            if _error_type(doc["error"]) != "index_not_found_exception":
                return None
            continue
        found = doc.get("found")
        if type(found) is not bool:
            return None
        if found:
            held.append(seq)
    return held
