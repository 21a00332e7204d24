"""What an HTTP answer means for the entries of a request.

Whole-request outcomes, by status:

======================================  ==============================================
2xx                                     accepted; per-entry items are read if present
408, 425, 500, 502, 504, other 5xx      ``RetryableError``: the same call is re-sent
409                                     ``RetryableError``: an idempotent server still
                                        processes the first request with this key
429, 503                                ``ThrottledError``: re-sent, and the writer slows
400, 401, 403, 404, 413, 422, other     ``FatalError`` with the status and a body excerpt
  4xx, 1xx and 3xx
connection errors, timeouts, resets     ``RetryableError`` (a failed TLS certificate check
                                        is a ``FatalError``)
======================================  ==============================================

``Retry-After`` (seconds, fractional allowed, or an HTTP date) becomes ``retry_after``.

Per-entry outcomes come from 2xx bodies shaped ``{"errors": bool, "items": [...]}`` where
item *i* (``{"status": 201}``, ``{"status": 400, "error": "..."}``, or the same wrapped
in a one-key object as Elasticsearch does) is entry *i*'s fate: 2xx delivered; 408, 409,
425, 429 and 5xx retried (throttled for 429 and 503); any other status rejects the entry
as a bad record, with the item's error as reason.
"""

from __future__ import annotations

import email.utils
import re
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from asyncsink.errors import DestinationError, FatalError, RetryableError, ThrottledError
from asyncsink.request import SubmitResult

from .redact import Redactor

__all__ = [
    "RETRYABLE_STATUSES",
    "THROTTLE_STATUSES",
    "error_for_status",
    "error_for_transport",
    "held_by_status",
    "is_retryable_status",
    "parse_items",
    "parse_retry_after",
]

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Statuses whose request (or entry) may succeed if sent again."""
THROTTLE_STATUSES = frozenset({429, 503})
"""Statuses by which the destination pushes back."""

_ALL_OK = re.compile(rb'\s*\{\s*"errors"\s*:\s*false\s*[,}]')
"""A body that opens with ``"errors": false`` needs no parsing (the common answer)."""

_HINTS = {
    401: "check the authentication options (bearerToken, basicUsername/basicPassword, apiKey)",
    403: "the credentials are not allowed to write there",
    404: "check the url option",
    413: "the request is too large for the endpoint: lower maxBatchSizeInBytes or maxBatchSize",
}


def is_retryable_status(status: int) -> bool:
    """Whether a request or entry answered ``status`` may succeed if sent again."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay-seconds or an HTTP date), or
    ``None`` if absent or unreadable. A date in the past gives 0."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 and seconds != float("inf") else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def _where(request: httpx.Request) -> str:
    url = request.url
    return f"{request.method} {url.scheme}://{url.netloc.decode('ascii')}{url.path}"


def error_for_status(
    response: httpx.Response, redact: Redactor, *, body_size: int | None = None
) -> DestinationError:
    """The error for a non-2xx answer, carrying the status, ``Retry-After`` and a body
    excerpt (at most 500 characters, secrets masked)."""
    status = response.status_code
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    excerpt = redact.excerpt(response.content)
    status_line = f"HTTP {status} {response.reason_phrase}".rstrip()
    message = redact(f"{status_line} from {_where(response.request)}")
    if excerpt:
        message += f": {excerpt}"
    if status in THROTTLE_STATUSES:
        return ThrottledError(message, retry_after=retry_after, status=status)
    if is_retryable_status(status):
        return RetryableError(message, retry_after=retry_after, status=status)
    hint = _HINTS.get(status)
    if status == 413 and body_size is not None:
        hint = f"{hint} (the body was {body_size} bytes)"
    elif 300 <= status <= 399:
        location = redact(response.headers.get("location", "")[:200])
        hint = f"redirects are not followed: set url to the final location {location}".strip()
    if hint:
        message += f" ({hint})"
    return FatalError(message, retry_after=retry_after, status=status)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def error_for_transport(
    exc: httpx.HTTPError, request: httpx.Request | None, redact: Redactor
) -> DestinationError:
    """The error for a request that got no HTTP answer (the caller raises it ``from exc``)."""
    where = f" ({_where(request)})" if request is not None else ""
    detail = redact(str(exc)) or "no detail"
    message = f"{type(exc).__name__}{where}: {detail}"
    if isinstance(exc, httpx.TimeoutException):
        return RetryableError(f"request timed out: {message}")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return FatalError(f"request cannot be sent: {message}")
    if any(_is_certificate_error(e) for e in _chain(exc)):
        return FatalError(
            f"TLS certificate verification failed: {message} (set caBundle to the CA that "
            "signed the server's certificate)"
        )
    return RetryableError(f"request failed without an answer: {message}")


