"""A writer's policies are handed in: a retry policy and a congestion strategy passed to the
constructor replace the defaults built from the options, and the in-flight limits of the
default congestion strategy can be handed in the same way."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence

import anyio
import pytest

from asyncsink import CallInfo, DeliveryError, ErrorKind, SinkOptions
from asyncsink.policies import AIMDWindow, Congestion, CongestionStrategy, RetryPolicy

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio


class OneRetryAtOnce:
    """Retries an entry once, at once, whatever the options say."""

    def __init__(self) -> None:
        self.scope = ""
        self.exhausted = 0
        self.last_error: BaseException | None = None
        self.tries: dict[int, int] = {}
        self.judged = 0

    def judge(
        self, error: BaseException | None, call_id: int, *, delivered: bool
    ) -> tuple[BaseException, ErrorKind]:
        self.judged += 1
        return error or TimeoutError(f"call {call_id}"), ErrorKind.RETRYABLE

    def attempt(
        self, seqs: Sequence[int], error: BaseException | None, retry_after: object
    ) -> tuple[list[int], float]:
        self.last_error = error
        kept = []
        for index, seq in enumerate(seqs):
            self.tries[seq] = self.tries.get(seq, 0) + 1
            if self.tries[seq] <= 1:
                kept.append(index)
        self.give_up(len(seqs) - len(kept))
        return kept, 0.0

    def forget(self, seqs: Sequence[int]) -> None:
        for seq in seqs:
            self.tries.pop(seq, None)

    def give_up(self, count: int) -> None:
        self.exhausted += count

    def delivery_error(self, delivered: int) -> DeliveryError | None:
        return DeliveryError(self.exhausted, delivered, self.last_error) if self.exhausted else None


class TwoAtATime:
    """One request in flight, of two entries at most, whatever the options say."""

    limit = 1
    window = 2

    def __init__(self) -> None:
        self.resumed: list[Hashable] = []
        self.closed = False
        self.answers = 0
        self.successes = 0

    def resume(self, destination: Hashable) -> None:
        self.resumed.append(destination)

    def close(self) -> None:
        self.closed = True

    def capacity(self, requests: int, entries: int) -> int:
        return 0 if requests else 2

    def batch_limit(self) -> int:
        return 2

    def on_answer(self, sent: float, now: float, in_flight: int, *, full: bool) -> None:
        self.answers += 1

    def on_success(self) -> None:
        self.successes += 1

    def on_congestion(self, sent: float, now: float, *, throttled: bool) -> None:
        raise AssertionError("nothing throttles in this test")


async def test_the_test_policies_satisfy_the_contracts() -> None:
    retry: RetryPolicy = OneRetryAtOnce()
    congestion: CongestionStrategy = TwoAtATime()
    assert retry.exhausted == 0 and congestion.limit == 1


async def test_a_custom_retry_policy_and_congestion_strategy_both_take_effect() -> None:
    def handler(entries: list[int], call: CallInfo) -> list[int]:
        return [e for e in entries if e == 5]  # entry 5 fails every time

    dest = Destination(handler)
    # The defaults would send one request of 10, and retry entry 5 ten times, seconds apart.
    options = SinkOptions(
        max_batch_size=100, max_in_flight_requests=8, max_retries=10, initial_backoff_ms=10_000
    )
    retry, congestion = OneRetryAtOnce(), TwoAtATime()
    writer = FakeWriter(dest, options=options, retry_policy=retry, congestion=congestion)
    started = time.monotonic()
    with pytest.raises(DeliveryError) as caught, anyio.fail_after(5):
        async with writer:
            await writer.write_all(range(10))
    assert time.monotonic() - started < 5
    assert caught.value.failed == 1 and caught.value.delivered == 9
    assert sum(r.count(5) for r in dest.requests) == 2  # the policy's one retry, not ten
    assert all(len(r) <= 2 for r in dest.requests) and dest.max_in_flight == 1
    assert congestion.answers == len(dest.requests) and congestion.closed
    assert congestion.resumed and writer.statistics().in_flight_limit == 1


async def test_the_default_congestion_takes_its_entry_window_from_outside() -> None:
    dest = Destination()
    options = SinkOptions(max_batch_size=100, max_in_flight_requests=4)
    window = AIMDWindow(ceiling=3, increase=1)
    writer = FakeWriter(dest, options=options, congestion=Congestion(options, entries=window))
    async with writer:
        await writer.write_all(range(10))
    assert sorted(dest.accepted) == list(range(10))
    assert max(len(r) for r in dest.requests) == 3
    assert writer.statistics().window == 3
