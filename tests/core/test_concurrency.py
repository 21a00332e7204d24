"""Adaptive concurrency against simulated destinations, in simulated time.

A client that always has a full batch to send keeps ``limiter.limit`` requests in flight
and reports each answer, as the writer does; a destination model decides when each
request is answered and whether it is throttled. Everything is deterministic and runs in
milliseconds.
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from asyncsink.policies.request_limit import ConcurrencyLimiter, Learned

MS = 0.001


class Fixed:
    """Every request takes ``latency``, however many are in flight: no queue at all."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def answer(self, now: float, in_flight: int) -> tuple[float, bool]:
        return now + self.latency, False


class Queueing:
    """At most ``capacity`` requests served at once for ``service`` each (give or take
    ``spread``, drawn from a seeded generator); the rest wait in line."""

    def __init__(self, capacity: int, service: float, *, spread: float = 0.2) -> None:
        self.free = [0.0] * capacity
        self.service = service
        self.spread = spread
        self.rng = random.Random(7)

    def answer(self, now: float, in_flight: int) -> tuple[float, bool]:
        start = max(now, heapq.heappop(self.free))
        end = start + self.service * (1 + self.spread * (self.rng.random() - 0.5))
        heapq.heappush(self.free, end)
        return end, False


class Throttling:
    """Answers after ``latency``; throttles a request sent while more than ``allowed``
    were in flight (``allowed`` may change during a run)."""

    def __init__(self, latency: float, allowed: int) -> None:
        self.latency = latency
        self.allowed = allowed

    def answer(self, now: float, in_flight: int) -> tuple[float, bool]:
        return now + self.latency, in_flight > self.allowed


class Busy:
    """A client busy with its own work: every request in flight adds to every request's
    latency (20 ms alone, 40 with 32 in flight), yet more in flight still answer more."""

    def answer(self, now: float, in_flight: int) -> tuple[float, bool]:
        return now + 20 * MS + 20 * MS / 32 * in_flight, False


Destination = Fixed | Queueing | Throttling | Busy


@dataclass
class Run:
    limiter: ConcurrencyLimiter
    destination: Destination
    now: float = 0.0
    limits: list[tuple[float, int]] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)
    throttled: int = 0
    _pending: list[tuple[float, int, float, bool]] = field(default_factory=list)
    _seq: int = 0

    def until(
        self, end: float, *, at_most: int | None = None, change: Callable[[Run], None] | None = None
    ) -> Run:
        """Keep ``limiter.limit`` requests in flight (or ``at_most``) until ``end``."""
        while self.now < end:
            if change is not None:
                change(self)
            wanted = self.limiter.limit if at_most is None else min(at_most, self.limiter.limit)
            while len(self._pending) < wanted:
                answered, throttled = self.destination.answer(self.now, len(self._pending) + 1)
                heapq.heappush(self._pending, (answered, self._seq, self.now, throttled))
                self._seq += 1
            answered, _, started, throttled = heapq.heappop(self._pending)
            self.now = answered
            if throttled:
                self.throttled += 1
                self.limiter.on_congestion(started, answered)
            else:
                self.limiter.on_response(started, answered, len(self._pending) + 1)
                self.latencies.append((answered, answered - started))
            self.limits.append((answered, self.limiter.limit))
        return self

    def limits_after(self, start: float) -> list[int]:
        return [limit for at, limit in self.limits if at >= start]

    def p99_after(self, start: float) -> float:
        values = sorted(latency for at, latency in self.latencies if at >= start)
        return values[int(0.99 * (len(values) - 1))]

    def first_time_at(self, limit: int, after: float = 0.0) -> float:
        return next(at for at, value in self.limits if at >= after and value >= limit)


def adaptive(
    maximum: int = 128,
    cpu_clock: Callable[[], float] | None = None,
    start: Learned | None = None,
) -> ConcurrencyLimiter:
    """An adaptive limiter judging by latency alone, unless given a CPU clock."""
    return ConcurrencyLimiter(maximum=maximum, cpu_clock=cpu_clock, start=start)


def test_grows_to_the_upper_bound_within_a_few_round_trips_while_latency_stays_at_its_floor() -> (
    None
):
    run = Run(adaptive(128), Fixed(20 * MS)).until(1.0)
    assert run.first_time_at(128) < 0.3  # 15 round trips, probes included
    assert run.limiter.floor == pytest.approx(20 * MS)
    assert min(run.limits_after(0.3)) >= 64  # only the floor probes dip, to half


