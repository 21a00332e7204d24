"""Adaptive concurrency: how many requests may be in flight, learned from their latency.

A fixed number of requests in flight is wrong for almost every destination: too few
leaves a far endpoint idle between answers (at 100 ms a request, 16 in flight carry at
most 160 requests a second), too many piles requests into a queue in front of a busy
one, where they only add latency and time out. ``ConcurrencyLimiter`` finds the number
the way TCP Vegas finds a congestion window (and Vector's adaptive request concurrency
a request limit): it compares the latency of recent requests with the lowest latency
seen, the *floor*, and estimates how many of the requests in flight are only queueing:

    queued = in_flight * (1 - floor / latency)

Requests are judged a *round* at a time (about one round trip: the answers to requests
sent since the last change of the limit, at least half the limit of them), on the
round's mean latency and mean concurrency, Little's law made into a rule:

- *grow* while fewer than ``alpha`` requests queue and the limit was used in full (an
  idle limit proves nothing): double it in the first rounds (slow start), then add its
  square root a round;
- *hold* between ``alpha`` and ``beta`` queued requests;
- *shrink* beyond ``beta``, to the concurrency the destination served without queueing
  plus ``alpha`` (at most by half a round);
- *back off* when the destination throttles or a request times out: halve the limit,
  once per round trip (a request already in flight when the limit last shrank does not
  shrink it again), and leave slow start.

``alpha`` is 2 requests or a tenth of the concurrency, ``beta`` 4 or three tenths,
whichever is more: at most a few requests wait at a destination that queues, and at high
concurrency the noise of a busy client's event loop does not read as a queue. A
destination serving C requests at a time at latency S so settles near C + 2 in flight,
and its requests take about S * (C + 2) / C.

The floor is the lowest mean latency of a round; only requests carrying at least half
a full batch count, since a small request (a retry, the last of the input) is faster
than the batches it would be compared with. A floor not seen again for ``FLOOR_TTL_S``
may be stale (the destination got slower for good, or a queue stood all along): the
next round then runs at half the limit and its mean latency becomes the floor.

``adaptive=False`` pins the limit at ``maximum``.
"""

from __future__ import annotations

import math

__all__ = ["ConcurrencyLimiter"]


