"""Congestion control: how much a writer may have in flight, decided in one place.

Two limits bound what is in flight: requests (``ConcurrencyLimiter``, learned from their
latency as TCP Vegas does; ``adaptiveConcurrency``) and entries (``AIMDWindow``;
``rateLimiting``). ``Congestion`` composes them into one strategy, so that one controller
decides what each signal means:

- an answer: the limiter judges its latency; an answer in full grows the window;
- a throttle (a whole request, or entries of one) or a timeout is a congestion event
  when its request left after the last one (one event per round trip, as TCP has). It
  halves the requests in flight; a throttle also halves the window of entries, and the
  batch size with it. A later signal of the same round trip changes nothing.

The writer reads ``capacity`` before it starts a request and reports every answer and
every congestion signal; it never touches the limits itself. A writer of a destination
starts from what the last one of the same destination learned in this process
(``resume``), and hands on what it learned when it closes (``close``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Protocol

from ..options import SinkOptions
from .entry_window import AIMDWindow, EntryWindow
from .request_limit import ConcurrencyLimiter, RequestLimit, recall, remember

__all__ = ["Congestion", "CongestionStrategy"]


class CongestionStrategy(Protocol):
    """What a writer asks of its congestion control. Times are ``time.monotonic()``;
    ``limit`` (requests) and ``window`` (entries) are read for statistics."""

    @property
    def limit(self) -> int: ...

    @property
    def window(self) -> int: ...

    def resume(self, destination: Hashable) -> None:
        """Start from what the last writer of ``destination`` learned in this process."""

    def close(self) -> None:
        """Hand on what was learned to the next writer of the destination."""

    def capacity(self, requests: int, entries: int) -> int:
        """Entries the next request may carry while ``requests`` requests carrying
        ``entries`` entries are in flight; 0: no request may start now."""

    def batch_limit(self) -> int:
        """The most entries a request may carry now."""

    def on_answer(self, sent: float, now: float, in_flight: int, *, full: bool) -> None:
        """A request that left at ``sent`` was answered (``in_flight``: itself included;
        ``full``: it carried at least half a batch)."""

    def on_success(self) -> None:
        """An answer accepted every entry of its request."""

    def on_congestion(self, sent: float, now: float, *, throttled: bool) -> None:
        """The destination throttled a request that left at ``sent``, or it timed out."""


class Congestion:
    """The writer's congestion strategy: the request limit and the entry window, with one
    decision per congestion event. ``limit`` and ``window`` are read for statistics.

    Args:
        options: ``maxBatchSize``, ``maxInFlightRequests``, ``adaptiveConcurrency``,
            ``rateLimiting``.
        requests: the request limit; a ``ConcurrencyLimiter`` from ``options`` if omitted
            (and only that one resumes from what an earlier writer learned).
        entries: the entry window; an ``AIMDWindow`` from ``options`` if omitted.
    """

    def __init__(
        self,
        options: SinkOptions,
        *,
        requests: RequestLimit | None = None,
        entries: EntryWindow | None = None,
    ) -> None:
        self._batch = options.max_batch_size
        self._maximum = options.max_in_flight_requests
        self._adaptive = options.adaptive_concurrency
        self._resumes = self._adaptive and requests is None  # a given limit is kept
        self._window: EntryWindow = entries or AIMDWindow(
            ceiling=options.max_batch_size * options.max_in_flight_requests,
            increase=max(1, options.max_batch_size // 10),
            enabled=options.rate_limiting,
        )
        self._limiter: RequestLimit = requests or ConcurrencyLimiter(
            maximum=self._maximum, adaptive=self._adaptive
        )
        self._key: Hashable | None = None
        self._last_event = -math.inf
        self._batch_limit = self._batch

    @property
    def limit(self) -> int:
        return self._limiter.limit

    @property
    def window(self) -> int:
        return self._window.size

    def resume(self, destination: Hashable) -> None:
        """Start from what the last writer of ``destination`` (with the same maximum)
        learned in this process, and hand on to the next one on ``close``."""
        if not self._resumes:
            return
        self._key = key = (destination, self._maximum)
        learned = recall(key)
        if learned is not None:
            self._limiter = ConcurrencyLimiter(maximum=self._maximum, start=learned)

    def close(self) -> None:
        if self._key is not None:
            remember(self._key, self._limiter.learned())

    def capacity(self, requests: int, entries: int) -> int:
        if requests >= self._limiter.limit:
            return 0
        room = self._window.size - entries
        return min(self._batch, room) if room > 0 else 0

    def batch_limit(self) -> int:
        return self._batch_limit

    def on_answer(self, sent: float, now: float, in_flight: int, *, full: bool) -> None:
        self._limiter.on_response(sent, now, in_flight, full=full)

    def on_success(self) -> None:
        self._window.on_success()
        self._batch_limit = min(self._batch, self._window.size)

    def on_congestion(self, sent: float, now: float, *, throttled: bool) -> None:
        if sent <= self._last_event:
            return  # the same round trip as the last event: already answered
        self._last_event = now
        self._limiter.on_congestion(sent, now)
        if throttled:
            self._window.on_congestion(sent, now)
            self._batch_limit = min(self._batch, self._window.size)
