"""Adaptive concurrency: how many requests may be in flight, learned from their latency.

A fixed number of requests in flight is wrong for almost every destination: too few
leaves a far endpoint idle between answers (at 100 ms a request, 16 in flight carry at
most 160 requests a second), too many piles requests into a queue in front of a busy
one, where they only add latency and time out. ``ConcurrencyLimiter`` finds the number
the way TCP Vegas finds a congestion window (and Vector's adaptive request concurrency
a request limit): it compares the latency of recent requests with the latency of the
destination unloaded, the *floor*, and estimates how many requests in flight only queue:

    queued = in_flight * (1 - floor / latency)

Requests are judged a *round* at a time: the answers to as many requests as the limit
allows (or as were in flight, if fewer), all sent since the limit last changed, so about
one round trip. A round's latency is the median of its answers' (a queue at the
destination delays every request; a stall that delays a few of them, a pause of the
destination or of a machine shared with other work, is not a queue, and fewer requests
would not cure it), and its concurrency the mean number in flight at each answer:

- *grow* while fewer than ``alpha`` requests queue and the limit was used in full (an
  idle limit proves nothing): double it (slow start) up to the *threshold*, the last limit
  that queued beyond ``beta`` (none at first), then by what is left to ``alpha`` queued
  requests, at least one. The round right after a growth also grows, however many it
  finds queued, when the growth brought at least half its share of answers a second
  more (in flight / latency): its latency carries the burst of sending the new requests
  (this process's work and the destination's), and a queue adds no answers;
- *hold* between ``alpha`` and ``beta`` queued requests;
- *shrink* beyond ``beta``, to the concurrency the destination served without queueing
  plus ``alpha``, by a quarter a round at most: at once if the limit just grew, else
  when a second round in a row says so (one slow round may be a hiccup of a busy
  machine, which fewer requests would not cure); and while this process itself was on
  the CPU for half the round or more (its own work then slows the answers, and at
  20 ms and below a Python client is often the bottleneck, not the destination), only
  when two rounds in a row say so (the first after a growth also carries the burst of
  work that sent the new requests) and the last growth did not bring at least half its
  share of answers a second more (in flight / latency, against the lower limit
  before), and then back to it;
- *back off* when the destination throttles or a request times out: halve the limit,
  once per round trip (a request sent before the limit last shrank does not shrink it
  again), and make that the threshold; growing back, add one a round from 80% of the
  limit it was throttled at, up to that limit.

``alpha`` is 15% of the concurrency less one request, at least two (as in TCP Vegas), and
``beta`` twice ``alpha``: three or four requests wait at a destination of a small
capacity (C = 8 settles near 11, C = 16 near 20), since at a few requests in flight one
request's share of the latency is within the noise of a round's median; and at high
concurrency, where the noise of a busy machine is larger still, up to 15-30% of them
(latency up to 1.4 times the floor).

The first round is not judged: it pays for opening connections. It ends at its first
answer: a request sent from then on finds a connection open, and the round judged next
starts a round trip sooner than if it waited for the rest of the opening burst. The
floor is the lowest latency of a round, and only requests carrying at least half a
full batch are judged at all: a small request (a retry, the end of the input) is faster
than the batches it would be compared with. A floor goes stale (the destination got
slower for good, or a queue stood since the start, or the machine is busier), so it is
*probed*: after the first round judged and every ``PROBE_EVERY`` rounds, and at once when
shrinking the limit did not bring latency down, a round runs at half the limit and its
latency becomes the floor. While halving lowers latency by a tenth or more (the round
before still queued), the probe goes on at half again, at most ``PROBE_DEPTH`` times;
then the round before the probe is judged against the floor it found, so that a probe
costs slow start no round of its own. A probe is also a round at a lower limit: the round
before it is judged, as a round after a growth is, by whether its extra requests brought
answers a second in proportion, so a busy client whose limit grew past what pays (or
started there, see below) comes back down.

``adaptive=False`` pins the limit at ``maximum``.

A writer lives for one Spark task, often a few hundred requests, and would spend much of
that in slow start, climbing again to the limit the task before it found at the same
destination. So a limiter hands on what it learned (``learned``: the limit, the limit
the destination last throttled at, and the latency of its last round) to the next
limiter of the same destination in the same process (``start``). That one opens its
connections at ``initial``, as a new limiter does, and takes the learned limit at the
first answer, unless that answer was more than ``RESUME_SLOWER`` times slower than the
last round the limit was learned from: the destination got slower, and a burst of the
old limit's requests would only queue there (and time out); it then grows from
``initial`` as a new limiter does. Either way it is in slow start below half the limit
the destination last throttled at, if any. Everything else it learns again: the floor
as above, so a limit that no longer fits (a destination with less capacity, a busier
machine) shrinks as any limit that queues does, and a throttle or a timeout halves it at
once. ``remember`` and ``recall`` keep the latest per destination.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ConcurrencyLimiter", "Learned", "RequestLimit", "forget_learned", "recall", "remember"]

# A judged round: its median latency, mean in flight, whether the limit was used in full,
# answers a second.
_Round = tuple[float, float, bool, float]


@dataclass(frozen=True, slots=True)
class Learned:
    """What a limiter learned of a destination, for the next limiter to start from."""

    value: float  # the limit, unrounded
    congested_at: float  # the limit the destination last throttled at (0: never)
    latency: float  # seconds: the median latency of the last round judged


class RequestLimit(Protocol):
    """How many requests may be in flight, as congestion control asks it;
    ``ConcurrencyLimiter`` is the default."""

    @property
    def limit(self) -> int: ...

    def on_response(self, started: float, now: float, in_flight: int, *, full: bool = True) -> None:
        """A request sent at ``started`` was answered at ``now`` (see ``ConcurrencyLimiter``)."""

    def on_congestion(self, started: float, now: float) -> None:
        """The destination throttled a request sent at ``started``, or it timed out."""

    def learned(self) -> Learned | None:
        """What was learned, for the next limit of the same destination (``None``: nothing)."""


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
        start: what an earlier limiter of the same destination learned: its limit is
            taken at the first answer, unless that answer is much slower than before
            (slow start below half the limit it was throttled at, if it was).
        cpu_clock: this process's CPU time in seconds, to tell a busy client from a
            queueing destination; ``None`` judges by latency alone.
    """

    INITIAL = 16
    SLOW_START_FACTOR = 2.0
    ALPHA_SHARE = 0.15  # alpha: this share of the requests in flight less one,
    ALPHA_LEAST = 2.0  # and at least this many requests
    SHRINK_LIMIT = 0.75  # one round's latency takes at most a quarter off the limit
    BACKOFF = 0.5  # a throttle or a timeout halves it
    UNHELPED = 0.95  # a shrink that lowers latency by less than this was not about queues
    FIRST_PROBE, PROBE_EVERY = 1, 50  # rounds
    PROBE_LOWER = 0.9  # a probe round this much faster than the one before probes lower
    PROBE_DEPTH = 4  # halvings
    CLOSE_TO_CONGESTION = 0.8  # from this share of the last throttled limit, grow by one
    BUSY = 0.5  # share of a round this process spent on the CPU that makes it the bottleneck
    GAIN = 0.5  # share of the answers a second more requests should add, when busy
    RESUME_SLOWER = 2.0  # a first answer this much slower than before: start afresh

    __slots__ = (
        "adaptive",
        "floor",
        "limit",
        "maximum",
        "threshold",
        "_congested_at",
        "_cpu_clock",
        "_cpu_start",
        "_in_flight_sum",
        "_last_decrease",
        "_last_rate",
        "_previous_rate",
        "_latencies",
        "_latency_sum",
        "_peak",
        "_grew",
        "_probe",
        "_resume",
        "_round_latency",
        "_queued_last",
        "_round_start",
        "_rounds_to_probe",
        "_shrunk_at",
        "_busy",
        "_value",
        "_warming",
    )

    def __init__(
        self,
        *,
        maximum: int,
        adaptive: bool = True,
        initial: int = INITIAL,
        start: Learned | None = None,
        cpu_clock: Callable[[], float] | None = time.process_time,
    ) -> None:
        self.maximum = max(1, maximum)
        self._cpu_clock = cpu_clock
        self._cpu_start = 0.0
        self.adaptive = adaptive
        self._value = float(min(self.maximum, max(1, initial)) if adaptive else self.maximum)
        self.limit = int(self._value)
        self.threshold = math.inf  # slow start below it
        self.floor: float | None = None  # seconds
        self._last_decrease = -math.inf
        self._congested_at = 0.0  # the limit the destination last throttled at
        # (limit, answers a second) of the last round judged, and of the last one before
        # it at another limit
        self._last_rate: tuple[int, float] | None = None
        self._previous_rate: tuple[int, float] | None = None
        self._shrunk_at: float | None = None  # latency of the round that shrank it
        self._rounds_to_probe = self.FIRST_PROBE
        self._warming = True
        self._busy = False
        # while probing: the limit to return to, the last round's latency, how many
        # times the limit was halved, and the round before the probe, to judge at its end
        self._probe: tuple[float, float, int, _Round] | None = None
        self._grew = True  # the last decision raised the limit (the first round counts)
        self._queued_last = False  # the last round queued beyond ``beta``
        self._round_start = -math.inf
        self._latencies: list[float] = []  # of the answers judged this round
        self._latency_sum = 0.0
        self._in_flight_sum = 0
        self._peak = 0
        self._round_latency: float | None = None  # of the last round judged
        # A learned limit to take at the first answer, if that answer shows the
        # destination about as fast as when the limit was learned.
        self._resume: Learned | None = None
        if adaptive and start is not None:
            self._resume = start
            # A queue the last writer found may have been its own (a busy client, a
            # latency since changed): slow start again, below a throttle's threshold.
            if start.congested_at:
                self.threshold = start.congested_at * self.BACKOFF
            self._congested_at = start.congested_at

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
        self._latencies.append(latency)
        self._latency_sum += latency
        self._in_flight_sum += in_flight
        if in_flight > self._peak:
            self._peak = in_flight
        if self._warming or len(self._latencies) >= min(self._value, self._peak):
            self._end_round(now)

    def on_congestion(self, started: float, now: float) -> None:
        """The destination throttled a request sent at ``started``, or it timed out."""
        if not self.adaptive or started <= self._last_decrease:
            return
        value = self._probe[0] if self._probe is not None else self._value
        self._probe = None
        self._last_decrease = now
        self._congested_at = value
        self.threshold = value * self.BACKOFF
        self._set(value * self.BACKOFF, now)

    def learned(self) -> Learned | None:
        """What this limiter learned, for the next one of the same destination; ``None``
        before it judged a round (or when it does not adapt)."""
        if not self.adaptive or self._round_latency is None:
            return None
        value = self._probe[0] if self._probe is not None else self._value
        return Learned(value, self._congested_at, self._round_latency)

    # ------------------------------------------------------------------ rounds

    def _end_round(self, now: float) -> None:
        count = len(self._latencies)
        if self._warming:  # the first answer ends the round that opened connections
            self._warming = False
            resume, self._resume = self._resume, None
            if resume is not None and self._latencies[0] <= self.RESUME_SLOWER * resume.latency:
                self._value = min(float(self.maximum), max(1.0, resume.value))
            self._set(self._value, now)
            return
        if self._probe is not None:
            rate = self._in_flight_sum / self._latency_sum  # answers a second
            self._end_probe_round(statistics.median_low(self._latencies), rate, now)
            return
        latency = statistics.median_low(self._latencies)
        self._round_latency = latency
        in_flight = self._in_flight_sum / count
        used_in_full = self._peak >= self.limit
        self._busy = self._busy_round(now)
        if self.floor is None or latency < self.floor:
            self.floor = latency
        if self._shrunk_at is not None and latency >= self._shrunk_at * self.UNHELPED:
            # Fewer requests, no less latency: it rose for another reason (a slower
            # destination, a busier machine), and the floor is out of date.
            self._rounds_to_probe = 0
        self._shrunk_at = None
        rate = in_flight * count / self._latency_sum  # answers a second, by Little's law
        if self._last_rate is not None and self._last_rate[0] != self.limit:
            self._previous_rate = self._last_rate
        self._last_rate = (self.limit, rate)
        judged = (latency, in_flight, used_in_full, rate)
        self._rounds_to_probe -= 1
        if self._rounds_to_probe <= 0 and self.limit > 1:
            # This round is judged once the probe has learned the floor.
            self._rounds_to_probe = self.PROBE_EVERY
            self._probe = (self._value, latency, 1, judged)
            self._set(self._value / 2, now)
            return
        self._set(self._next_value(*judged), now)

    def _end_probe_round(self, latency: float, rate: float, now: float) -> None:
        assert self._probe is not None
        saved, previous, depth, judged = self._probe
        self.floor = latency
        lower = latency < previous * self.PROBE_LOWER and not self._busy_round(now)
        if lower and depth < self.PROBE_DEPTH and self.limit > 1:
            # Halving lowered latency, not by sparing this process work: the round
            # before queued; so may this one.
            self._probe = (saved, latency, depth + 1, judged)
            self._set(self._value / 2, now)
            return
        self._probe = None
        if self._peak >= self.limit:
            # The probe is also a round at a lower limit: the round before it is judged
            # by whether its extra requests brought more answers, as after a growth.
            self._previous_rate = (self.limit, rate)
        self._value = saved
        self._set(self._next_value(*judged), now)

    def _next_value(
        self, latency: float, in_flight: float, used_in_full: bool, rate: float
    ) -> float:
        assert self.floor is not None
        value = self._value
        queued = in_flight * max(0.0, 1 - self.floor / latency) if latency > 0 else 0.0
        alpha = max(self.ALPHA_LEAST, self.ALPHA_SHARE * in_flight - 1)
        beta = 2 * alpha
        grew, self._grew = self._grew, False
        queued_last, self._queued_last = self._queued_last, queued > beta
        before = self._previous_rate
        # More requests that did not bring at least half their share of answers more
        paid = (
            before is None
            or before[0] >= value
            or rate >= before[1] * (1 + self.GAIN * (value / before[0] - 1))
        )
        # Busy, the round right after a growth also carries the burst of work that sent
        # the new requests: only a second round in a row says the destination queues.
        confirmed = queued_last or (grew and not self._busy)
        if queued > beta and confirmed and (not paid or not self._busy):
            self.threshold = value
            self._shrunk_at = latency
            served = in_flight - queued  # what the destination took without queueing
            target = max(value * self.SHRINK_LIMIT, min(value, served + alpha))
            if self._busy and before is not None:  # back to the limit that answered more
                target = max(target, float(before[0]))
            return target
        # Right after a growth, latency carries the burst of sending the new requests
        # (this process's work, and the destination's): answers a second say whether
        # the growth paid, and then it goes on.
        grew_and_paid = grew and before is not None and paid
        if (queued >= alpha and not grew_and_paid) or not used_in_full:
            return value
        self._grew = True
        if value * self.SLOW_START_FACTOR <= self.threshold:
            return value * self.SLOW_START_FACTOR
        if self.CLOSE_TO_CONGESTION * self._congested_at <= value <= self._congested_at:
            return value + 1.0  # carefully, near where the destination last throttled
        return value + max(1.0, alpha - queued)

    def _busy_round(self, now: float) -> bool:
        """Whether this process spent most of the round on the CPU: then latency rose
        with its own work, which fewer requests do not cure (they only answer fewer)."""
        if self._cpu_clock is None or now <= self._round_start:
            return False
        used = self._cpu_clock() - self._cpu_start
        return used >= self.BUSY * (now - self._round_start)

    def _set(self, value: float, now: float) -> None:
        """Take a new limit and start a new round."""
        self._value = min(float(self.maximum), max(1.0, value))
        self.limit = int(self._value)
        self._round_start = now
        if self._cpu_clock is not None:
            self._cpu_start = self._cpu_clock()
        self._latencies = []
        self._latency_sum = 0.0
        self._in_flight_sum = 0
        self._peak = 0


# ---------------------------------------------------------------------- per process

_MEMORY = 256  # destinations remembered; the least recently used is forgotten first
_learned: OrderedDict[Hashable, Learned] = OrderedDict()
_lock = threading.Lock()


def remember(destination: Hashable, learned: Learned | None) -> None:
    """Keep what a limiter of ``destination`` learned (nothing, for ``None``)."""
    if learned is None:
        return
    with _lock:
        _learned[destination] = learned
        _learned.move_to_end(destination)
        while len(_learned) > _MEMORY:
            _learned.popitem(last=False)


def recall(destination: Hashable) -> Learned | None:
    """What the last limiter of ``destination`` in this process learned, if any."""
    with _lock:
        return _learned.get(destination)


def forget_learned() -> None:
    """Forget every destination: the next limiters start at ``INITIAL`` again."""
    with _lock:
        _learned.clear()
