"""A scope is done only when the driver completes it; until then a replay is matched entry
by entry, and after it a replay must bring the same input."""

from __future__ import annotations

import dataclasses

import pytest

from asyncsink import (
    CallLog,
    CorruptRecordError,
    DeadLetter,
    DeadLetterError,
    ReplayMismatchError,
    Scope,
    WriterStateError,
)
from asyncsink.durable.completion import (
    BATCH_KEY,
    SUMMARY_KEY,
    CompletedBatch,
    ScopeDigest,
    ScopeSummary,
    complete_scopes,
)
from asyncsink.stores.memory import MemoryStore

from .harness import SCOPE, Crash, CrashingStore, Destination, EntryWriter, options, run_attempt

pytestmark = pytest.mark.anyio

ENTRIES = [f"e{i}" for i in range(100)]


async def test_a_barrier_that_passed_leaves_the_scope_open_for_the_rest_of_the_input() -> None:
    """The upstream-failure case: the first attempt saw its input end early (a clean end
    in the worker while the task failed in the JVM); the retry gets every row."""
    store = MemoryStore()
    destination = Destination(idempotent=True)
    await run_attempt(store, destination, ENTRIES[:35], complete=False)
    state = await store.load(SCOPE)
    assert state is not None and not state.completed
    writer = await run_attempt(store, destination, ENTRIES)
    assert sorted(destination.applied) == sorted(ENTRIES)
    assert destination.duplicates() == 0
    assert writer.statistics().skipped == 35
    assert writer.statistics().delivered == 65


async def test_a_completed_scope_replayed_with_its_input_sends_nothing() -> None:
    store = MemoryStore()
    await run_attempt(store, Destination(), ENTRIES)
    again = Destination()
    writer = await run_attempt(store, again, ENTRIES)
    assert again.applied == []
    assert writer.statistics().skipped == len(ENTRIES)


@pytest.mark.parametrize(
    "replay",
    [
        ENTRIES[:99],  # a row less
        [*ENTRIES, "e100"],  # a row more
        ENTRIES[:50] + ["other"] + ENTRIES[51:],  # a row changed
        ENTRIES[:10] + ENTRIES[11:] + ["e1"],  # a row replaced by a copy of another
    ],
    ids=["shorter", "longer", "changed", "duplicated"],
)
async def test_a_completed_scope_replayed_with_other_input_fails_loudly(replay: list[str]) -> None:
    store = MemoryStore()
    await run_attempt(store, Destination(), ENTRIES)
    again = Destination()
    with pytest.raises(ReplayMismatchError) as caught:
        await run_attempt(store, again, replay)
    assert again.applied == []
    message = str(caught.value)
    assert "sink/0/0" in message and "'sink'" in message
    assert "100 entries" in message and "batchId" in message


async def test_a_completed_scope_replayed_in_another_order_is_the_same_delivery() -> None:
    store = MemoryStore()
    await run_attempt(store, Destination(), ENTRIES)
    again = Destination()
    writer = await run_attempt(store, again, list(reversed(ENTRIES)))
    assert again.applied == [] and writer.statistics().skipped == len(ENTRIES)


async def test_the_digest_is_the_same_whatever_attempts_delivered_the_entries() -> None:
    """Entries acknowledged by an earlier attempt, re-sent after a partial failure, or
    dead-lettered digest alike: the completed replay passes."""
    store = MemoryStore()
    destination = Destination(idempotent=True)
    destination.crash_after_apply_on = 3
    with pytest.raises((Crash, BaseExceptionGroup)):
        await run_attempt(store, destination, ENTRIES, max_in_flight_requests=1)
    await run_attempt(store, destination, ENTRIES)
    writer = await run_attempt(store, Destination(), ENTRIES)
    assert writer.statistics().skipped == len(ENTRIES)


async def test_completion_keeps_a_summary_of_bytes_not_per_entry_records() -> None:
    store = MemoryStore()
    await run_attempt(store, Destination(), [f"row-{i}" for i in range(5000)])
    state = await store.load(SCOPE)
    assert state is not None and state.completed
    assert set(state.records) == {SUMMARY_KEY}
    assert len(state.records[SUMMARY_KEY]) < 120
    assert ScopeSummary.decode(state.records[SUMMARY_KEY])[0] == 5000


