"""Retry policy: how a failure is classified and how long an entry backs off.

Whole-request failures are sorted into three kinds: ``RETRYABLE`` (try again after a
backoff), ``THROTTLED`` (the same, and the rate limiter shrinks its window) and ``FATAL``
(fail the writer now). Backoff is exponential with jitter, ``initial * 2**(attempt-1)``
capped at ``max``, drawn uniformly from its upper half so concurrent writers spread out;
a destination's ``Retry-After`` hint lengthens it, up to the same cap.
"""

from __future__ import annotations

import enum
import random

from .errors import FatalError, RetryableError, ThrottledError

__all__ = ["ErrorKind", "RetryPolicy", "default_classification"]


class ErrorKind(enum.Enum):
    RETRYABLE = "retryable"
    THROTTLED = "throttled"
    FATAL = "fatal"


def default_classification(exc: BaseException) -> ErrorKind:
    """Shim errors by their class; timeouts and connection errors retry; the rest is fatal.

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

    def __init__(self, initial_ms: int, max_ms: int, *, rng: random.Random | None = None) -> None:
        self.initial = initial_ms / 1000
        self.max = max_ms / 1000
        self._rng = rng or random.Random()

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        ceiling = min(self.max, self.initial * 2 ** min(max(attempt - 1, 0), 62))
        delay = self._rng.uniform(ceiling / 2, ceiling)
        if retry_after is not None and retry_after > delay:
            delay = min(retry_after, self.max)
        return delay
