"""Retry policy: how a failure is classified and how long an entry backs off.

Whole-request failures are sorted into three kinds: ``RETRYABLE`` (try again after a
backoff), ``THROTTLED`` (the same, and the rate limiter shrinks its window) and ``FATAL``
(fail the writer now). Backoff is exponential with full jitter, the delays of the
``backoff`` library's wait generators: the ceiling ``initial * 2**(attempt-1)``, capped at
``max``, and a delay drawn uniformly below it, so that concurrent writers spread out; a
destination's ``Retry-After`` hint lengthens it, up to the same cap.
"""

from __future__ import annotations

import enum

import backoff

from .errors import FatalError, RetryableError, ThrottledError

__all__ = ["ErrorKind", "RetryPolicy", "default_classification"]


class ErrorKind(enum.Enum):
    RETRYABLE = "retryable"
    THROTTLED = "throttled"
    FATAL = "fatal"


def default_classification(exc: BaseException) -> ErrorKind:
    """Sink errors by their class; timeouts and connection errors retry; the rest is fatal.

    An unknown exception is most often a bug (a ``TypeError`` in a converter, say), which
    retrying would only hide, so it fails the writer.
    """
    if isinstance(exc, ThrottledError):
        return ErrorKind.THROTTLED
    if isinstance(exc, RetryableError):
        return ErrorKind.RETRYABLE
    if isinstance(exc, FatalError):
        return ErrorKind.FATAL
    if isinstance(exc, TimeoutError | ConnectionError):
        return ErrorKind.RETRYABLE
    return ErrorKind.FATAL


class RetryPolicy:
    """Backoff delays in seconds for the ``attempt``-th retry (1-based)."""

    def __init__(self, initial_ms: int, max_ms: int) -> None:
        self.initial = initial_ms / 1000
        self.max = max_ms / 1000
        self._waits = backoff.expo(factor=self.initial, max_value=self.max)
        next(self._waits)  # the generator's priming step
        self._ceilings: list[float] = []

    def ceiling(self, attempt: int) -> float:
        """The longest delay before the ``attempt``-th retry."""
        while len(self._ceilings) < attempt:
            self._ceilings.append(min(self.max, next(self._waits)))
        return self._ceilings[max(attempt, 1) - 1]

    def delay(self, attempt: int, retry_after: object = None) -> float:
        """The backoff of the ``attempt``-th retry, at least the destination's
        ``retry_after`` (seconds, also as text such as a ``Retry-After`` header's ``"5"``;
        anything else is no hint), at most the longest backoff."""
        delay = float(backoff.full_jitter(self.ceiling(attempt)))
        hint = _seconds(retry_after)
        if hint is not None and hint > delay:
            delay = min(hint, self.max)
        return delay


def _seconds(value: object) -> float | None:
    """A retry hint as seconds, or ``None`` when it is none."""
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if seconds >= 0 else None  # NaN compares False: no hint