def test_settles_near_the_capacity_of_a_destination_that_queues() -> None:
    run = Run(adaptive(128), Queueing(16, 20 * MS)).until(5.0)
    settled = run.limits_after(1.0)
    assert 16 <= max(settled) <= 24  # capacity plus a few; probes dip below it
    assert sum(16 <= limit <= 24 for limit in settled) / len(settled) > 0.9
    assert run.p99_after(1.0) < 2 * 20 * MS
    # what the limit keeps away: a fixed 64 in flight quadruples every request's latency
    fixed = Run(ConcurrencyLimiter(maximum=64, adaptive=False), Queueing(16, 20 * MS)).until(5.0)
    assert fixed.p99_after(1.0) > 3.5 * 20 * MS


def test_serves_a_destination_at_its_capacity() -> None:
    run = Run(adaptive(128), Queueing(16, 20 * MS)).until(5.0)
    answered = sum(1 for at, _ in run.latencies if at >= 1.0)
    assert answered / 4.0 > 0.95 * 16 / (20 * MS)  # requests a second


def test_shrinks_when_latency_rises_as_the_destination_loses_capacity() -> None:
    run = Run(adaptive(128), Queueing(64, 20 * MS)).until(2.0)
    assert max(run.limits_after(1.0)) >= 64
    run.destination = Queueing(16, 20 * MS)
    run.until(4.0)
    assert max(run.limits_after(3.0)) <= 24  # at most a quarter less a round trip
    assert run.p99_after(3.0) < 2 * 20 * MS


def test_relearns_its_floor_when_the_destination_gets_slower_for_good() -> None:
    run = Run(adaptive(128), Fixed(20 * MS)).until(1.0)
    run.destination = Fixed(60 * MS)  # no queue: every request is just slower now
    run.until(8.0)
    assert run.limiter.floor == pytest.approx(60 * MS)
    assert run.first_time_at(128, after=1.5) < 8.0
    assert run.limiter.limit >= 64


class CpuClock:
    """This process's CPU time: ``share`` of the simulated time that passed."""

    def __init__(self, run: Run, share: float) -> None:
        self.run, self.share = run, share

    def __call__(self) -> float:
        return self.run.now * self.share


def run_on_cpu(destination: Destination, share: float) -> Run:
    run = Run(adaptive(128), destination)
    run.limiter = adaptive(128, cpu_clock=CpuClock(run, share))
    return run.until(3.0)


def test_a_busy_client_does_not_read_its_own_slowness_as_a_queue() -> None:
    idle, busy = run_on_cpu(Busy(), 0.1), run_on_cpu(Busy(), 0.9)
    assert statistics.median(idle.limits_after(1.0)) < 16  # latency alone: "a queue"
    assert statistics.median(busy.limits_after(1.0)) >= 16  # its own work: kept
    answered = [sum(1 for at, _ in run.latencies if at >= 1.0) for run in (idle, busy)]
    assert answered[1] > 1.05 * answered[0]


def test_a_busy_client_still_finds_a_queue_that_more_requests_do_not_get_through() -> None:
    busy = run_on_cpu(Queueing(16, 20 * MS), 0.9)
    assert statistics.median(busy.limits_after(1.0)) <= 24
    assert busy.p99_after(1.0) < 2 * 20 * MS


def test_halves_when_throttled_and_once_per_round_trip() -> None:
    limiter = adaptive(128)
    assert limiter.limit == 16
    for _ in range(10):  # ten requests in flight together, all throttled
        limiter.on_congestion(started=0.0, now=0.02)
    assert limiter.limit == 8
    limiter.on_congestion(started=0.01, now=0.03)  # sent before the halving: same event
    assert limiter.limit == 8
    limiter.on_congestion(started=0.025, now=0.05)  # sent after it: a new one
    assert limiter.limit == 4
    assert limiter.threshold == 4  # no slow start back up


def test_keeps_below_a_destination_that_throttles_beyond_its_allowance() -> None:
    run = Run(adaptive(128), Throttling(20 * MS, allowed=24)).until(5.0)
    settled = run.limits_after(1.0)
    assert max(settled) <= 28  # a round trip of growth past the allowance, then halved
    assert sum(12 <= limit <= 25 for limit in settled) / len(settled) > 0.8
    answered = sum(1 for at, _ in run.latencies if at >= 1.0)
    assert answered / 4.0 > 0.6 * 24 / (20 * MS)  # most of what the allowance permits
    assert run.throttled < 0.2 * len(run.latencies)


