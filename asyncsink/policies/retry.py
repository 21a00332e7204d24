"""Retry policy: how a failure is classified, how long an entry backs off, and when it
gives up.

Whole-request failures are sorted into three kinds: ``RETRYABLE`` (try again after a
backoff), ``THROTTLED`` (the same, and congestion control backs off) and ``FATAL`` (fail
the writer now). A timeout is retryable (fatal with ``failOnTimeout``); a refused
connection is fatal at once with ``failFastOnConnectionRefused`` when nothing was ever
delivered to that destination from this process. Backoff is exponential with full
jitter, the delays of the ``backoff`` library's wait generators: the ceiling
``initial * 2**(attempt-1)``, capped at ``max``, and a delay drawn uniformly below it, so
that concurrent writers spread out; a destination's ``Retry-After`` hint lengthens it, up
to the same cap. An entry fails for good after ``maxRetries`` failed attempts.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import backoff

from ..clients.connections import ConnectionFailure, connection_failure, ever_reached
from ..errors import DeliveryError, FatalError, RetryableError, ThrottledError
from ..options import SinkOptions

__all__ = ["Backoff", "BackoffRetry", "ErrorKind", "RetryPolicy", "default_classification"]

log = logging.getLogger("asyncsink")

_POSITIONS_SHOWN = 10  # input positions of entries out of retries that a DeliveryError names


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


class Backoff:
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


class RetryPolicy(Protocol):
    """What a writer asks of its retry policy; ``BackoffRetry`` is the default.

    The writer sets ``scope`` (for logs) and reads ``exhausted`` (entries failed for good)
    and ``last_error`` for its statistics and its ``DeliveryError``.
    """

    scope: str
    exhausted: int
    last_error: BaseException | None

    def judge(
        self, error: BaseException | None, call_id: int, *, delivered: bool
    ) -> tuple[BaseException, ErrorKind]:
        """The error a failed request reports and its kind (``error`` ``None``: it timed
        out); ``delivered``: this writer delivered something already."""

    def attempt(
        self, seqs: Sequence[int], error: BaseException | None, retry_after: object
    ) -> tuple[list[int], float]:
        """Count a failed attempt of each of ``seqs``: the indexes of those to try again,
        and when (seconds from now); the others failed for good."""

    def forget(self, seqs: Sequence[int]) -> None:
        """Those entries are settled."""

    def give_up(self, count: int) -> None:
        """``count`` entries failed for good without a retry (a fatal error)."""

    def diverted(self, seqs: Sequence[int]) -> None:
        """Of the entries the last ``attempt`` gave up on, ``seqs`` were settled elsewhere
        (``onRetriesExhausted=deadLetter``): they did not fail. Asked only with that
        setting."""

    def delivery_error(self, delivered: int) -> DeliveryError | None:
        """The error the barrier raises for the entries that failed for good, if any."""


class BackoffRetry:
    """The default retry policy: classify a failure, back off, give up.

    - ``judge(error)`` (``None``: the request timed out): the error to report and its kind;
    - ``attempt(seqs)``: one more failed attempt of each entry: the indexes of those with
      retries left, and the backoff before they go again (at least ``retry_after``);
      the others are counted as failed for good;
    - ``forget(seqs)``: those entries are settled;
    - ``give_up(count, error)``, ``delivery_error(delivered)``: entries failed for good,
      and the ``DeliveryError`` the barrier raises for them;
    - ``diverted(seqs)``: of the entries just given up on, those went to the dead letters
      (``onRetriesExhausted=deadLetter``) and did not fail.

    Args:
        options: ``maxRetries``, the backoffs, ``failOnTimeout``,
            ``failFastOnConnectionRefused``, ``requestTimeoutMs``.
        classify: the sink's ``classify_error``.
        destination: the sink's ``describe_destination``, for messages.
    """

    def __init__(
        self,
        options: SinkOptions,
        classify: Callable[[BaseException], ErrorKind],
        destination: Callable[[], str],
    ) -> None:
        self.options = options
        self._classify = classify
        self._destination = destination
        self._backoff = Backoff(options.initial_backoff_ms, options.max_backoff_ms)
        self._attempts: dict[int, int] = {}  # seq -> failed attempts, while it has any
        self._connection_failed_once = False
        self.scope = ""  # for logs
        self.exhausted = 0  # entries failed for good
        self.exhausted_at: list[int] = []  # the first of their positions
        self.last_error: BaseException | None = None

    def judge(
        self, error: BaseException | None, call_id: int, *, delivered: bool
    ) -> tuple[BaseException, ErrorKind]:
        """The error a failed request reports and its kind (``error`` ``None``: it timed
        out); ``delivered``: this writer delivered something already."""
        if error is None:
            timeout = self.options.request_timeout_ms
            error = TimeoutError(
                f"request {call_id} got no response within requestTimeoutMs ({timeout})"
            )
            fatal = self.options.fail_on_timeout
            return error, ErrorKind.FATAL if fatal else ErrorKind.RETRYABLE
        kind = self._classify(error)
        if kind is not ErrorKind.FATAL and self._refused_at_once(error, delivered):
            fatal_error = FatalError(
                f"{self._destination()} refused the connection and nothing was ever "
                "delivered there from this process: is the destination running, and are "
                "its host and port right? (failFastOnConnectionRefused=false retries "
                f"instead): {error}"
            )
            fatal_error.__cause__ = error
            return fatal_error, ErrorKind.FATAL
        return error, kind

    def _refused_at_once(self, error: BaseException, delivered: bool) -> bool:
        """Log the writer's first failed connection; whether ``error`` is a refused
        connection to fail on at once."""
        failure = connection_failure(error)
        if failure is None:
            return False
        destination = self._destination()
        if not self._connection_failed_once:
            self._connection_failed_once = True
            log.warning(
                "%s: cannot connect to %s (%s): %s", self.scope, destination, failure.value, error
            )
        return (
            failure is ConnectionFailure.REFUSED
            and self.options.fail_fast_on_connection_refused
            and not delivered
            and not ever_reached(destination)
        )

    def attempt(
        self, seqs: Sequence[int], error: BaseException | None, retry_after: object
    ) -> tuple[list[int], float]:
        """Count a failed attempt of each of ``seqs``: the indexes of those to try again,
        and when (seconds from now)."""
        self.last_error = error
        attempts = 0
        kept: list[int] = []
        attempts_of, max_retries = self._attempts, self.options.max_retries
        for index, seq in enumerate(seqs):
            count = attempts_of.get(seq, 0) + 1
            attempts = max(attempts, count)
            if count > max_retries:
                attempts_of.pop(seq, None)
                if len(self.exhausted_at) < _POSITIONS_SHOWN:
                    self.exhausted_at.append(seq)
            else:
                attempts_of[seq] = count
                kept.append(index)
        if len(kept) < len(seqs):
            self.give_up(len(seqs) - len(kept))
            log.warning(
                "%s: %d entries out of retries (maxRetries=%d): %s",
                self.scope,
                len(seqs) - len(kept),
                max_retries,
                error,
            )
        return kept, self._backoff.delay(attempts, retry_after) if kept else 0.0

    def forget(self, seqs: Sequence[int]) -> None:
        if self._attempts:
            for seq in seqs:
                self._attempts.pop(seq, None)

    def give_up(self, count: int) -> None:
        self.exhausted += count

    def diverted(self, seqs: Sequence[int]) -> None:
        self.exhausted -= len(seqs)
        if self.exhausted_at:
            gone = set(seqs)
            self.exhausted_at = [seq for seq in self.exhausted_at if seq not in gone]

    def delivery_error(self, delivered: int) -> DeliveryError | None:
        if not self.exhausted:
            return None
        return DeliveryError(self.exhausted, delivered, self.last_error, self.exhausted_at)