async def test_a_crash_while_completing_leaves_a_scope_that_replays_without_sending() -> None:
    """The driver dies between the last partition returning and COMPLETED (and after)."""
    destination = Destination()
    store = CrashingStore(MemoryStore(), destination.events)
    store.crash_on_complete = True
    with pytest.raises(Crash):
        await run_attempt(store, destination, ENTRIES)
    store.crash_on_complete = False
    writer = await run_attempt(store, destination, ENTRIES)
    assert sorted(destination.applied) == sorted(ENTRIES)
    assert writer.statistics().skipped == len(ENTRIES)
    # after COMPLETED was written: the replay sends nothing either
    writer = await run_attempt(store, destination, ENTRIES)
    assert writer.statistics().skipped == len(ENTRIES)
    assert destination.duplicates() == 0


async def test_sealing_fences_an_attempt_that_still_runs() -> None:
    store = MemoryStore()
    call_log = CallLog(store, SCOPE)
    writer = EntryWriter(Destination(), options=options(), call_log=call_log)
    with pytest.raises(BaseException) as caught:  # noqa: B017 - a FencedError in a group
        async with writer:
            await writer.write_all(ENTRIES[:20])
            await writer.flush()
            await complete_scopes(store, [ScopeSummary(SCOPE, 20, ScopeDigest().hexdigest())])
            await writer.write_all(ENTRIES[20:])
    assert "taken over" in repr(caught.value)


async def test_keys_differ_for_other_content_in_the_same_call_of_a_scope() -> None:
    """After a purge, a new input under the same scope never reuses a key, so a destination
    that deduplicates by key stores it (hazard 7)."""
    store = MemoryStore()
    destination = Destination(idempotent=True)
    await run_attempt(store, destination, ENTRIES)
    await store.purge("sink")
    fresh = [f"new{i}" for i in range(100)]
    await run_attempt(store, destination, fresh)
    assert sorted(destination.applied) == sorted(ENTRIES + fresh)
    # the same content keeps its keys: a re-send of a purged scope is still absorbed
    await store.purge("sink")
    await run_attempt(store, destination, fresh)
    assert destination.duplicates() == 0


async def test_runs_of_one_sink_are_separate_scopes_with_separate_keys() -> None:
    store = MemoryStore()
    destination = Destination(idempotent=True)
    first, second = Scope("sink", 0, 0, "run1"), Scope("sink", 0, 0, "run2")
    await run_attempt(store, destination, ENTRIES, scope=first)
    writer = await run_attempt(store, destination, ENTRIES, scope=second)
    assert writer.statistics().skipped == 0
    assert destination.applied.count("e7") == 2
    assert str(second) == "sink/run2/0/0"


class Rejecting(EntryWriter):
    """Rejects every entry whose text ends in 7 as a bad record."""

    async def submit_request_entries(self, entries: list[str]) -> object:
        from asyncsink import SubmitResult

        self.destination.applied.extend(e for e in entries if not e.endswith("7"))
        return SubmitResult(rejected={i: "bad" for i, e in enumerate(entries) if e.endswith("7")})


async def test_a_failing_dead_letter_target_fails_the_task_and_the_retry_settles_them() -> None:
    store = MemoryStore()
    destination = Destination(idempotent=True)
    letters: list[DeadLetter] = []

    def broken(letter: DeadLetter) -> None:
        raise OSError("read-only file system")

    with pytest.raises(DeadLetterError) as caught:
        async with Rejecting(
            destination, options=options(dead_letter=broken), call_log=CallLog(store, SCOPE)
        ) as writer:
            await writer.write_all(ENTRIES)
    assert "read-only file system" in str(caught.value) and "dead-letter" in str(caught.value)
    async with Rejecting(
        destination, options=options(dead_letter=letters.append), call_log=CallLog(store, SCOPE)
    ) as writer:
        await writer.write_all(ENTRIES)
    rejected = {e for e in ENTRIES if e.endswith("7")}
    assert {letter.record.decode() for letter in letters} == rejected
    assert set(destination.applied) == set(ENTRIES) - rejected
    assert destination.duplicates() == 0