def test_backs_off_to_one_under_throttling_and_recovers_once_it_ends() -> None:
    destination = Throttling(20 * MS, allowed=1000)
    run = Run(adaptive(128), destination).until(1.0)
    assert run.limiter.limit == 128
    destination.allowed = 0  # everything is throttled
    run.until(1.5)
    assert run.limiter.limit == 1
    destination.allowed = 1000
    run.until(5.0)
    assert run.first_time_at(128, after=1.5) < 4.0


def test_does_not_grow_while_the_limit_goes_unused() -> None:
    run = Run(adaptive(128), Fixed(20 * MS)).until(1.0, at_most=4)
    assert set(run.limits_after(0.0)) <= {8, 16}  # the floor probes halve it, nothing else


def test_small_requests_teach_nothing() -> None:
    limiter = adaptive(128)
    for i in range(100):
        limiter.on_response(started=i * 0.001, now=i * 0.001 + 0.0001, in_flight=16, full=False)
    assert limiter.floor is None
    assert limiter.limit == 16


def test_learns_its_floor_from_rounds_at_half_the_limit_until_latency_stops_falling() -> None:
    limiter = adaptive(128)
    answer_round(limiter, started=0.0, latency=0.05)  # warming up: not judged
    assert (limiter.limit, limiter.floor) == (16, None)
    answer_round(limiter, started=0.05, latency=0.03)  # sixteen queue at the destination
    assert limiter.limit == 8  # the floor probe: one round at half the limit
    answer_round(limiter, started=0.08, latency=0.02)
    assert limiter.limit == 4  # latency fell with the limit: there was a queue; lower
    answer_round(limiter, started=0.1, latency=0.0195)
    assert limiter.floor == pytest.approx(0.0195)  # found; and against it, the round at
    assert limiter.limit == 12  # sixteen queued: a quarter less


def test_the_first_answer_ends_the_round_that_opens_connections() -> None:
    limiter = adaptive(128)
    limiter.on_response(started=0.0, now=0.03, in_flight=16)
    for _ in range(15):  # the rest of the opening burst, however slow: not judged
        limiter.on_response(started=0.0, now=0.2, in_flight=16)
    assert (limiter.limit, limiter.floor) == (16, None)
    answer_round(limiter, started=0.03, latency=0.02)  # sent after the first answer
    assert limiter.floor == pytest.approx(0.02)
    assert limiter.limit == 8  # judged, and the floor probe begins


def test_answers_to_requests_sent_before_the_limit_changed_are_not_judged() -> None:
    limiter = adaptive(128)
    for round_ in range(3):  # warming up, judged, the probe round
        answer_round(limiter, started=round_ * 0.02, latency=0.02)
    assert limiter.limit == 32  # the round before the probe was at the floor: slow start
    for _ in range(100):  # late answers of the old round, however slow, do not count
        limiter.on_response(started=0.04, now=0.5, in_flight=32)
    assert limiter.limit == 32


def test_latency_that_does_not_fall_when_the_limit_shrinks_is_relearned_as_the_floor() -> None:
    run = Run(adaptive(128), Fixed(20 * MS)).until(1.0)
    assert run.limiter.limit == 128
    run.destination = Fixed(30 * MS)  # slower, but no queue: the limit is not the cause
    run.until(1.5)
    assert run.limiter.floor == pytest.approx(30 * MS)
    assert min(run.limits_after(1.0)) >= 128 // 4  # a shrink, then a probe at half
    assert run.first_time_at(128, after=1.05) < 1.5


def rounds_on_cpu(share: float) -> tuple[ConcurrencyLimiter, Callable[[float, float], None]]:
    """An adaptive limiter, and a function that answers one round of it (sent at
    ``started``, each answer ``latency`` later) while this process is on the CPU for
    ``share`` of the round."""
    clock = [0.0]
    limiter = adaptive(128, cpu_clock=lambda: clock[0])

    def round_at(started: float, latency: float) -> None:
        clock[0] += share * latency
        answer_round(limiter, started=started, latency=latency)

    return limiter, round_at


def test_a_busy_client_waits_for_a_second_round_before_shrinking_after_growth() -> None:
    limiter, busy_round = rounds_on_cpu(0.9)  # on the CPU for 90% of every round
    for round_ in range(3):  # warming up, judged, the probe round: all at the floor
        busy_round(round_ * 0.02, 0.02)
    assert limiter.limit == 32
    busy_round(0.06, 0.04)  # the burst of sending sixteen more: latency doubles, once
    assert limiter.limit == 32
    busy_round(0.1, 0.04)  # again, and no more answers than at 16: a real queue
    assert limiter.limit < 32


