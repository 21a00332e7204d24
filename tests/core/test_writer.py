"""AsyncSinkWriter against an in-process fake destination: hints, retries, barrier."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from asyncsink import (
    BadRecordError,
    CallInfo,
    DeadLetter,
    DeliveryError,
    FatalError,
    RetryableError,
    SinkOptions,
    SubmitResult,
    ThrottledError,
    WriterStateError,
    current_call,
)
from asyncsink.policies.request_limit import ConcurrencyLimiter
from asyncsink.policies.retry import Backoff

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio


async def deliver(writer: FakeWriter, items: Any) -> None:
    async with writer:
        for item in items:
            await writer.write(item)


async def test_batches_are_cut_by_count() -> None:
    dest = Destination()
    await deliver(FakeWriter(dest, options=SinkOptions(max_batch_size=10)), range(95))
    assert sorted(dest.accepted) == list(range(95))
    assert [len(r) for r in dest.requests] == [10] * 9 + [5]


async def test_batches_are_cut_by_bytes() -> None:
    dest = Destination()
    options = SinkOptions(
        max_batch_size=100, max_batch_size_in_bytes=35, max_record_size_in_bytes=35
    )
    await deliver(FakeWriter(dest, size=10, options=options), range(10))
    assert [len(r) for r in dest.requests] == [3, 3, 3, 1]
    assert sorted(dest.accepted) == list(range(10))


async def test_oldest_entry_is_sent_on_time_without_further_writes() -> None:
    dest = Destination()
    writer = FakeWriter(dest, options=SinkOptions(max_batch_size=100, max_time_in_buffer_ms=50))
    async with writer:
        started = time.monotonic()
        for i in range(3):
            await writer.write(i)
        with anyio.fail_after(2):
            while len(dest.accepted) < 3:
                await anyio.sleep(0.005)
        waited = time.monotonic() - started
    assert 0.04 <= waited < 1.0
    assert dest.requests == [[0, 1, 2]]


async def test_in_flight_requests_are_bounded() -> None:
    dest = Destination(latency=0.02)
    options = SinkOptions(max_batch_size=5, max_in_flight_requests=3)
    await deliver(FakeWriter(dest, options=options), range(200))
    assert dest.max_in_flight == 3
    assert sorted(dest.accepted) == list(range(200))


async def test_write_waits_when_the_buffer_is_full() -> None:
    dest = Destination(latency=0.01)
    options = SinkOptions(max_batch_size=10, max_in_flight_requests=1, max_buffered_requests=25)
    writer = FakeWriter(dest, options=options)
    peak = 0
    async with writer:
        for i in range(300):
            await writer.write(i)
            peak = max(peak, writer.statistics().buffered)
    assert peak <= 25
    assert sorted(dest.accepted) == list(range(300))


async def test_buffer_smaller_than_a_batch_does_not_stall() -> None:
    dest = Destination()
    options = SinkOptions(max_batch_size=500, max_buffered_requests=7, max_time_in_buffer_ms=60_000)
    with anyio.fail_after(5):
        await deliver(FakeWriter(dest, options=options), range(50))
    assert sorted(dest.accepted) == list(range(50))


async def test_failed_entries_are_requeued_at_the_front_in_order() -> None:
    failed_once: set[int] = set()

    def handler(entries: list[int], call: CallInfo) -> list[int]:
        fail = [e for e in entries if e % 7 == 3 and e not in failed_once]
        failed_once.update(fail)
        return fail

    dest = Destination(handler)
    options = SinkOptions(max_batch_size=10, max_in_flight_requests=1, initial_backoff_ms=0)
    await deliver(FakeWriter(dest, options=options), range(40))
    assert sorted(dest.accepted) == list(range(40))
    assert dest.duplicates() == 0
    # the request after the first failure starts with the failed entries, in order
    first_failure = next(i for i, r in enumerate(dest.requests) if 3 in r)
    assert dest.requests[first_failure + 1][:1] == [3]
    retried = [e for e in dest.accepted if e % 7 == 3]
    assert retried == sorted(retried)


async def test_submit_result_retries_only_the_named_indices() -> None:
    calls = 0

    def handler(entries: list[int], call: CallInfo) -> SubmitResult:
        nonlocal calls
        calls += 1
        return SubmitResult(retry=[0, 2] if calls == 1 else [])

    dest = Destination(handler)
    options = SinkOptions(max_batch_size=4, max_in_flight_requests=1, initial_backoff_ms=0)
    await deliver(FakeWriter(dest, options=options), range(4))
    assert dest.requests[0] == [0, 1, 2, 3]
    assert dest.requests[1] == [0, 2]
    assert sorted(dest.accepted) == [0, 1, 2, 3]


async def test_entries_out_of_retries_fail_the_barrier_with_counts() -> None:
    def handler(entries: list[int], call: CallInfo) -> list[int]:
        return [e for e in entries if e == 5]

    dest = Destination(handler)
    options = SinkOptions(max_batch_size=10, max_retries=3, initial_backoff_ms=1, max_backoff_ms=2)
    writer = FakeWriter(dest, options=options)
    with pytest.raises(DeliveryError) as caught:
        await deliver(writer, range(10))
    assert caught.value.failed == 1
    assert caught.value.delivered == 9
    assert caught.value.positions == (5,)  # where in the input, not in its last request
    assert "(9 delivered; at positions 5)" in str(caught.value)
    assert caught.value.__cause__ is not None
    assert sum(r.count(5) for r in dest.requests) == 4  # first try + 3 retries
    assert writer.statistics().failed == 1


async def test_a_delivery_error_shows_why_the_destination_refused_the_entries() -> None:
    def handler(entries: list[int], call: CallInfo) -> SubmitResult:
        retry = [i for i, e in enumerate(entries) if e == 5]
        return SubmitResult(retry=retry, reason="entry 5: HTTP 503: shard busy")

    options = SinkOptions(max_batch_size=10, max_retries=1, initial_backoff_ms=0)
    writer = FakeWriter(Destination(handler), options=options)
    with pytest.raises(DeliveryError) as caught:
        await deliver(writer, range(10))
    assert "1 of 1 entries failed: entry 5: HTTP 503: shard busy" in str(caught.value)


async def test_backoff_grows_exponentially_within_jitter() -> None:
    attempts: list[float] = []

    def handler(entries: list[int], call: CallInfo) -> None:
        attempts.append(time.monotonic())
        if len(attempts) <= 3:
            raise RetryableError("try later")

    options = SinkOptions(initial_backoff_ms=40, max_backoff_ms=1000)
    await deliver(FakeWriter(Destination(handler), options=options), [1])
    gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert len(gaps) == 3
    for gap, ceiling in zip(gaps, (0.04, 0.08, 0.16), strict=True):
        assert gap <= ceiling + 0.1  # full jitter: anywhere below the ceiling


def test_backoff_delays_are_full_jitter_below_a_doubling_capped_ceiling() -> None:
    policy = Backoff(initial_ms=100, max_ms=1000)
    assert [policy.ceiling(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for attempt in (1, 3, 6):
        delays = [policy.delay(attempt) for _ in range(2000)]
        ceiling = policy.ceiling(attempt)
        assert all(0 <= d <= ceiling for d in delays)
        assert 0.4 * ceiling < sum(delays) / len(delays) < 0.6 * ceiling
    assert policy.delay(1, retry_after=0.7) == 0.7  # the destination's hint, when longer
    assert policy.delay(1, retry_after=30) == 1.0  # capped by maxBackoffMs


async def test_retry_after_is_honoured_and_throttling_shrinks_the_window() -> None:
    attempts: list[float] = []

    def handler(entries: list[int], call: CallInfo) -> None:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise ThrottledError("slow down", retry_after=0.3)

    options = SinkOptions(initial_backoff_ms=1, max_backoff_ms=5000, max_batch_size=10)
    writer = FakeWriter(Destination(handler), options=options)
    async with writer:
        await writer.write(1)
        await writer.flush()
        stats = writer.statistics()
    assert attempts[1] - attempts[0] >= 0.29
    assert stats.throttled == 1
    assert stats.window < 10 * options.max_in_flight_requests
    assert stats.in_flight_limit == ConcurrencyLimiter.INITIAL // 2


async def test_window_grows_back_after_congestion() -> None:
    throttle = True

    def handler(entries: list[int], call: CallInfo) -> None:
        if throttle:
            raise ThrottledError("busy")

    options = SinkOptions(
        max_batch_size=10,
        max_in_flight_requests=2,
        initial_backoff_ms=1,
        max_backoff_ms=2,
        max_retries=1000,
        max_time_in_buffer_ms=0,
    )
    writer = FakeWriter(Destination(handler), options=options)
    async with writer:
        for i in range(3):
            await writer.write(i)
        with anyio.fail_after(2):
            while writer.statistics().throttled < 3:
                await anyio.sleep(0.001)
        shrunk = writer.statistics().window
        throttle = False
        for i in range(200):
            await writer.write(i)
        await writer.flush()
        grown = writer.statistics().window
    assert shrunk < 20
    assert grown > shrunk


async def test_whole_request_retry_reuses_the_call_and_its_key() -> None:
    seen: list[CallInfo] = []

    def handler(entries: list[int], call: CallInfo) -> None:
        seen.append(call)
        if len(seen) < 3:
            raise ConnectionError("reset by peer")

    options = SinkOptions(initial_backoff_ms=1, max_backoff_ms=2)
    await deliver(FakeWriter(Destination(handler), options=options), range(5))
    assert len(seen) == 3
    assert len({c.idempotency_key for c in seen}) == 1
    assert seen[0] == seen[2]


async def test_new_calls_get_distinct_keys() -> None:
    dest = Destination()
    await deliver(FakeWriter(dest, options=SinkOptions(max_batch_size=2)), range(10))
    assert len(set(dest.keys)) == 5


async def test_fatal_error_fails_the_next_write_with_the_cause() -> None:
    def handler(entries: list[int], call: CallInfo) -> None:
        raise FatalError("401 unauthorized", status=401)

    writer = FakeWriter(Destination(handler), options=SinkOptions(max_batch_size=1))
    with pytest.raises(FatalError, match="401"):
        async with writer:
            for i in range(100):
                await writer.write(i)
                await anyio.sleep(0.001)
    stats = writer.statistics()
    assert stats.failed >= 1 and stats.delivered == 0  # the refused request's entries
    accounted = stats.delivered + stats.failed + stats.buffered + stats.in_flight
    assert accounted == stats.written


async def test_unknown_exception_is_fatal_and_chained() -> None:
    def handler(entries: list[int], call: CallInfo) -> None:
        raise KeyError("bug in the sink")

    writer = FakeWriter(Destination(handler))
    with pytest.raises(FatalError) as caught:
        async with writer:
            await writer.write(1)
            await writer.flush()
    assert isinstance(caught.value.__cause__, KeyError)


async def test_an_answer_that_ignored_the_timeout_settles_the_call_once() -> None:
    calls = 0

    async def handler(entries: list[int], call: CallInfo) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            try:
                await asyncio.sleep(0.3)
            except asyncio.CancelledError:  # ignores the writer's timeout, answers late
                await asyncio.sleep(0.2)

    dest = Destination(handler)
    options = SinkOptions(request_timeout_ms=100, initial_backoff_ms=1, max_backoff_ms=2)
    writer = FakeWriter(dest, options=options)
    await deliver(writer, range(3))
    stats = writer.statistics()
    assert stats.late_responses == 1
    assert stats.delivered == 3 and stats.requests == 1
    assert dest.duplicates() == 0  # the late success was taken, not re-sent


async def test_timed_out_request_is_resent_as_the_same_call() -> None:
    calls = 0

    async def handler(entries: list[int], call: CallInfo) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await anyio.sleep(30)

    dest = Destination(handler)
    options = SinkOptions(request_timeout_ms=50, initial_backoff_ms=1, max_backoff_ms=2)
    writer = FakeWriter(dest, options=options)
    await deliver(writer, range(3))
    assert writer.statistics().timeouts == 1
    assert dest.keys[0] == dest.keys[1]  # the destination can drop a late duplicate


async def test_request_that_never_answers_times_out_and_is_resent() -> None:
    calls = 0

    async def handler(entries: list[int], call: CallInfo) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await anyio.sleep(30)

    dest = Destination(handler)
    options = SinkOptions(request_timeout_ms=50, initial_backoff_ms=1, max_backoff_ms=2)
    writer = FakeWriter(dest, options=options)
    with anyio.fail_after(5):
        await deliver(writer, range(3))
    assert sorted(dest.accepted) == [0, 1, 2]
    assert writer.statistics().timeouts == 1


async def test_fail_on_timeout_makes_a_timeout_fatal() -> None:
    async def handler(entries: list[int], call: CallInfo) -> None:
        await anyio.sleep(30)

    options = SinkOptions(request_timeout_ms=50, fail_on_timeout=True)
    with anyio.fail_after(5), pytest.raises(FatalError) as caught:
        await deliver(FakeWriter(Destination(handler), options=options), [1])
    assert isinstance(caught.value.__cause__, TimeoutError)


async def test_flush_returns_only_when_everything_is_acknowledged() -> None:
    dest = Destination(latency=0.05)
    writer = FakeWriter(dest, options=SinkOptions(max_batch_size=10))
    async with writer:
        for i in range(35):
            await writer.write(i)
        await writer.flush()
        assert sorted(dest.accepted) == list(range(35))
        stats = writer.statistics()
        assert stats.in_flight == 0 and stats.buffered == 0 and stats.delivered == 35
        await writer.write(99)  # still usable after a flush
    assert dest.accepted[-1] == 99


async def test_oversized_record_fails_with_its_position() -> None:
    writer = FakeWriter(Destination(), options=SinkOptions(max_record_size_in_bytes=10))
    async with writer:
        await writer.write(b"ok")
        with pytest.raises(BadRecordError) as caught:
            await writer.write(b"x" * 11)
    assert caught.value.position == 1
    assert "maxRecordSizeInBytes" in str(caught.value)


async def test_bad_records_go_to_a_dead_letter_callable_and_are_counted() -> None:
    letters: list[DeadLetter] = []
    dest = Destination()
    options = SinkOptions(max_record_size_in_bytes=10, dead_letter=letters.append)
    writer = FakeWriter(dest, options=options)
    await deliver(writer, [b"a", b"x" * 20, {"unconvertible": True}, b"b"])
    assert dest.accepted == [b"a", b"b"]
    assert [(d.position, d.reason.split(":")[0]) for d in letters] == [
        (1, "entry of 20 bytes exceeds maxRecordSizeInBytes (10)"),
        (2, "conversion failed"),
    ]
    stats = writer.statistics()
    assert stats.dead_lettered == 2 and stats.written == 4 and stats.delivered == 2


async def test_rejected_entries_go_to_a_json_lines_file(tmp_path: Any) -> None:
    path = tmp_path / "dlq" / "bad.jsonl"

    def handler(entries: list[bytes], call: CallInfo) -> SubmitResult:
        return SubmitResult(
            rejected={i: "mapping error" for i, e in enumerate(entries) if e == b"bad"}
        )

    dest = Destination(handler)
    writer = FakeWriter(dest, options=SinkOptions(dead_letter=str(path)))
    await deliver(writer, [b"good", b"bad", b"fine"])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["position"], x["record"]) for x in lines] == [(1, "bad")]
    assert "mapping error" in lines[0]["reason"]
    assert dest.accepted == [b"good", b"fine"]


async def test_rejected_entry_without_dead_letter_fails_the_writer() -> None:
    def handler(entries: list[bytes], call: CallInfo) -> SubmitResult:
        return SubmitResult(rejected={0: "mapping error"})

    with pytest.raises(BadRecordError, match="position 0.*mapping error"):
        await deliver(FakeWriter(Destination(handler)), [b"bad"])


async def test_lifecycle_is_explicit() -> None:
    writer = FakeWriter(Destination())
    with pytest.raises(WriterStateError):
        await writer.write(1)
    async with writer:
        await writer.write(1)
    with pytest.raises(WriterStateError):
        await writer.write(2)
    with pytest.raises(WriterStateError):
        async with writer:
            pass


async def test_leaving_on_an_exception_cancels_in_flight_requests() -> None:
    dest = Destination(latency=30)
    writer = FakeWriter(dest, options=SinkOptions(max_batch_size=1))
    with anyio.fail_after(5), pytest.raises(RuntimeError, match="boom"):
        async with writer:
            await writer.write(1)
            await anyio.sleep(0.01)
            raise RuntimeError("boom")
    assert dest.accepted == []


async def test_in_flight_requests_are_cancelled_and_awaited_when_the_writer_leaves() -> None:
    cancelled: list[int] = []

    class Slow(FakeWriter):
        async def submit_request_entries(self, entries: list[Any]) -> None:
            try:
                await anyio.sleep(30)
            except BaseException:
                await anyio.lowlevel.checkpoint()  # its cleanup still runs to the end
                cancelled.extend(entries)
                raise

    writer = Slow(Destination(), options=SinkOptions(max_batch_size=1))
    with anyio.fail_after(5), pytest.raises(RuntimeError, match="boom"):
        async with writer:
            for element in range(3):
                await writer.write(element)
            await anyio.sleep(0.01)
            raise RuntimeError("boom")
    assert sorted(cancelled) == [0, 1, 2]  # each request ended before the writer did


class Interrupted(BaseException):
    """Like ``KeyboardInterrupt``: not a failure of the request, an end of the program."""


async def test_a_base_exception_in_a_request_ends_the_writer_with_it() -> None:
    def handler(entries: list[Any], call: CallInfo) -> None:
        raise Interrupted("stop")

    writer = FakeWriter(Destination(handler), options=SinkOptions(max_batch_size=1))
    with anyio.fail_after(5), pytest.raises(BaseException) as caught:
        async with writer:
            await writer.write(1)
            await anyio.sleep(1)
    found = caught.value
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    assert isinstance(found, Interrupted)


async def test_current_call_outside_a_request_is_an_error() -> None:
    with pytest.raises(LookupError):
        current_call()


async def test_a_returned_entry_that_was_not_sent_is_a_clear_error() -> None:
    def handler(entries: list[bytes], call: CallInfo) -> list[bytes]:
        return [b"not-in-request"]

    with pytest.raises(FatalError) as caught:
        await deliver(FakeWriter(Destination(handler)), [b"a"])
    assert "not in the request" in str(caught.value.__cause__)


@pytest.mark.parametrize("throttled", [True, False])
async def test_only_throttled_entries_shrink_the_window(throttled: bool) -> None:
    failed_once: set[int] = set()

    def handler(entries: list[int], call: CallInfo) -> SubmitResult:
        retry = [i for i, e in enumerate(entries) if e % 5 == 0 and e not in failed_once]
        failed_once.update(entries[i] for i in retry)
        return SubmitResult(retry=retry, throttled=throttled and bool(retry))

    options = SinkOptions(max_batch_size=10, initial_backoff_ms=1, max_backoff_ms=2)
    writer = FakeWriter(Destination(handler), options=options)
    await deliver(writer, range(100))
    stats = writer.statistics()
    assert stats.delivered == 100
    assert (stats.window < 160) is throttled


class PositionedWriter(FakeWriter):
    """Entries are ``(entry_position, element)``: where ``convert`` was told it is."""

    def convert(self, element: Any) -> Any:
        return (self.entry_position, super().convert(element))


async def test_entry_position_is_the_elements_place_in_the_input_however_it_is_converted(
    tmp_path: Any,
) -> None:
    elements: list[Any] = [f"e{i}" for i in range(30)]
    elements[12] = {"unconvertible": True}  # the run is converted again one at a time

    async def positions(one_at_a_time: bool) -> list[Any]:
        destination = Destination()
        options = SinkOptions(max_batch_size=7, dead_letter=str(tmp_path / f"{one_at_a_time}"))
        async with PositionedWriter(destination, options=options) as writer:
            if one_at_a_time:
                for element in elements:
                    await writer.write(element)
            else:
                await writer.write_all(elements[:20])
                await writer.write_all(elements[20:])
        return sorted(destination.accepted)

    expected = [(i, f"e{i}") for i in range(30) if i != 12]
    assert await positions(False) == expected
    assert await positions(True) == expected


async def limit_after_one_answer(writer: FakeWriter) -> int:
    """The in-flight limit of a new writer once its first request was answered."""
    async with writer:
        assert writer.statistics().in_flight_limit == ConcurrencyLimiter.INITIAL
        await writer.write_all(range(10))
        await writer.flush()
        return writer.statistics().in_flight_limit


async def test_a_writer_starts_from_what_the_last_writer_of_its_destination_learned() -> None:
    options = SinkOptions(max_batch_size=10, max_in_flight_requests=64)
    for _ in range(3):  # a busy machine's jitter can hold one run's limit down
        first = FakeWriter(Destination(latency=0.005), options=options)
        async with first:
            await first.write_all(range(20_000))
            await first.flush()
            grown = first.statistics().in_flight_limit
        if grown > ConcurrencyLimiter.INITIAL:
            break
    assert grown > ConcurrencyLimiter.INITIAL

    # Connections open at 16; the first answer, as fast as before, takes the learned limit.
    second = FakeWriter(Destination(latency=0.005), options=options)
    assert await limit_after_one_answer(second) > ConcurrencyLimiter.INITIAL
    # A destination a hundred times slower than when the limit was learned: start afresh
    # (far past RESUME_SLOWER, even when a busy machine slowed the rounds it learned from).
    slower = FakeWriter(Destination(latency=0.5), options=options)
    assert await limit_after_one_answer(slower) == ConcurrencyLimiter.INITIAL

    class Elsewhere(FakeWriter):
        def describe_destination(self) -> str:
            return "another destination"

    lower_maximum = SinkOptions(max_batch_size=10, max_in_flight_requests=32)
    for fresh in (
        Elsewhere(Destination(latency=0.005), options=options),
        FakeWriter(Destination(latency=0.005), options=lower_maximum),
    ):
        assert await limit_after_one_answer(fresh) == ConcurrencyLimiter.INITIAL
    fixed = FakeWriter(
        Destination(), options=SinkOptions(max_in_flight_requests=64, adaptive_concurrency=False)
    )
    async with fixed:
        assert fixed.statistics().in_flight_limit == 64