class ConcurrencyLimiter:
    """The number of requests a writer may have in flight, adapted to their latency.

    The writer reads ``limit`` before it starts a request and reports every answer to
    ``on_response`` and every throttle or timeout to ``on_congestion``. Times are the
    caller's clock readings in seconds (``time.monotonic()``); nothing here reads a clock,
    so a simulated destination drives it deterministically.

    Args:
        maximum: the upper bound (``maxInFlightRequests``).
        adaptive: ``False`` keeps the limit at ``maximum``.
        initial: the limit to start from (capped at ``maximum``).
    """

    INITIAL = 16
    BACKOFF = 0.5
    SLOW_START_FACTOR = 1.5
    ALPHA, ALPHA_SHARE = 2.0, 0.1
    BETA, BETA_SHARE = 4.0, 0.2
    NOISE = 2.0  # standard errors of a round's mean latency read as noise, not queueing
    FIRST_PROBE, PROBE_EVERY = 1, 50  # rounds

    __slots__ = (
        "adaptive",
        "floor",
        "limit",
        "maximum",
        "slow_start",
        "_in_flight_sum",
        "_last_decrease",
        "_latency_squares",
        "_latency_sum",
        "_peak",
        "_probe_saved",
        "_rounds_to_probe",
        "_round_start",
        "_samples",
        "_value",
    )

    def __init__(self, *, maximum: int, adaptive: bool = True, initial: int = INITIAL) -> None:
        self.maximum = max(1, maximum)
        self.adaptive = adaptive
        self._value = float(min(self.maximum, max(1, initial)) if adaptive else self.maximum)
        self.limit = int(self._value)
        self.slow_start = True
        self.floor: float | None = None  # seconds
        self._rounds_to_probe = self.FIRST_PROBE
        self._last_decrease = -math.inf
        self._probe_saved: float | None = None
        self._round_start = -math.inf
        self._samples = 0
        self._latency_sum = 0.0
        self._latency_squares = 0.0
        self._in_flight_sum = 0
        self._peak = 0

    def __repr__(self) -> str:
        floor = f"{self.floor * 1000:.1f} ms" if self.floor is not None else "unknown"
        mode = "adaptive" if self.adaptive else "fixed"
        return f"<ConcurrencyLimiter {mode} limit={self.limit}/{self.maximum} floor={floor}>"

    def on_response(self, started: float, now: float, in_flight: int, *, full: bool = True) -> None:
        """A request sent at ``started`` was answered at ``now``, while ``in_flight``
        requests (itself included) were out; ``full``: it carried at least half a batch.

        Answers to requests sent before the limit last changed, and to small requests,
        are not judged: they say nothing of the limit now in force.
        """
        if not self.adaptive or not full or started < self._round_start:
            return
        latency = now - started
        self._samples += 1
        self._latency_sum += latency
        self._latency_squares += latency * latency
        self._in_flight_sum += in_flight
        if in_flight > self._peak:
            self._peak = in_flight
        if self._samples >= min(self._value, self._peak):
            self._end_round(now)

    def on_congestion(self, started: float, now: float) -> None:
        """The destination throttled a request sent at ``started``, or it timed out."""
        if not self.adaptive or started <= self._last_decrease:
            return
        value = self._probe_saved if self._probe_saved is not None else self._value
        self._probe_saved = None
        self._last_decrease = now
        self.slow_start = False
        self._set(value * self.BACKOFF, now)

    # ------------------------------------------------------------------ rounds

    def _end_round(self, now: float) -> None:
        count = self._samples
        mean = self._latency_sum / count
        variance = max(0.0, self._latency_squares / count - mean * mean)
        # The round's latency less its noise: only queueing beyond the noise counts.
        latency = max(mean - self.NOISE * math.sqrt(variance / count), 0.0)
        in_flight = self._in_flight_sum / count
        used_in_full = self._peak >= self.limit
        if self._probe_saved is not None:
            self.floor = mean
            value, self._probe_saved = self._probe_saved, None
            self._set(value, now)
            return
        if self.floor is None or mean < self.floor:
            self.floor = mean
        self._rounds_to_probe -= 1
        if self._rounds_to_probe <= 0 and self.limit > 1:
            self._rounds_to_probe = self.PROBE_EVERY
            self._probe_saved = self._value
            self._set(self._value / 2, now)
            return
        self._set(self._next_value(latency, in_flight, used_in_full), now)

    def _next_value(self, latency: float, in_flight: float, used_in_full: bool) -> float:
        assert self.floor is not None
        value = self._value
        queued = in_flight * max(0.0, 1 - self.floor / latency) if latency > 0 else 0.0
        alpha = max(self.ALPHA, self.ALPHA_SHARE * in_flight)
        beta = max(self.BETA, self.BETA_SHARE * in_flight)
        if queued > beta:
            self.slow_start = False
            served = in_flight - queued  # what the destination took without queueing
            return max(value / 2, min(value, served + alpha))
        if queued >= alpha:
            self.slow_start = False
            return value
        if not used_in_full:
            return value
        if self.slow_start:
            return value * self.SLOW_START_FACTOR
        return value + max(1.0, alpha - queued)

    def _set(self, value: float, now: float) -> None:
        """Take a new limit and start a new round."""
        self._value = min(float(self.maximum), max(1.0, value))
        self.limit = int(self._value)
        if self.limit >= self.maximum:
            self.slow_start = False
        self._round_start = now
        self._samples = 0
        self._latency_sum = 0.0
        self._latency_squares = 0.0
        self._in_flight_sum = 0
        self._peak = 0