@pytest.mark.parametrize("busy", [True, False])
def test_the_round_after_a_growth_that_paid_in_answers_grows_on(busy: bool) -> None:
    limiter, round_at = rounds_on_cpu(0.9 if busy else 0.1)
    for round_ in range(3):  # warming up, judged, the probe round: all at the floor
        round_at(round_ * 0.02, 0.02)
    assert limiter.limit == 32
    # Latency 1.3 times the floor, seven of 32 requests "queued"; yet 1.54 times the
    # answers a second of 16 in flight: the burst of sending sixteen more, not a queue.
    round_at(0.06, 0.026)
    assert limiter.limit == 64
    # Twice the latency and 1.3 times the answers: this growth did not pay. Busy, the
    # writer waits for a second round to say so; otherwise it shrinks at once.
    round_at(0.09, 0.04)
    if busy:
        assert limiter.limit == 64
    else:
        assert limiter.limit < 64


def test_a_growth_that_did_not_pay_in_answers_is_not_followed_by_another() -> None:
    limiter, busy_round = rounds_on_cpu(0.9)  # busy: one slow round alone does not shrink it
    for round_ in range(3):
        busy_round(round_ * 0.02, 0.02)
    assert limiter.limit == 32
    busy_round(0.06, 0.0275)  # 1.45 times the answers of 16 in flight: short of 1.5
    assert limiter.limit == 32


def answer_round(
    limiter: ConcurrencyLimiter, *, started: float, latency: float, stalled: float = 0.0
) -> None:
    """Answer one round of requests: as many as the limit, all sent at ``started``; the
    last ``stalled`` share of them (rounded down) three times as late."""
    count = limiter.limit
    late = int(stalled * count)
    for i in range(count):
        slow = 3 if i >= count - late else 1
        limiter.on_response(started=started, now=started + slow * latency, in_flight=count)


def at_the_floor(maximum: int) -> ConcurrencyLimiter:
    """A limiter past its first rounds (warming up, judged, the floor probe) at 20 ms."""
    limiter = adaptive(maximum)
    for round_ in range(3):
        answer_round(limiter, started=round_ * 0.02, latency=0.02)
    assert limiter.floor == pytest.approx(0.02)
    return limiter


def test_a_stall_that_delays_some_answers_of_a_round_is_not_a_queue() -> None:
    limiter = at_the_floor(128)
    assert limiter.limit == 32
    # A quarter of every round three times as late (a pause of the destination, or of
    # a machine it shares): their mean is half again the floor, their median is not.
    for round_ in range(3):
        answer_round(limiter, started=0.06 + round_ * 0.06, latency=0.02, stalled=0.25)
    assert limiter.limit == 128
    # Every answer of a round that late: a queue, which fewer requests cure.
    answer_round(limiter, started=0.3, latency=0.03)
    answer_round(limiter, started=0.34, latency=0.03)
    assert limiter.limit < 128


def test_at_a_few_requests_in_flight_one_or_two_queued_are_noise() -> None:
    limiter = at_the_floor(8)
    assert limiter.limit == 8
    # 40% over the floor at 8 in flight: about two requests' worth, held, not shrunk
    limits = []
    for round_ in range(4):
        answer_round(limiter, started=0.06 + round_ * 0.03, latency=0.028)
        limits.append(limiter.limit)
    assert limits == [8, 8, 8, 8]
    assert limiter.floor == pytest.approx(0.02)
    # two and a half times the floor: more than half of them queue
    answer_round(limiter, started=0.2, latency=0.05)
    answer_round(limiter, started=0.26, latency=0.05)
    assert limiter.limit < 8


def test_without_adaptation_the_limit_is_the_maximum_whatever_happens() -> None:
    limiter = ConcurrencyLimiter(maximum=64, adaptive=False)
    assert limiter.limit == 64
    run = Run(limiter, Throttling(20 * MS, allowed=4)).until(1.0)
    assert set(run.limits_after(0.0)) == {64}
    assert limiter.floor is None


@pytest.mark.parametrize(("maximum", "initial"), [(1, 1), (4, 4), (16, 16), (500, 16)])
def test_starts_at_sixteen_or_the_maximum_if_lower(maximum: int, initial: int) -> None:
    assert ConcurrencyLimiter(maximum=maximum).limit == initial


def test_a_limit_of_one_stays_one() -> None:
    run = Run(ConcurrencyLimiter(maximum=1), Fixed(20 * MS)).until(1.0)
    assert set(run.limits_after(0.0)) == {1}


# ---------------------------------------------------------------------- learned, handed on


def test_nothing_is_learned_before_a_round_is_judged_or_without_adaptation() -> None:
    assert adaptive().learned() is None
    fixed = ConcurrencyLimiter(maximum=64, adaptive=False)
    Run(fixed, Fixed(20 * MS)).until(1.0)
    assert fixed.learned() is None


