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
as a bad record, with the item's error as reason. Such a body is read by the rule of
``asyncsink.sinks.web.answer``: a JSON answer cut short is retried, items that do not match the
request fail the writer, and no entry counts as delivered on an answer that does not say
so. A 2xx without items (``204``, ``OK``, ``{"accepted": 3}``) means every entry landed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from asyncsink.errors import DestinationError, FatalError, RetryableError, ThrottledError
from asyncsink.request import SubmitResult

from ..web.answer import load_answer, read_items
from ..web.classify import THROTTLE_STATUSES, is_retryable_status, parse_retry_after
from ..web.redact import Redactor
from ..web.transport import Answer
from .statuses import StatusRules

__all__ = ["error_for_status", "held_by_status", "parse_items", "rejected_whole"]

_SUCCESS = frozenset(range(200, 300))

_HINTS = {
    401: "check the authentication options (bearerToken, basicUsername/basicPassword, apiKey)",
    403: "the credentials are not allowed to write there",
    404: "check the url option",
    413: "the request is too large for the endpoint: lower maxBatchSizeInBytes or maxBatchSize",
}


def error_for_status(
    answer: Answer,
    redact: Redactor,
    *,
    body_size: int | None = None,
    hints: Mapping[int, str] | None = None,
    rules: StatusRules | None = None,
) -> DestinationError:
    """The error for an answer that is not a success, carrying the status,
    ``Retry-After`` and a body excerpt (at most 500 characters, secrets masked). ``hints``
    replace the built-in advice for their statuses (the signing options to check after a
    403...); ``rules`` say which statuses are retried (``retryStatusCodes``), else the
    built-in ones."""
    status = answer.status
    retry_after = parse_retry_after(answer.headers.get("retry-after"))
    excerpt = redact.excerpt(answer.content)
    status_line = f"HTTP {status} {answer.reason}".rstrip()
    message = redact(f"{status_line} from {answer.where}")
    if excerpt:
        message += f": {excerpt}"
    throttled = rules.throttled(status) if rules else status in THROTTLE_STATUSES
    if throttled:
        return ThrottledError(message, retry_after=retry_after, status=status)
    if rules.retried(status) if rules else is_retryable_status(status):
        return RetryableError(message, retry_after=retry_after, status=status)
    hint = (hints or {}).get(status) or _HINTS.get(status)
    if status == 413 and body_size is not None:
        hint = f"{hint} (the body was {body_size} bytes)"
    elif 300 <= status <= 399:
        location = redact((answer.headers.get("location") or "")[:200])
        hint = f"redirects are not followed: set url to the final location {location}".strip()
    if hint:
        message += f" ({hint})"
    return FatalError(message, retry_after=retry_after, status=status)


def rejected_whole(answer: Answer, count: int, redact: Redactor) -> SubmitResult:
    """A whole answer of a ``badRecordStatusCodes`` status: every entry of the request
    is a bad record, with the status and a body excerpt as reason."""
    excerpt = redact.excerpt(answer.content)
    reason = f"HTTP {answer.status} for the whole request"
    if excerpt:
        reason += f": {excerpt[:200]}"
    return SubmitResult(rejected=dict.fromkeys(range(count), reason))


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
    content_type: str | None = None,
    what: str = "the response",
    retry_after: float | None = None,
    rules: StatusRules | None = None,
) -> SubmitResult | None:
    """Per-entry outcomes from a 2xx body, or ``None`` when it says every entry was
    accepted: its items all delivered (2xx, or ``rules``' success statuses), or no items
    at all (a plain or empty answer, or JSON of another shape). ``what`` names the answer
    in messages (with no secret in it). An item of a status ``rules`` neither deliver nor
    retry is a bad record.

    Raises:
        RetryableError: the body should be JSON (by its ``content_type``, or by its look
            when it has none) and cannot be parsed: cut short on the way?
        FatalError: the body says some entries failed but does not say which, or its items
            do not match the request (see ``asyncsink.sinks.web.answer``).
    """
    payload = load_answer(content, content_type=content_type, what=what)
    items = read_items(payload, count, what=what)
    if items is None:
        return None
    statuses = items.statuses
    first = statuses[0] if statuses else 200
    success = rules.success if rules is not None else _SUCCESS
    if first in success and statuses.count(first) == len(statuses):
        return None  # every entry taken: the common answer, decided at once
    retry: list[int] = []
    rejected: dict[int, str] = {}
    throttled = False
    for index, status in enumerate(statuses):
        if status in success:
            continue
        if rules.retried(status) if rules is not None else is_retryable_status(status):
            retry.append(index)
            throttled = throttled or (
                rules.throttled(status) if rules is not None else status in THROTTLE_STATUSES
            )
        else:
            rejected[index] = _reason(status, items.body(index).get("error"), redact)
    if not retry and not rejected:
        return None
    reason = None
    if retry:  # the first to retry, for the message of a DeliveryError
        one = retry[0]
        reason = f"entry {one}: {_reason(statuses[one], items.body(one).get('error'), redact)}"
    return SubmitResult(
        retry=retry,
        rejected=rejected,
        throttled=throttled,
        retry_after=retry_after,
        reason=reason,
    )


def held_by_status(payload: Any, seqs: Sequence[int]) -> Sequence[int] | None:
    """From an idempotency status resource's answer: the sequence numbers of the call's
    entries the destination holds, or ``None`` when it cannot be told.

    ``{"state": "completed", "status": ..., "response": ...}``: a non-2xx stored status
    holds nothing; a stored 2xx response is read as ``parse_items`` reads an answer, and
    holds the entries it says were accepted. Any other state (``in_flight``...), a stored
    status that is not a number, a missing response, or a response that cannot be read
    cannot tell.
    """
    if not isinstance(payload, Mapping) or payload.get("state") != "completed":
        return None
    status = payload.get("status")
    if type(status) is not int or not 100 <= status <= 599 or "response" not in payload:
        return None
    if not 200 <= status <= 299:
        return ()
    try:
        items = read_items(payload["response"], len(seqs), what="the stored response")
    except FatalError:
        return None
    if items is None:
        return tuple(seqs)
    return tuple(seq for seq, status in zip(seqs, items.statuses, strict=True)
                 if 200 <= status <= 299)  # fmt: skip