async def test_a_partition_new_to_a_completed_batch_is_refused_before_it_sends() -> None:
    """The same rows cut into more partitions: the new partition's scope has no summary to
    compare, but its batch was completed without it (hazard 7)."""
    store = MemoryStore()
    parts = [dataclasses.replace(SCOPE, partition_id=p) for p in range(2)]
    summaries = []
    for scope, half in zip(parts, (ENTRIES[:50], ENTRIES[50:]), strict=True):
        call_log = CallLog(store, scope)
        async with EntryWriter(Destination(), options=options(), call_log=call_log) as writer:
            await writer.write_all(half)
        summaries.append(call_log.summary())
    await complete_scopes(store, summaries, whole_batches=True)
    first = await store.load(parts[0])
    assert first is not None and CompletedBatch.decode(first.records[BATCH_KEY]).partitions == 2
    again = Destination()
    new_scope = dataclasses.replace(SCOPE, partition_id=2)
    with pytest.raises(ReplayMismatchError) as caught:
        await run_attempt(store, again, ENTRIES[60:], scope=new_scope)
    assert again.applied == []
    assert f"scope {new_scope}" in str(caught.value)
    assert "is new to a batch that was completed with 2 partitions" in str(caught.value)
    assert "Nothing was sent" in str(caught.value)
    # the partitions the batch had still replay as before: nothing sent, nothing refused
    writer = await run_attempt(store, again, ENTRIES[50:], scope=parts[1])
    assert again.applied == [] and writer.statistics().skipped == 50
    # refused at once, before anything happens in the scope: even with no rows
    with pytest.raises(ReplayMismatchError, match="the replay comes in more partitions"):
        await run_attempt(store, again, [], scope=dataclasses.replace(SCOPE, partition_id=3))


async def test_scopes_completed_one_by_one_leave_their_batch_open_to_new_partitions() -> None:
    """``CallLog.complete`` (and ``complete_scopes`` without ``whole_batches``) cannot
    know the batch is whole: another partition of it may start later."""
    store = MemoryStore()
    await run_attempt(store, Destination(), ENTRIES[:50])  # partition 0, completed alone
    later = Destination()
    scope = dataclasses.replace(SCOPE, partition_id=1)
    writer = await run_attempt(store, later, ENTRIES[50:], scope=scope)
    assert sorted(later.applied) == sorted(ENTRIES[50:])
    assert writer.statistics().delivered == 50
    state = await store.load(dataclasses.replace(SCOPE, partition_id=0))
    assert state is not None and BATCH_KEY not in state.records


async def test_a_corrupt_batch_record_fails_a_new_partition_naming_it() -> None:
    store = MemoryStore()
    first = dataclasses.replace(SCOPE, partition_id=0)
    await store.seal(first, {BATCH_KEY: b'{"v": 1, "partitions": true}'}, drop_prefixes=())
    with pytest.raises(CorruptRecordError, match=f"scope {first}: record 'batch'"):
        await run_attempt(
            store, Destination(), ENTRIES, scope=dataclasses.replace(SCOPE, partition_id=3)
        )


async def test_a_call_log_serves_one_writer_only() -> None:
    store, destination = MemoryStore(), Destination()
    call_log = CallLog(store, SCOPE)
    first = EntryWriter(destination, options=options(), call_log=call_log)
    async with first:
        await first.write_all(ENTRIES[:50])
        second = EntryWriter(destination, options=options(), call_log=call_log)
        with pytest.raises(WriterStateError, match="a CallLog of its own"):
            async with second:  # its epoch would become the first writer's too
                await second.write_all(ENTRIES)
        await first.write_all(ENTRIES[50:])
    assert sorted(destination.applied) == sorted(ENTRIES) and destination.duplicates() == 0
    again = EntryWriter(destination, options=options(), call_log=call_log)
    with pytest.raises(WriterStateError, match="a CallLog of its own"):
        async with again:  # a retry after it: its digest would add to the first one's
            pass
    await call_log.complete()
    assert (await run_attempt(store, destination, ENTRIES)).statistics().skipped == len(ENTRIES)
