"""The behaviour every ``RecordStore`` must show, written once.

A test module for a store subclasses ``StoreConformance`` as ``Test...`` and supplies a
``store`` fixture that yields a fresh, empty store (and closes it afterwards)::

    class TestMemoryStore(StoreConformance):
        @pytest.fixture
        async def store(self) -> AsyncIterator[RecordStore]:
            async with MemoryStore() as store:
                yield store
"""

from __future__ import annotations

import os
import time

import anyio
import pytest

from asyncsink.errors import FencedError
from asyncsink.stores import RecordStore, Scope

A = Scope("sink-a", 7, 3)
B = Scope("sink-a", 7, 4)
A_RUN1 = Scope("sink-a", 7, 3, "run-1")
A_RUN2 = Scope("sink-a", 7, 3, "run-2")
LOG_PREFIXES = ("call:", "meta")


def _age_since(mark: float) -> float:
    """An ``older_than_s`` that spares what was updated after ``mark`` (with 0.2 s to spare
    for the purge call to start) and takes what was updated 0.5 s before it."""
    return time.time() - mark + 0.2


class StoreConformance:
    """Mixin of conformance tests; subclasses provide the ``store`` fixture."""

    pytestmark = pytest.mark.anyio

    # -- take and load -------------------------------------------------------------------

    async def test_take_creates_scope_at_epoch_one_and_each_take_bumps_it(
        self, store: RecordStore
    ) -> None:
        first = await store.take(A)
        assert (first.epoch, first.completed, dict(first.records)) == (1, False, {})
        assert (await store.take(A)).epoch == 2
        assert (await store.take(A)).epoch == 3
        assert (await store.take(B)).epoch == 1, "scopes have independent epochs"
        loaded = await store.load(A)
        assert loaded is not None and loaded.epoch == 3

    async def test_load_of_unknown_scope_is_none_and_load_claims_nothing(
        self, store: RecordStore
    ) -> None:
        assert await store.load(A) is None
        await store.take(A)
        await store.load(A)
        await store.load(A)
        state = await store.load(A)
        assert state is not None and state.epoch == 1
        assert await store.load(B) is None

    async def test_load_record_reads_one_record_and_claims_nothing(
        self, store: RecordStore
    ) -> None:
        assert await store.load_record(A, "summary") is None  # no scope
        epoch = (await store.take(A)).epoch
        assert await store.load_record(A, "summary") is None  # no record
        await store.put(A, epoch, {"summary": b"\x00s", "summary2": b"other"})
        assert await store.load_record(A, "summary") == b"\x00s"
        assert await store.load_record(A_RUN1, "summary") is None  # another run
        assert await store.load_record(B, "summary") is None  # another partition
        await store.put(A, epoch, {"summary": b"new"})  # loading fenced nobody
        assert await store.load_record(A, "summary") == b"new"

    async def test_take_returns_the_records_and_completed_flag_it_finds(
        self, store: RecordStore
    ) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"call-1": b"one", "call-2": b"two"})
        again = await store.take(A)
        assert again.epoch == epoch + 1
        assert dict(again.records) == {"call-1": b"one", "call-2": b"two"}
        assert again.completed is False
        await store.complete(A, again.epoch, drop_records=False)
        last = await store.take(A)
        assert last.completed is True, "a COMPLETED scope stays COMPLETED when taken"
        assert last.epoch == again.epoch + 1
        assert dict(last.records) == {"call-1": b"one", "call-2": b"two"}

    # -- put -----------------------------------------------------------------------------

    async def test_put_with_current_epoch_writes_and_replaces(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"k1": b"v1", "k2": b"v2"})
        await store.put(A, epoch, {"k2": b"v2-new", "k3": b"v3"})
        state = await store.load(A)
        assert state is not None
        assert dict(state.records) == {"k1": b"v1", "k2": b"v2-new", "k3": b"v3"}
        other = await store.load(B)
        assert other is None, "a put touches its own scope only"

    async def test_put_with_old_epoch_is_fenced_and_changes_nothing(
        self, store: RecordStore
    ) -> None:
        old = (await store.take(A)).epoch
        await store.put(A, old, {"keep": b"original", "gone-not": b"x"})
        new = (await store.take(A)).epoch
        with pytest.raises(FencedError) as caught:
            await store.put(
                A,
                old,
                {"keep": b"overwritten", "extra-1": b"1", "extra-2": b"2", "extra-3": b"3"},
                deletes=["gone-not"],
            )
        assert (caught.value.scope, caught.value.epoch, caught.value.current) == (A, old, new)
        state = await store.load(A)
        assert state is not None
        assert dict(state.records) == {"keep": b"original", "gone-not": b"x"}
        assert state.epoch == new
        await store.put(A, new, {"next": b"ok"})
        state = await store.load(A)
        assert state is not None and state.records["next"] == b"ok"

    async def test_put_with_a_future_epoch_or_on_an_untaken_scope_is_fenced(
        self, store: RecordStore
    ) -> None:
        with pytest.raises(FencedError) as caught:
            await store.put(A, 1, {"k": b"v"})
        assert caught.value.current is None
        assert await store.load(A) is None, "a fenced put must not create the scope"
        epoch = (await store.take(A)).epoch
        with pytest.raises(FencedError):
            await store.put(A, epoch + 1, {"k": b"v"})
        state = await store.load(A)
        assert state is not None and dict(state.records) == {}

    async def test_empty_put_checks_the_fence(self, store: RecordStore) -> None:
        old = (await store.take(A)).epoch
        await store.put(A, old, {})
        await store.take(A)
        with pytest.raises(FencedError):
            await store.put(A, old, {})

    async def test_put_deletes_records_together_with_puts(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"a": b"1", "b": b"2", "c": b"3"})
        await store.put(A, epoch, {"d": b"4"}, deletes=["a", "c", "never-written"])
        state = await store.load(A)
        assert state is not None and dict(state.records) == {"b": b"2", "d": b"4"}
        await store.put(A, epoch, {}, deletes=iter(["b"]))
        state = await store.load(A)
        assert state is not None and dict(state.records) == {"d": b"4"}

    async def test_put_refuses_a_key_both_put_and_deleted(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        with pytest.raises(ValueError, match="both put and deleted"):
            await store.put(A, epoch, {"a": b"1", "b": b"2"}, deletes=["b"])
        with pytest.raises(TypeError):
            await store.put(A, epoch, {"a": "not bytes"})  # type: ignore[dict-item]
        state = await store.load(A)
        assert state is not None and dict(state.records) == {}

    async def test_stored_records_do_not_alias_the_callers_objects(
        self, store: RecordStore
    ) -> None:
        epoch = (await store.take(A)).epoch
        value = bytearray(b"before")
        puts = {"k": value}
        await store.put(A, epoch, puts)  # type: ignore[arg-type]
        value[:] = b"after!"
        puts["other"] = bytearray(b"x")
        state = await store.load(A)
        assert state is not None and dict(state.records) == {"k": b"before"}
        assert all(type(v) is bytes for v in state.records.values())

    async def test_keys_and_values_round_trip_exactly(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        records = {
            "": b"empty key",
            "with/slash#and#hash": b"\x00\xff\x00binary",
            "ünïcode-κλειδί": "ünïcode".encode(),
            "empty-value": b"",
        }
        await store.put(A, epoch, records)
        assert dict((await store.take(A)).records) == records

    # -- complete ------------------------------------------------------------------------

    async def test_complete_marks_completed_and_drops_records(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"a": b"1", "b": b"2"})
        await store.complete(A, epoch)
        state = await store.load(A)
        assert state is not None
        assert (state.epoch, state.completed, dict(state.records)) == (epoch, True, {})
        await store.complete(A, epoch)
        state = await store.load(A)
        assert state is not None and state.completed

    async def test_complete_can_keep_records(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"a": b"1"})
        await store.complete(A, epoch, drop_records=False)
        state = await store.load(A)
        assert state is not None and state.completed and dict(state.records) == {"a": b"1"}

    async def test_fenced_complete_raises_and_changes_nothing(self, store: RecordStore) -> None:
        old = (await store.take(A)).epoch
        await store.put(A, old, {"a": b"1"})
        new = (await store.take(A)).epoch
        with pytest.raises(FencedError) as caught:
            await store.complete(A, old)
        assert caught.value.current == new
        state = await store.load(A)
        assert state is not None
        assert (state.completed, dict(state.records)) == (False, {"a": b"1"})
        with pytest.raises(FencedError):
            await store.complete(B, 1)
        assert await store.load(B) is None

    # -- listing and purging -------------------------------------------------------------

    async def test_scopes_lists_per_sink_and_all_in_scope_order(self, store: RecordStore) -> None:
        wanted = [
            Scope("beta", 2, 0),
            Scope("alpha", 10, 1),
            Scope("alpha", 2, 5),
            Scope("alpha", 2, 0),
            Scope("alpha", 9, 0),
        ]
        before = time.time()
        for scope in wanted:
            await store.take(scope)
        epoch = (await store.take(Scope("alpha", 9, 0))).epoch
        await store.put(Scope("alpha", 9, 0), epoch, {"x": b"1", "y": b"2"})
        await store.complete(Scope("beta", 2, 0), 1, drop_records=False)
        after = time.time()

        alpha = await store.scopes("alpha")
        assert [info.scope for info in alpha] == sorted(s for s in wanted if s.sink_id == "alpha")
        assert [info.scope.batch_id for info in alpha] == [2, 2, 9, 10], "numeric batch order"
        by_scope = {info.scope: info for info in await store.scopes()}
        assert list(by_scope) == sorted(wanted)
        nine = by_scope[Scope("alpha", 9, 0)]
        assert (nine.epoch, nine.completed, nine.record_count) == (2, False, 2)
        beta = by_scope[Scope("beta", 2, 0)]
        assert (beta.epoch, beta.completed, beta.record_count) == (1, True, 0)
        assert all(before - 1 <= info.updated_at <= after + 1 for info in by_scope.values())
        assert await store.scopes("gamma") == []

    async def test_purge_by_batch_keeps_newer_batches_and_other_sinks(
        self, store: RecordStore
    ) -> None:
        for batch in range(5):
            for partition in (0, 1):
                epoch = (await store.take(Scope("s", batch, partition))).epoch
                await store.put(Scope("s", batch, partition), epoch, {"r": b"x"})
        await store.take(Scope("other", 0, 0))
        assert await store.purge("s", before_batch=3) == 6
        remaining = [info.scope for info in await store.scopes()]
        assert remaining == [Scope("other", 0, 0)] + [
            Scope("s", b, p) for b in (3, 4) for p in (0, 1)
        ]
        assert await store.load(Scope("s", 0, 0)) is None
        fresh = await store.take(Scope("s", 0, 0))
        assert (fresh.epoch, dict(fresh.records)) == (1, {}), "a purged scope starts afresh"

    async def test_purge_by_age_keeps_recently_updated_scopes(self, store: RecordStore) -> None:
        old, touched, new = Scope("s", 1, 0), Scope("s", 2, 0), Scope("s", 3, 0)
        await store.take(old)
        touched_epoch = (await store.take(touched)).epoch
        await anyio.sleep(0.5)
        mark = time.time()
        await store.put(touched, touched_epoch, {"k": b"v"})
        await store.take(new)
        # Everything updated since `mark` is younger than this bound, `old` is 0.5 s older.
        assert await store.purge("s", older_than_s=_age_since(mark)) == 1
        assert [info.scope for info in await store.scopes("s")] == [touched, new]

    async def test_purge_with_both_bounds_needs_both(self, store: RecordStore) -> None:
        early_old, late_old = Scope("s", 1, 0), Scope("s", 5, 0)
        await store.take(early_old)
        await store.take(late_old)
        await anyio.sleep(0.5)
        mark = time.time()
        early_new = Scope("s", 2, 0)
        await store.take(early_new)
        assert await store.purge("s", before_batch=3, older_than_s=_age_since(mark)) == 1
        assert [info.scope for info in await store.scopes("s")] == [early_new, late_old]

    async def test_purge_without_bounds_removes_the_whole_sink(self, store: RecordStore) -> None:
        for scope in (Scope("s", 1, 0), Scope("s", 2, 0), Scope("t", 1, 0)):
            epoch = (await store.take(scope)).epoch
            await store.put(scope, epoch, {"k": b"v"})
        assert await store.purge("s") == 2
        assert [info.scope for info in await store.scopes()] == [Scope("t", 1, 0)]
        assert await store.purge("s") == 0
        with pytest.raises(ValueError):
            await store.purge("t", older_than_s=-1)

    # -- concurrency ---------------------------------------------------------------------

    async def test_concurrent_takers_each_get_one_epoch_and_only_the_last_may_write(
        self, store: RecordStore
    ) -> None:
        takers = 8
        epochs: list[int] = []

        async def take() -> None:
            epochs.append((await store.take(A)).epoch)

        async with anyio.create_task_group() as group:
            for _ in range(takers):
                group.start_soon(take)
        assert sorted(epochs) == list(range(1, takers + 1)), "every take won a distinct epoch"

        outcomes: dict[int, bool] = {}

        async def write(epoch: int) -> None:
            try:
                await store.put(A, epoch, {f"by-{epoch}": b"x", "shared": str(epoch).encode()})
                outcomes[epoch] = True
            except FencedError:
                outcomes[epoch] = False

        async with anyio.create_task_group() as group:
            for epoch in epochs:
                group.start_soon(write, epoch)
        assert outcomes == {epoch: epoch == takers for epoch in epochs}
        state = await store.load(A)
        assert state is not None
        assert dict(state.records) == {f"by-{takers}": b"x", "shared": str(takers).encode()}

    async def test_a_take_between_two_puts_fences_the_second(self, store: RecordStore) -> None:
        first = (await store.take(A)).epoch
        await store.put(A, first, {"1": b"a"})
        second = await store.take(A)
        assert dict(second.records) == {"1": b"a"}
        with pytest.raises(FencedError):
            await store.put(A, first, {"2": b"b"})
        await store.put(A, second.epoch, {"2": b"c"})
        state = await store.load(A)
        assert state is not None and dict(state.records) == {"1": b"a", "2": b"c"}

    # -- size ----------------------------------------------------------------------------

    async def test_large_values_round_trip(self, store: RecordStore) -> None:
        records = {f"big-{i}": os.urandom(100 * 1024) for i in range(3)}
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, records)
        assert dict((await store.take(A)).records) == records

    async def test_many_records_round_trip_and_complete_drops_them_all(
        self, store: RecordStore
    ) -> None:
        records = {f"call-{i:05d}": f"payload {i}".encode() * 3 for i in range(1000)}
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, records)
        state = await store.take(A)
        assert dict(state.records) == records
        (info,) = await store.scopes(A.sink_id)
        assert info.record_count == 1000
        await store.put(A, state.epoch, {}, deletes=list(records)[:500])
        loaded = await store.load(A)
        assert loaded is not None and dict(loaded.records) == dict(list(records.items())[500:])
        await store.complete(A, state.epoch)
        loaded = await store.load(A)
        assert loaded is not None and loaded.completed and dict(loaded.records) == {}

    # -- runs ----------------------------------------------------------------------------

    async def test_scopes_of_different_runs_are_independent(self, store: RecordStore) -> None:
        assert [(await store.take(scope)).epoch for scope in (A, A_RUN1, A_RUN2)] == [1, 1, 1]
        assert (await store.take(A_RUN1)).epoch == 2
        await store.put(A_RUN1, 2, {"k": b"run-1"})
        await store.put(A, 1, {"k": b"no run"})
        with pytest.raises(FencedError):
            await store.put(A_RUN2, 2, {"k": b"x"})
        await store.complete(A_RUN2, 1)
        states = {scope: await store.load(scope) for scope in (A, A_RUN1, A_RUN2)}
        shown = {
            scope: (state.epoch, state.completed, dict(state.records))
            for scope, state in states.items()
            if state is not None
        }
        assert shown == {
            A: (1, False, {"k": b"no run"}),
            A_RUN1: (2, False, {"k": b"run-1"}),
            A_RUN2: (1, True, {}),
        }
        assert await store.load(Scope("sink-a", 7, 3, "run-3")) is None
        listed = await store.scopes("sink-a")
        assert [info.scope for info in listed] == [A, A_RUN1, A_RUN2]
        assert [info.scope.run for info in listed] == ["", "run-1", "run-2"]
        assert [(info.epoch, info.record_count) for info in listed] == [(1, 1), (2, 1), (1, 0)]

    async def test_purge_of_one_run_keeps_the_other_runs(self, store: RecordStore) -> None:
        for run in ("", "run-1", "run-2"):
            for batch in (1, 2):
                scope = Scope("s", batch, 0, run)
                epoch = (await store.take(scope)).epoch
                await store.put(scope, epoch, {"r": b"x"})
        await store.take(Scope("t", 1, 0, "run-1"))
        assert await store.purge("s", run="run-1") == 2
        assert await store.purge("s", run="run-2", before_batch=2) == 1
        assert await store.purge("s", run="run-9") == 0
        remaining = [info.scope for info in await store.scopes()]
        assert remaining == [
            Scope("s", 1, 0),
            Scope("s", 2, 0),
            Scope("s", 2, 0, "run-2"),
            Scope("t", 1, 0, "run-1"),
        ]
        assert await store.purge("s", run="") == 2, "the empty run is a run of its own"
        assert [info.scope for info in await store.scopes("s")] == [Scope("s", 2, 0, "run-2")]

    async def test_purge_without_a_run_removes_every_run(self, store: RecordStore) -> None:
        for scope in (A, A_RUN1, A_RUN2, Scope("sink-a", 9, 0, "run-1"), Scope("other", 7, 3)):
            epoch = (await store.take(scope)).epoch
            await store.put(scope, epoch, {"k": b"v"})
        assert await store.purge("sink-a", before_batch=8) == 3
        assert [info.scope for info in await store.scopes("sink-a")] == [
            Scope("sink-a", 9, 0, "run-1")
        ]
        assert await store.purge("sink-a") == 1
        assert [info.scope for info in await store.scopes()] == [Scope("other", 7, 3)]
        fresh = await store.take(A_RUN1)
        assert (fresh.epoch, dict(fresh.records)) == (1, {})

    # -- seal ----------------------------------------------------------------------------

    async def test_seal_of_an_unknown_scope_creates_it_completed(self, store: RecordStore) -> None:
        await store.seal(A_RUN1, {"summary": b"s1"}, drop_prefixes=LOG_PREFIXES)
        state = await store.load(A_RUN1)
        assert state is not None
        assert (state.epoch, state.completed, dict(state.records)) == (
            1,
            True,
            {"summary": b"s1"},
        )
        assert await store.load(A) is None and await store.load(A_RUN2) is None

    async def test_seal_fences_the_holder_and_drops_only_the_prefixed_records(
        self, store: RecordStore
    ) -> None:
        holder = (await store.take(A)).epoch
        kept = {"fn:0000000000": b"durable call", "metal": b"not meta", "cal:1": b"c"}
        await store.put(
            A, holder, {"call:0000000001": b"r1", "call:0000000002": b"r2", "meta": b"m", **kept}
        )
        await store.seal(A, {"summary": b"s"}, drop_prefixes=("call:", "meta"))
        state = await store.load(A)
        assert state is not None
        assert (state.epoch, state.completed) == (holder + 1, True)
        expected = {"fn:0000000000": b"durable call", "cal:1": b"c", "summary": b"s"}
        assert dict(state.records) == expected, "'metal' starts with 'meta' and goes too"
        with pytest.raises(FencedError) as caught:
            await store.put(A, holder, {"call:0000000003": b"late"})
        assert caught.value.current == holder + 1
        with pytest.raises(FencedError):
            await store.complete(A, holder)
        after = await store.load(A)
        assert after is not None and dict(after.records) == expected

    async def test_seal_keeps_a_put_whose_key_is_under_a_dropped_prefix(
        self, store: RecordStore
    ) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"meta": b"old", "call:1": b"r"})
        await store.seal(A, {"meta": b"new"}, drop_prefixes=("call:", "meta"))
        state = await store.load(A)
        assert state is not None and dict(state.records) == {"meta": b"new"}

    async def test_seal_twice_is_harmless_and_seal_touches_one_scope(
        self, store: RecordStore
    ) -> None:
        for scope in (A, A_RUN1, B):
            epoch = (await store.take(scope)).epoch
            await store.put(scope, epoch, {"call:1": b"r", "fn:1": b"f"})
        await store.seal(A, {"summary": b"s"}, drop_prefixes=LOG_PREFIXES)
        await store.seal(A, {"summary": b"s"}, drop_prefixes=LOG_PREFIXES)
        state = await store.load(A)
        assert state is not None
        assert (state.epoch, state.completed) == (3, True)
        assert dict(state.records) == {"fn:1": b"f", "summary": b"s"}
        for other in (A_RUN1, B):
            untouched = await store.load(other)
            assert untouched is not None
            assert (untouched.epoch, untouched.completed) == (1, False)
            assert dict(untouched.records) == {"call:1": b"r", "fn:1": b"f"}
        listed = {info.scope: info for info in await store.scopes("sink-a")}
        assert (listed[A].completed, listed[A].record_count) == (True, 2)
        again = await store.take(A)
        assert again.completed and again.epoch == 4, "a sealed scope stays COMPLETED"

    async def test_seal_drops_many_records_and_refuses_bad_puts(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {f"call:{i:010d}": b"x" * 50 for i in range(300)})
        await store.seal(A, {}, drop_prefixes=("call:",))
        state = await store.load(A)
        assert state is not None and state.completed and dict(state.records) == {}
        with pytest.raises(TypeError):
            await store.seal(B, {"k": "not bytes"}, drop_prefixes=())  # type: ignore[dict-item]
        assert await store.load(B) is None, "a refused seal writes nothing"

    # -- lifecycle -----------------------------------------------------------------------

    async def test_aclose_is_idempotent_and_the_store_reopens(self, store: RecordStore) -> None:
        epoch = (await store.take(A)).epoch
        await store.put(A, epoch, {"k": b"v"})
        await store.aclose()
        await store.aclose()
        state = await store.load(A)
        assert state is not None and dict(state.records) == {"k": b"v"}
