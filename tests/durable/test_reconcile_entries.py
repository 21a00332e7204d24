"""Calls an earlier attempt left PENDING, looked up at the destination by their entries
once the retry was given them again (destinations searchable only by content)."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Collection
from typing import Any

import anyio
import pytest

from asyncsink import (
    CallInfo,
    CallLog,
    DeliveryError,
    DestinationError,
    FatalError,
    Reconcile,
    RetryableError,
    SubmitResult,
    ThrottledError,
    WriterStatistics,
)
from asyncsink.stores.memory import MemoryStore

from .harness import SCOPE, Crash, Destination, EntryWriter, options, run_attempt

pytestmark = pytest.mark.anyio

ENTRIES = [f"e{i}" for i in range(100)]


class ContentWriter(EntryWriter):
    """Looks a call up by content: which of its entries the destination applied."""

    reconciliation = Reconcile.BY_CALL | Reconcile.BY_ENTRIES

    def __init__(self, destination: Destination, *, mode: str = "look", **kw: Any) -> None:
        super().__init__(destination, **kw)
        self.mode = mode
        self.looked_up: list[CallInfo] = []
        self.results_seen: list[Any] = []

    async def submit_request_entries(self, entries: list[Any]) -> SubmitResult:
        await self.destination.receive(entries)
        return SubmitResult(detail={"last": entries[-1]})

    async def reconcile_entries(self, call: CallInfo, entries: list[Any]) -> Collection[int] | None:
        self.looked_up.append(call)
        self.results_seen = self.recorded_results()
        if self.mode == "raise":
            raise RuntimeError("the destination cannot be read")
        if self.mode == "unknown":
            return None
        held = set(self.destination.applied)
        return [seq for seq, entry in zip(call.seqs, entries, strict=True) if entry in held]


async def attempt(store: MemoryStore, destination: Destination, **kw: Any) -> ContentWriter:
    writer = ContentWriter(
        destination, options=options(max_in_flight_requests=1), call_log=CallLog(store, SCOPE), **kw
    )
    async with writer:
        await writer.write_all(ENTRIES)
    return writer


@pytest.mark.parametrize("point", ["after_apply", "before_apply"])
async def test_a_lost_call_is_found_by_content_and_never_stored_twice(point: str) -> None:
    store = MemoryStore()
    destination = Destination()  # honours no idempotency key
    before = time.time()
    if point == "after_apply":
        destination.crash_after_apply_on = 4
    else:
        destination.crash_before_apply_on = 4
    with pytest.raises((Crash, BaseExceptionGroup)):
        await attempt(store, destination)
    destination.crash_after_apply_on = destination.crash_before_apply_on = None
    writer = await attempt(store, destination)
    assert sorted(destination.applied) == sorted(ENTRIES)
    assert destination.duplicates() == 0
    (looked,) = writer.looked_up
    assert looked.call_id == 3 and looked.pending_since is not None
    # Recorded to the millisecond, rounded down: never later than the call was made.
    assert before - 0.001 <= looked.pending_since <= time.time()
    assert writer.results_seen[:3] == [{"last": "e9"}, {"last": "e19"}, {"last": "e29"}]
    stats = writer.statistics()
    assert stats.reconciled == 1 and stats.resent_calls == 0
    assert stats.skipped == (40 if point == "after_apply" else 30)


@pytest.mark.parametrize("mode", ["unknown", "raise"])
async def test_a_call_that_cannot_be_looked_up_is_re_sent_as_it_was(mode: str) -> None:
    store = MemoryStore()
    destination = Destination(idempotent=True)
    destination.crash_after_apply_on = 4
    with pytest.raises((Crash, BaseExceptionGroup)):
        await attempt(store, destination)
    destination.crash_after_apply_on = None
    writer = await attempt(store, destination, mode=mode)
    assert sorted(set(destination.applied)) == sorted(ENTRIES)
    assert destination.duplicates() == 0  # the same key: absorbed by the destination
    assert writer.statistics().resent_calls == 1


async def test_only_the_entries_not_held_are_sent_again() -> None:
    store = MemoryStore()
    destination = Destination()
    destination.crash_after_apply_on = 2
    with pytest.raises((Crash, BaseExceptionGroup)):
        await attempt(store, destination)
    destination.crash_after_apply_on = None
    del destination.applied[-4:]  # the destination kept only part of the lost request
    writer = await attempt(store, destination)
    assert sorted(destination.applied) == sorted(ENTRIES)
    assert destination.duplicates() == 0
    assert writer.statistics().skipped == 16
    # and the completed scope replays without sending
    await writer._log.complete()  # type: ignore[attr-defined]
    again = await run_attempt(store, Destination(), ENTRIES, max_in_flight_requests=1)
    assert again.statistics().skipped == len(ENTRIES)


async def test_a_call_sent_again_records_when_so_the_lookup_waits_for_its_last_send() -> None:
    store = MemoryStore()
    destination = Destination()
    arrivals = 0
    original = destination.receive

    async def fail_then_lose_the_answer(entries: list[Any]) -> None:
        nonlocal arrivals
        if entries[0] == "e30":
            arrivals += 1
            if arrivals == 1:
                raise ThrottledError("429", status=429)  # refused: call 3 is sent again
            await original(entries)
            raise Crash("the re-send of call 3 landed, its answer is lost")
        await original(entries)

    destination.receive = fail_then_lose_the_answer  # type: ignore[method-assign]
    with pytest.raises((Crash, BaseExceptionGroup)):
        await attempt(store, destination)
    destination.receive = original  # type: ignore[method-assign]
    writer = await attempt(store, destination)
    (looked,) = [call for call in writer.looked_up if call.call_id == 3]
    assert looked.pending_since is not None and looked.sent_again_at is not None
    assert looked.sent_again_at >= looked.pending_since and looked.last_sent == looked.sent_again_at
    assert sorted(destination.applied) == sorted(ENTRIES) and destination.duplicates() == 0


# ---------------------------------------------------------------------- within one attempt


class LostAnswers(ContentWriter):
    """Loses the answer to the requests whose first entry is in ``lose``, once each: a
    reset connection after the request was applied (``"after"``) or before
    (``"before"``); or answers it with a throttle, having done nothing (``"refused"``),
    or with a 503 after it was applied (``"failed"``: a gateway that gave up waiting)."""

    def __init__(self, destination: Destination, lose: dict[str, str], **kw: Any) -> None:
        super().__init__(destination, **kw)
        self.lose = dict(lose)

    async def submit_request_entries(self, entries: list[Any]) -> SubmitResult:
        how = self.lose.pop(entries[0], None)
        if how == "refused":
            raise ThrottledError("the destination is busy", status=429)
        if how != "before":
            await self.destination.receive(entries)
        if how == "failed":
            raise RetryableError("gateway timeout", status=503)
        if how is not None:
            raise ConnectionResetError("the connection was reset, no answer")
        return SubmitResult(detail={"last": entries[-1]})


async def lossy_attempt(destination: Destination, lose: dict[str, str], **kw: Any) -> LostAnswers:
    writer = LostAnswers(
        destination,
        lose,
        options=options(max_in_flight_requests=2, initial_backoff_ms=1),
        call_log=CallLog(MemoryStore(), SCOPE),
        **kw,
    )
    async with writer:
        await writer.write_all(ENTRIES)
    return writer


async def test_a_request_whose_answer_was_lost_is_looked_up_before_it_is_sent_again() -> None:
    destination = Destination()  # honours no idempotency key, as a Kinesis stream
    lose = {"e20": "after", "e50": "before", "e70": "refused", "e80": "failed"}
    writer = await lossy_attempt(destination, lose)
    assert sorted(destination.applied) == sorted(ENTRIES)
    assert destination.duplicates() == 0
    looked = sorted(call.seqs[0] for call in writer.looked_up)
    assert looked == [20, 50, 80]  # a throttle says the request did not land: no lookup
    stats = writer.statistics()
    assert stats.delivered == len(ENTRIES) and stats.skipped == 0 and stats.failed == 0
    assert stats.reconciled == 3 and stats.resent_calls == 0
    assert stats.retried == 10 + 10  # the lost call not found, and the refused one
    assert "calls left without an answer: 3 settled by looking them up" in stats.summary()


async def test_a_lost_answer_that_cannot_be_looked_up_is_re_sent_as_the_same_call() -> None:
    destination = Destination(idempotent=True)
    writer = await lossy_attempt(destination, {"e20": "after"}, mode="unknown")
    assert sorted(set(destination.applied)) == sorted(ENTRIES)
    assert destination.duplicates() == 0  # the same key: absorbed by the destination
    stats = writer.statistics()
    assert (stats.reconciled, stats.resent_calls, stats.delivered) == (0, 1, len(ENTRIES))


async def test_without_call_records_a_lost_answer_is_sent_again_unlooked() -> None:
    destination = Destination()
    writer = LostAnswers(destination, {"e20": "after"}, options=options(initial_backoff_ms=1))
    async with writer:
        await writer.write_all(ENTRIES)
    assert writer.looked_up == [] and destination.duplicates() == 10  # at least once


class SlowLookups(LostAnswers):
    """Looks up only once ``release`` is set, so that a test can look in meanwhile."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.looking = anyio.Event()
        self.release = anyio.Event()

    async def reconcile_entries(self, call: CallInfo, entries: list[Any]) -> Collection[int] | None:
        self.looking.set()
        await self.release.wait()
        return await super().reconcile_entries(call, entries)


