"""Re-executing a scope after a crash at each durable write point sends only what is needed."""

from __future__ import annotations

import random
import zlib
from typing import Any

import anyio
import pytest

from asyncsink import CallLog, CorruptRecordError, FencedError, Scope
from asyncsink.durable.records import PENDING, CallRecord, crc_of, decode_record, encode_record
from asyncsink.stores.memory import MemoryStore

from .harness import Crash, CrashingStore, Destination, run_attempt

pytestmark = pytest.mark.anyio

ENTRIES = [f"e{i}" for i in range(100)]
SCOPE = Scope("sink", 0, 0)


async def crash_then_retry(point: str, mode: str, *, in_flight: int = 4) -> tuple[Destination, Any]:
    destination = Destination(idempotent=(mode == "keys"), latency=0.001)
    store = CrashingStore(MemoryStore(), destination.events)
    if point == "before_pending":
        store.crash_on_put = 4
    elif point == "after_pending_before_send":
        destination.crash_before_apply_on = 4
    elif point == "after_apply_before_terminal":
        destination.crash_after_apply_on = 4
    elif point == "after_terminal_before_completed":
        store.crash_on_complete = True
    with pytest.raises((Crash, BaseExceptionGroup)) as caught:
        await run_attempt(store, destination, ENTRIES, max_in_flight_requests=in_flight)
    assert _is_crash(caught.value)
    store.crash_on_put = None
    store.crash_on_complete = False
    destination.crash_before_apply_on = destination.crash_after_apply_on = None
    writer = await run_attempt(
        store,
        destination,
        ENTRIES,
        reconciles=(mode == "reconcile"),
        max_in_flight_requests=in_flight,
    )
    return destination, writer


def _is_crash(exc: BaseException) -> bool:
    if isinstance(exc, Crash):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_crash(e) for e in exc.exceptions)
    return False


POINTS = [
    "before_pending",
    "after_pending_before_send",
    "after_apply_before_terminal",
    "after_terminal_before_completed",
]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("mode", ["keys", "reconcile", "none"])
async def test_crash_at_each_write_point_then_retry_delivers_everything(
    point: str, mode: str
) -> None:
    destination, writer = await crash_then_retry(point, mode, in_flight=1)
    assert set(destination.applied) == set(ENTRIES)
    if mode in ("keys", "reconcile"):
        assert destination.duplicates() == 0
    else:
        # without keys or reconcile, only the one call in flight at the crash can repeat
        assert destination.duplicates() <= 10
    if point == "after_terminal_before_completed":
        assert writer.statistics().skipped == len(ENTRIES)
        assert destination.duplicates() == 0


@pytest.mark.parametrize("mode", ["keys", "reconcile"])
async def test_out_of_order_completions_recover_exactly(mode: str) -> None:
    """Many calls in flight finishing out of order, a crash, and an exact recovery."""
    import random

    rng = random.Random(7)
    destination = Destination(idempotent=(mode == "keys"))
    original = destination.receive

    async def jittery(entries: list[Any]) -> None:
        await anyio.sleep(rng.uniform(0, 0.01))
        await original(entries)

    destination.receive = jittery  # type: ignore[method-assign]
    destination.crash_after_apply_on = 7
    store = MemoryStore()
    with pytest.raises((Crash, BaseExceptionGroup)):
        await run_attempt(store, destination, ENTRIES, max_in_flight_requests=8, max_batch_size=5)
    applied_before = len(destination.applied)
    destination.crash_after_apply_on = None
    writer = await run_attempt(
        store,
        destination,
        ENTRIES,
        reconciles=(mode == "reconcile"),
        max_in_flight_requests=8,
        max_batch_size=5,
    )
    assert set(destination.applied) == set(ENTRIES)
    assert destination.duplicates() == 0
    assert writer.statistics().skipped > 0
    assert applied_before > 0


async def test_pending_is_durable_before_send_and_completed_comes_last() -> None:
    destination = Destination()
    store = CrashingStore(MemoryStore(), destination.events)
    await run_attempt(store, destination, ENTRIES)
    events = destination.events
    for call_id in {cid for kind, cid in events if kind == "send"}:
        assert events.index(("PENDING", call_id)) < events.index(("send", call_id))
        assert events.index(("send", call_id)) < events.index(("terminal", call_id))
    assert events[-1] == ("COMPLETED", -1)


async def test_completed_scope_sends_nothing() -> None:
    store = MemoryStore()
    first = Destination()
    await run_attempt(store, first, ENTRIES)
    second = Destination()
    writer = await run_attempt(store, second, ENTRIES)
    assert second.applied == []
    assert writer.statistics().skipped == len(ENTRIES)


async def test_changed_input_drops_the_records_from_the_change_on() -> None:
    store = MemoryStore()
    destination = Destination(idempotent=True)
    destination.crash_after_apply_on = 5
    with pytest.raises((Crash, BaseExceptionGroup)):
        await run_attempt(store, destination, ENTRIES, max_in_flight_requests=1)
    changed = ENTRIES[:25] + ["changed"] + ENTRIES[26:]
    state = await store.load(SCOPE)
    assert state is not None
    writer = await run_attempt(store, destination, changed, max_in_flight_requests=1)
    assert "changed" in destination.applied
    assert set(destination.applied) >= set(changed)
    # entries 0..24 were verified as delivered and skipped; from 25 on, calls were dropped
    assert writer.statistics().skipped == 25
    assert destination.applied.count("e20") == 1