def test_a_limiter_that_starts_from_what_another_learned_skips_slow_start() -> None:
    first = adaptive()
    Run(first, Fixed(20 * MS)).until(2.0)
    learned = first.learned()
    assert learned is not None and first.limit == 128
    fresh = Run(adaptive(), Fixed(20 * MS)).until(0.1)
    resumed = Run(adaptive(start=learned), Fixed(20 * MS)).until(0.1)
    assert resumed.limits[0][1] == 128
    assert sorted(set(resumed.limits_after(0.0))) == [64, 128]  # one round probes the floor
    assert max(fresh.limits_after(0.0)) < 128  # still in slow start after five round trips
    assert len(resumed.latencies) > 2 * len(fresh.latencies)


def test_a_learned_limit_too_high_for_another_destination_shrinks_to_its_capacity() -> None:
    first = adaptive()
    Run(first, Fixed(20 * MS)).until(2.0)
    slower = Queueing(capacity=8, service=20 * MS)
    run = Run(adaptive(start=first.learned()), slower).until(6.0)
    assert run.limits[0][1] == 128
    # Probing its floor and shrinking by a quarter a round at most, it settles near the
    # capacity within a few seconds, and latency comes back down.
    assert max(run.limits_after(4.5)) <= 16
    assert run.p99_after(5.0) < 2 * 20 * MS


def test_a_throttled_limit_is_handed_on_with_its_threshold() -> None:
    first = adaptive()
    Run(first, Throttling(20 * MS, allowed=40)).until(3.0)
    learned = first.learned()
    assert learned is not None
    assert learned.congested_at > 0
    second = adaptive(start=learned)
    assert second.threshold == learned.congested_at / 2
    run = Run(second, Throttling(20 * MS, allowed=40)).until(3.0)
    # It starts where the first left off, near its throttle, and is throttled less.
    assert run.limits[0][1] == first.limit <= learned.congested_at
    assert run.throttled < first_throttles(Throttling(20 * MS, allowed=40))


def first_throttles(destination: Throttling) -> int:
    return Run(adaptive(), destination).until(3.0).throttled


def test_the_memory_keeps_the_latest_per_destination_and_forgets_the_oldest() -> None:
    from asyncsink.policies.request_limit import Learned, forget_learned, recall, remember

    forget_learned()
    one = Learned(32.0, 0.0, 0.02)
    two = Learned(64.0, 0.0, 0.02)
    remember("a", one)
    remember("a", two)
    remember("b", None)  # nothing learned: nothing kept
    assert recall("a") == two and recall("b") is None
    for key in range(300):
        remember(key, one)
    assert recall("a") is None  # the least recently kept went first
    assert recall(299) == one
    forget_learned()
    assert recall(299) is None


def test_a_busy_client_comes_down_from_a_limit_whose_extra_requests_did_not_pay() -> None:
    # Started at 64 by an earlier writer, at a destination that serves 4 at a time, and
    # on the CPU all along: queueing is then no proof by itself. The probe's round at
    # half the limit answers as many a second as the full limit: the extra requests did
    # not pay, and the limit comes down.
    clock: list[Run] = []
    limiter = ConcurrencyLimiter(
        maximum=128, start=Learned(64.0, 0.0, 32 * MS), cpu_clock=lambda: clock[0].now
    )
    run = Run(limiter, Queueing(capacity=4, service=2 * MS))
    clock.append(run)
    run.until(5.0)
    assert run.limits[0][1] == 64
    assert max(run.limits_after(0.2)) <= 48
    assert limiter.limit < 32


def test_a_limit_learned_at_a_faster_destination_is_not_taken_when_the_first_answer_is_slow() -> (
    None
):
    # Learned at 5 ms; the destination now takes 200 ms and serves two at a time. The
    # first answer is forty times slower: the limiter starts afresh, as a new one does,
    # instead of sending 64 requests into a queue that a request timeout would cut.
    learned = Learned(64.0, 0.0, 5 * MS)
    resumed = Run(adaptive(start=learned), Queueing(capacity=2, service=200 * MS)).until(5.0)
    fresh = Run(adaptive(), Queueing(capacity=2, service=200 * MS)).until(5.0)
    assert resumed.limits[0][1] == ConcurrencyLimiter.INITIAL
    assert resumed.limits == fresh.limits
    # As fast as before, it is taken at the first answer.
    quick = Run(adaptive(start=learned), Fixed(5 * MS)).until(0.05)
    assert quick.limits[0][1] == 64