def accounted(stats: WriterStatistics) -> int:
    return (stats.delivered + stats.skipped + stats.dead_lettered + stats.failed
            + stats.buffered + stats.in_flight)  # fmt: skip


async def test_entries_being_looked_up_are_in_flight_and_in_a_snapshot() -> None:
    destination = Destination()
    writer = SlowLookups(
        destination,
        {"e20": "after"},
        options=options(max_in_flight_requests=1, initial_backoff_ms=1),
        call_log=CallLog(MemoryStore(), SCOPE),
    )
    async with writer:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.write_all, ENTRIES)
            await writer.looking.wait()
            during = writer.statistics()
            held = {seq for seq, _ in writer.snapshot().entries}
            writer.release.set()
    assert during.in_flight >= 10 and accounted(during) == during.written
    assert set(range(20, 30)) <= held  # the call being looked up is not lost to a restore
    after = writer.statistics()
    assert (after.delivered, after.in_flight, destination.duplicates()) == (100, 0, 0)


async def test_a_writer_cancelled_during_a_lookup_keeps_that_call_in_flight() -> None:
    writer = SlowLookups(
        Destination(),
        {"e20": "after"},
        options=options(max_in_flight_requests=1, initial_backoff_ms=1),
        call_log=CallLog(MemoryStore(), SCOPE),
    )

    async def run() -> None:
        async with writer:
            await writer.write_all(ENTRIES)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await writer.looking.wait()
            tg.cancel_scope.cancel()  # the writer's task is cancelled mid-lookup
    stats = writer.statistics()
    assert stats.in_flight >= 10 and accounted(stats) == stats.written, stats