async def test_corrupt_record_fails_fast_naming_scope_and_call() -> None:
    store = MemoryStore()
    state = await store.take(SCOPE)
    await store.put(SCOPE, state.epoch, {"call:0000000003": b"{not json"})
    with pytest.raises(CorruptRecordError) as caught:
        await run_attempt(store, Destination(), ENTRIES)
    assert "sink/0/0" in str(caught.value) and "call:0000000003" in str(caught.value)


async def test_old_format_records_without_status_still_read() -> None:
    import base64
    import struct

    import orjson

    seqs = list(range(10))
    crcs = [zlib.crc32(ENTRIES[i].encode()) for i in seqs]
    crc = base64.b64encode(struct.pack(">10I", *crcs)).decode()
    old = orjson.dumps({"call": 0, "seqs": [[0, 9]], "crc": crc, "result": {"ok": True}})
    failed = orjson.dumps({"call": 1, "seqs": [[10, 19]], "crc": crc, "error": "boom"})
    assert decode_record(old).status == "SUCCEEDED"
    assert decode_record(failed).status == "FAILED"
    store = MemoryStore()
    state = await store.take(SCOPE)
    await store.put(SCOPE, state.epoch, {"call:0000000000": old, "call:0000000001": failed})
    destination = Destination()
    writer = await run_attempt(store, destination, ENTRIES)
    assert writer.statistics().skipped == 10
    assert sorted(destination.applied) == sorted(ENTRIES[10:])


def test_entry_digests_are_zlibs_crc32_so_records_stay_readable_across_versions() -> None:
    rng = random.Random(7)
    samples = [b"", b"a", *(rng.randbytes(rng.randrange(1, 5000)) for _ in range(300))]
    for data in samples:
        assert crc_of(data) == zlib.crc32(data)
        assert crc_of(memoryview(data)) == crc_of(bytearray(data)) == zlib.crc32(data)
    with pytest.raises(TypeError):
        crc_of("text")  # type: ignore[arg-type]


def test_call_times_are_kept_to_the_millisecond_widening_the_window_they_bound() -> None:
    # When the call was first recorded rounds down, when it was last sent rounds up: a
    # reconciler that looks between them never misses the moment the call landed.
    record = CallRecord(3, PENDING, range(0, 2), (1, 2), started_at=1000.1239, sent_at=1005.4561)
    decoded = decode_record(encode_record(record))
    assert (decoded.started_at, decoded.sent_at) == (1000.123, 1005.457)
    exact = CallRecord(3, PENDING, range(0, 2), (1, 2), started_at=1000.5, sent_at=1005.25)
    assert decode_record(encode_record(exact)).started_at == 1000.5
    assert decode_record(encode_record(exact)).sent_at == 1005.25


async def test_two_concurrent_attempts_the_older_is_fenced_and_nothing_is_lost() -> None:
    store = MemoryStore()
    destination = Destination(idempotent=True, latency=0.005)
    gate = anyio.Event()
    results: dict[str, BaseException | None] = {}

    async def attempt(name: str, delay: float) -> None:
        await anyio.sleep(delay)
        try:
            await run_attempt(store, destination, _slowly(ENTRIES, gate if name == "old" else None))
            results[name] = None
        except BaseException as exc:  # noqa: BLE001
            results[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(attempt, "old", 0)
        tg.start_soon(attempt, "new", 0.05)
        await anyio.sleep(0.1)
        gate.set()
    assert isinstance(results["old"], FencedError)
    assert results["new"] is None
    assert set(destination.applied) == set(ENTRIES)
    assert destination.duplicates() == 0


async def _slowly(entries: list[str], gate: anyio.Event | None) -> Any:
    for i, entry in enumerate(entries):
        if gate is not None and i == 30:
            await gate.wait()
        yield entry


async def test_records_of_other_scope_users_are_left_alone() -> None:
    store = MemoryStore()
    state = await store.take(SCOPE)
    await store.put(SCOPE, state.epoch, {"fn:0000000000": b"owned by durable calls"})
    destination = Destination()
    await run_attempt(store, destination, ENTRIES)
    after = await store.load(SCOPE)
    assert after is not None and after.completed
    assert set(after.records) == {"fn:0000000000", "summary"}
    assert after.records["fn:0000000000"] == b"owned by durable calls"
    assert sorted(destination.applied) == sorted(ENTRIES)


async def test_sync_through_a_mark_waits_only_for_what_was_recorded_before_it() -> None:
    """A request waits for its own record, not for records queued after it: once its
    record is durable, ``sync(through=mark)`` writes nothing more."""
    puts: list[set[str]] = []

    class Counting(MemoryStore):
        async def put(self, scope: Scope, epoch: int, puts_: Any, deletes: Any = ()) -> None:
            puts.append(set(puts_))
            await super().put(scope, epoch, puts_, deletes)

    log = CallLog(Counting(), SCOPE)
    await log.open(bytes, lambda call, entries: None)  # type: ignore[arg-type,return-value]
    first = log.new_call(range(0, 2), [b"a", b"b"])
    mark = log.changes
    await log.sync(through=mark)
    assert puts == [{"call:0000000000", "meta"}]
    log.record_result(first, range(0, 2), {}, None)
    log.new_call(range(2, 3), [b"c"])
    await log.sync(through=mark)  # already durable: nothing is written
    assert len(puts) == 1
    await log.sync()  # everything: the outcome and the second call, in one write
    assert puts[1] == {"call:0000000000", "call:0000000001", "meta"}
