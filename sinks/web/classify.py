"""What a request that got no answer, and an answer's status and ``Retry-After``, mean to
every sink that talks HTTP: retry, slow down, or fail.

Statuses 408, 409, 425, 429 and 5xx may succeed if sent again (429 and 503 also say: slow
down). A request without an answer is retried, unless it cannot be sent at all (a bad
URL, a refused TLS certificate): that is a ``FatalError``. ``Retry-After`` (seconds,
fractional allowed, or an HTTP date) becomes the error's ``retry_after``.
"""

from __future__ import annotations

import email.utils
import ssl
import time

import httpx

from asyncsink.errors import DestinationError, FatalError, RetryableError

from .redact import Redactor

__all__ = [
    "RETRYABLE_STATUSES",
    "THROTTLE_STATUSES",
    "error_for_transport",
    "is_retryable_status",
    "parse_retry_after",
    "request_of",
]

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Statuses whose request (or entry) may succeed if sent again."""
THROTTLE_STATUSES = frozenset({429, 503})
"""Statuses by which the destination pushes back."""


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
    if any(_refuses_client_certificate(e) for e in _chain(exc)):
        return FatalError(
            f"the server refused the TLS handshake for want of a client certificate: "
            f"{message} (mutual TLS: set clientCert and clientKey to a certificate the "
            "server trusts)"
        )
    return RetryableError(f"request failed without an answer: {message}")


def _is_certificate_error(exc: BaseException) -> bool:
    return isinstance(exc, ssl.SSLCertVerificationError)


# OpenSSL's alerts from a server that wants a (valid) client certificate.
_CLIENT_CERT_ALERTS = (
    "CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_HANDSHAKE_FAILURE",
    "UNKNOWN_CA",
)


def _refuses_client_certificate(exc: BaseException) -> bool:
    if not isinstance(exc, ssl.SSLError):
        return False
    reason = str(getattr(exc, "reason", "") or exc).upper()
    return any(alert in reason for alert in _CLIENT_CERT_ALERTS)


def request_of(exc: httpx.HTTPError) -> httpx.Request | None:
    """The request an httpx error is about, if it says."""
    try:
        return exc.request
    except RuntimeError:
        return None