async def test_a_call_out_of_retries_after_a_lookup_is_not_counted_re_sent() -> None:
    writer = LostAnswers(
        Destination(),
        {"e20": "after"},
        mode="unknown",
        options=options(max_in_flight_requests=1, max_retries=0),
        call_log=CallLog(MemoryStore(), SCOPE),
    )
    with pytest.raises(DeliveryError):
        async with writer:
            await writer.write_all(ENTRIES)
    stats = writer.statistics()
    assert (stats.resent_calls, stats.failed) == (0, 10)


@pytest.mark.parametrize(
    ("error", "looked"),
    [
        (OSError(errno.ETIMEDOUT, "Connection timed out"), True),  # an open one may die so
        (OSError(errno.EHOSTUNREACH, "No route to host"), True),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), False),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False),
        (RetryableError("HTTP 503", status=503), True),  # a failure may follow the work
        (ThrottledError("HTTP 429", status=429), False),  # a refusal: nothing was done
        (FatalError("HTTP 400", status=400), False),
    ],
)
def test_what_may_have_landed(error: BaseException, looked: bool) -> None:
    writer = ContentWriter(Destination())
    assert writer.may_have_landed(error) is looked
    wrapped = RetryableError("request failed")
    wrapped.__cause__ = error
    # An answer wrapped in an error without a status is no answer of its own.
    assert writer.may_have_landed(wrapped) is (looked or isinstance(error, DestinationError))
    assert writer.may_have_landed(None)  # a timeout