def _is_certificate_error(exc: BaseException) -> bool:
    return isinstance(exc, ssl.SSLCertVerificationError)


def _item_outcome(item: Any) -> tuple[int, Any]:
    """The status and error of one response item (``{"status": ...}``, maybe wrapped)."""
    if isinstance(item, Mapping) and "status" not in item and len(item) == 1:
        inner = next(iter(item.values()))
        if isinstance(inner, Mapping):
            item = inner
    if not isinstance(item, Mapping):
        return 0, f"unreadable item {orjson.dumps(item)[:100].decode(errors='replace')}"
    status = item.get("status")
    error = item.get("error")
    if status is None:
        return (500 if error else 200), error
    if isinstance(status, str) and status.isdigit():
        status = int(status)
    if not isinstance(status, int) or isinstance(status, bool):
        return 0, f"unreadable item status {status!r}"
    return status, error


def _reason(status: int, error: Any, redact: Redactor) -> str:
    if error is None:
        text = ""
    elif isinstance(error, str):
        text = error
    else:
        text = orjson.dumps(error, default=str).decode()
    text = redact(text[:300])
    text = text if len(text) <= 200 else text[:200] + "..."
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def parse_items(
    content: bytes,
    count: int,
    redact: Redactor,
    *,
    retry_after: float | None = None,
) -> SubmitResult | None:
    """Per-entry outcomes from a 2xx body, or ``None`` when every entry was accepted or the
    body is not of the ``{"errors": ..., "items": [...]}`` shape.

    Raises:
        FatalError: the body says some entries failed but does not say which (no items,
            or not one item per entry): the sink cannot know what to re-send.
    """
    if content.lstrip()[:1] != b"{" or _ALL_OK.match(content):
        return None
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    errors = data.get("errors")
    if errors is False:
        return None
    items = data.get("items")
    if not isinstance(items, list):
        if errors is True:
            raise FatalError(
                "the response says some entries failed but lists no items to tell which"
            )
        return None
    if len(items) != count:
        raise FatalError(
            f"the response lists {len(items)} items for a request of {count} entries: "
            "cannot tell which entries failed"
        )
    retry: list[int] = []
    rejected: dict[int, str] = {}
    throttled = False
    for index, item in enumerate(items):
        status, error = _item_outcome(item)
        if 200 <= status <= 299:
            continue
        if is_retryable_status(status):
            retry.append(index)
            throttled = throttled or status in THROTTLE_STATUSES
        else:
            rejected[index] = _reason(status, error, redact)
    if not retry and not rejected:
        return None
    return SubmitResult(
        retry=retry, rejected=rejected, throttled=throttled, retry_after=retry_after
    )


def held_by_status(payload: Any, seqs: Sequence[int]) -> Sequence[int] | None:
    """From an idempotency status resource's answer: the sequence numbers of the call's
    entries the destination holds, or ``None`` when it cannot be told.

    ``{"state": "completed", "status": ..., "response": {...}}``: a non-2xx stored status
    holds nothing; a stored ``items`` response holds the entries with 2xx items; otherwise
    all of them. Any other state (``in_flight``...) cannot be told yet.
    """
    if not isinstance(payload, Mapping) or payload.get("state") != "completed":
        return None
    status = payload.get("status")
    if isinstance(status, int) and not 200 <= status <= 299:
        return ()
    response = payload.get("response")
    items = response.get("items") if isinstance(response, Mapping) else None
    if not isinstance(items, list):
        return tuple(seqs)
    if len(items) != len(seqs):
        return None
    return tuple(seq for seq, item in zip(seqs, items, strict=True)
                 if 200 <= _item_outcome(item)[0] <= 299)  # fmt: skip
