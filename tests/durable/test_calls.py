"""Durable calls for user code: each call runs once per scope, a retry replays its outcome."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from asyncsink import CorruptRecordError, DurableError, FencedError, Scope
from asyncsink.durable.calls import (
    DurableContext,
    FnRecord,
    args_digest,
    call_key,
    current_key,
    decode_fn_record,
    function_id,
)
from asyncsink.stores.base import RecordStore
from asyncsink.stores.memory import MemoryStore

SCOPE = Scope("jobs", 3, 1)
ROOT = Path(__file__).resolve().parents[2]


class Declined(Exception):
    """A picklable failure of the outside world."""


class Stubborn(Exception):
    """An exception that pickles but cannot be rebuilt from its pickle."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code}: {reason}")


class Crash(BaseException):
    """Stands for the process dying in the middle of a call."""


class World:
    """Side effects, counted per call: what the outside world saw."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.keys: dict[str, list[str]] = {}

    def charge(self, account: str, amount: int) -> dict[str, Any]:
        self.calls[f"charge:{account}"] += 1
        self.keys.setdefault(account, []).append(current_key())
        return {"account": account, "charged": amount}

    async def notify(self, account: str) -> str:
        await anyio.lowlevel.checkpoint()
        self.calls[f"notify:{account}"] += 1
        return f"sent to {account}"

    def refuse(self, account: str) -> None:
        self.calls[f"refuse:{account}"] += 1
        raise Declined(f"account {account} is closed")

    def explode(self, account: str) -> None:
        self.calls[f"explode:{account}"] += 1
        raise Crash(account)


async def attempt(store: RecordStore, world: World, amounts: list[int]) -> list[Any]:
    async with DurableContext(store, SCOPE) as ctx:
        return [await ctx.execute_async(world.charge, f"a{i}", n) for i, n in enumerate(amounts)]


async def stored_keys(store: RecordStore) -> list[str]:
    state = await store.load(SCOPE)
    assert state is not None
    return sorted(state.records)


pytestmark = pytest.mark.anyio


async def test_a_replay_returns_the_recorded_results_without_calling_again() -> None:
    store, world = MemoryStore(), World()
    first = await attempt(store, world, [10, 20, 30])
    async with DurableContext(store, SCOPE) as ctx:
        again = [
            await ctx.execute_async(world.charge, f"a{i}", n * 10) for i, n in enumerate([1, 2, 3])
        ]
        sent = await ctx.execute_async(world.notify, "a0")
    assert (
        again == first == [{"account": f"a{i}", "charged": n} for i, n in enumerate([10, 20, 30])]
    )
    assert world.calls == Counter({"charge:a0": 1, "charge:a1": 1, "charge:a2": 1, "notify:a0": 1})
    assert sent == "sent to a0"
    assert ctx.statistics().replayed == 3 and ctx.statistics().executed == 1
    assert await stored_keys(store) == [f"fn:{i:010d}" for i in range(4)]


async def test_a_recorded_exception_is_raised_again_with_its_type() -> None:
    store, world = MemoryStore(), World()
    for _ in range(2):
        async with DurableContext(store, SCOPE) as ctx:
            with pytest.raises(Declined, match="account a7 is closed") as caught:
                await ctx.execute_async(world.refuse, "a7")
            assert await ctx.execute_async(world.charge, "a8", 5) == {"account": "a8", "charged": 5}
    assert world.calls == Counter({"refuse:a7": 1, "charge:a8": 1})
    assert any("replayed from durable call 0" in note for note in caught.value.__notes__)


async def test_a_transient_failure_is_not_recorded_and_the_retry_calls_again() -> None:
    store, calls = MemoryStore(), Counter[str]()
    reconciled: list[str] = []

    def flaky(account: str) -> str:
        calls[account] += 1
        if calls[account] == 1:
            raise ConnectionResetError(f"{account}: connection reset")
        return f"posted {account}"

    def time_out(account: str) -> None:
        calls[account] += 1
        raise TimeoutError(f"{account}: no answer")

    def nothing_there(key: str) -> str:
        reconciled.append(key)
        raise LookupError(key)

    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(ConnectionResetError):
            await ctx.execute_async(flaky, "a0", transient=ConnectionError)
        with pytest.raises(TimeoutError):  # not of the transient types: an outcome
            await ctx.execute_async(time_out, "a1", transient=(ConnectionError,))
        with pytest.raises(ConnectionResetError):
            await ctx.execute_async(flaky, "a2", transient=(OSError,), reconciler=nothing_there)
    state = await store.load(SCOPE)
    assert state is not None
    assert sorted(state.records) == ["fn:0000000001", "fn:0000000002"]
    assert decode_fn_record(state.records["fn:0000000001"]).status == "FAILED"
    assert decode_fn_record(state.records["fn:0000000002"]).status == "PENDING"

    async with DurableContext(store, SCOPE) as ctx:
        assert await ctx.execute_async(flaky, "a0", transient=ConnectionError) == "posted a0"
        with pytest.raises(TimeoutError, match="a1: no answer"):
            await ctx.execute_async(time_out, "a1", transient=(ConnectionError,))
        second = await ctx.execute_async(
            flaky, "a2", transient=(OSError,), reconciler=nothing_there
        )
    assert second == "posted a2"
    assert calls == Counter({"a0": 2, "a1": 1, "a2": 2})
    assert reconciled == [call_key(SCOPE, 2, function_id(flaky), args_digest(("a2",), {}))]
    state = await store.load(SCOPE)
    assert state is not None
    statuses = [decode_fn_record(state.records[f"fn:{i:010d}"]).status for i in range(3)]
    assert statuses == ["SUCCEEDED", "FAILED", "SUCCEEDED"]


def test_a_transient_failure_tried_again_in_place_is_the_same_call() -> None:
    """A loop that retries a call after a transient failure numbers it as an attempt
    where it succeeded at once: nothing runs twice, no key serves two calls."""
    store, failures = MemoryStore(), Counter[str]()
    posted: list[tuple[str, str]] = []

    def post(row: str, fail: bool) -> str:
        if fail and not failures[row]:
            failures[row] += 1
            raise ConnectionResetError(row)
        posted.append((row, current_key()))
        return f"posted {row}"

    def attempt(fail: bool) -> list[str]:
        done = []
        with DurableContext.sync(store, SCOPE) as ctx:
            for row in ("r1", "r2"):
                for _ in range(3):
                    try:
                        done.append(ctx.execute(post, row, fail, transient=ConnectionError))
                        break
                    except ConnectionError:
                        continue
        return done

    assert attempt(fail=True) == ["posted r1", "posted r2"]
    assert [row for row, _ in posted] == ["r1", "r2"]
    assert attempt(fail=True) == ["posted r1", "posted r2"]  # no failure left: replayed
    assert [row for row, _ in posted] == ["r1", "r2"], "replayed, not run again"
    state = anyio.run(store.load, SCOPE)
    assert state is not None and sorted(state.records) == ["fn:0000000000", "fn:0000000001"]
    assert len({key for _, key in posted}) == 2


async def test_a_reconciler_failing_transiently_keeps_the_calls_number_too() -> None:
    store, sent = MemoryStore(), Counter[str]()
    flaky = {"fn": 1, "reconciler": 1}

    class Flaky(Exception):
        pass

    def send(n: int) -> int:
        if flaky["fn"]:
            flaky["fn"] -= 1
            raise Flaky("fn")
        sent[f"send{n}"] += 1
        return n

    def reconciler(key: str) -> int:
        if flaky["reconciler"]:
            flaky["reconciler"] -= 1
            raise Flaky("reconciler")
        raise LookupError(key)

    async def attempt() -> list[int]:
        done = []
        async with DurableContext(store, SCOPE) as ctx:
            for n in (1, 2):
                for _ in range(4):
                    try:
                        done.append(
                            await ctx.execute_async(
                                send, n, pending=True, reconciler=reconciler, transient=Flaky
                            )
                        )
                        break
                    except Flaky:
                        continue
        return done

    assert await attempt() == [1, 2]  # fn, then the reconciler, failed once each
    assert await attempt() == [1, 2]
    assert sent == Counter({"send1": 1, "send2": 1}), "replayed, not sent again"


async def test_a_call_left_pending_by_an_older_format_keeps_its_key() -> None:
    """Format 1 keyed a call by its number alone: a call it left PENDING is reconciled,
    and run again, under the key it was sent with."""
    store, keys = MemoryStore(), []
    epoch = (await store.take(SCOPE)).epoch
    function, digest = function_id(World.charge), args_digest(("a0", 5), {})
    old = FnRecord(0, function, digest, "PENDING", version=1)
    await store.put(SCOPE, epoch, {"fn:0000000000": old.encode()})

    def nothing_there(key: str) -> Any:
        keys.append(key)
        raise LookupError(key)

    world = World()
    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 5, reconciler=nothing_there)
    legacy = call_key(SCOPE, 0, function, digest, version=1)
    assert keys == [legacy] and world.keys["a0"] == [legacy]
    assert legacy != call_key(SCOPE, 0, function, digest)
    state = await store.load(SCOPE)
    assert state is not None
    assert decode_fn_record(state.records["fn:0000000000"]).status == "SUCCEEDED"


async def test_transient_takes_exception_classes_only() -> None:
    world = World()
    async with DurableContext(MemoryStore(), SCOPE) as ctx:
        for bad in ("ConnectionError", (ConnectionError, 3), KeyboardInterrupt):
            with pytest.raises(TypeError, match="transient: expected an Exception subclass"):
                await ctx.execute_async(world.charge, "a0", 1, transient=bad)  # type: ignore[arg-type]
    assert not world.calls


def test_a_context_given_a_store_url_opens_the_store_and_closes_it(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'calls.db'}"
    world, failures = World(), Counter[str]()

    def flaky(account: str) -> int:
        failures[account] += 1
        if failures[account] == 1:
            raise TimeoutError(account)
        return failures[account]

    for expected in ([1, TimeoutError], [1, 2]):
        outcome: list[Any] = []
        with DurableContext.sync(url, SCOPE) as ctx:
            outcome.append(ctx.execute(world.charge, "a0", 1)["charged"])
            try:
                outcome.append(ctx.execute(flaky, "a1", transient=TimeoutError))
            except TimeoutError:
                outcome.append(TimeoutError)
        assert outcome == expected
        assert ctx.context.store._conn is None  # type: ignore[attr-defined]
    assert world.calls == Counter({"charge:a0": 1})
    fenced = DurableContext.sync(url, SCOPE, epoch=99)
    with pytest.raises(FencedError), fenced:  # a failed entry closes what it opened, too
        pass
    assert fenced.context.store._conn is None  # type: ignore[attr-defined]


async def test_an_exception_that_cannot_be_rebuilt_replays_as_durable_error_naming_it() -> None:
    store, calls = MemoryStore(), Counter[str]()

    def stubborn() -> None:
        calls["stubborn"] += 1
        raise Stubborn(7, "no")

    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(Stubborn):
            await ctx.execute_async(stubborn)
    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(DurableError, match=r"test_calls\.Stubborn: 7: no") as caught:
            await ctx.execute_async(stubborn)
    assert type(caught.value) is DurableError
    assert calls["stubborn"] == 1


async def test_changed_arguments_drop_that_record_and_every_later_one_then_run_afresh() -> None:
    store, world = MemoryStore(), World()
    await attempt(store, world, [10, 20, 30, 40])
    async with DurableContext(store, SCOPE) as ctx:
        assert await ctx.execute_async(world.charge, "a0", 10) == {"account": "a0", "charged": 10}
        assert await ctx.execute_async(functools.partial(world.charge, "a1"), 21) == {
            "account": "a1",
            "charged": 21,
        }
        after_change = await stored_keys(store)
        rest = [await ctx.execute_async(world.charge, f"a{i}", n) for i, n in [(2, 30), (3, 40)]]
    assert rest == [{"account": "a2", "charged": 30}, {"account": "a3", "charged": 40}]
    # call 0 replayed; 1 ran with the new amount; 2 and 3 matched but had been dropped
    assert world.calls == Counter({"charge:a0": 1, "charge:a1": 2, "charge:a2": 2, "charge:a3": 2})
    assert after_change == ["fn:0000000000", "fn:0000000001"], "later records deleted durably"
    assert ctx.statistics().dropped == 3


async def test_the_drop_is_durable_before_the_changed_call_runs() -> None:
    store, world = MemoryStore(), World()
    await attempt(store, world, [10, 20, 30])
    held: list[str] = []

    async def look(account: str, amount: int) -> int:
        held.extend(await stored_keys(store))
        return amount

    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 10)
        assert await ctx.execute_async(look, "a1", 20) == 20
    assert held == ["fn:0000000000"], "records 1 and 2 were gone before the new call ran"


async def test_another_function_at_a_recorded_position_drops_the_rest_and_runs() -> None:
    store, world = MemoryStore(), World()
    await attempt(store, world, [10, 20])
    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 10)
        assert await ctx.execute_async(world.notify, "a1") == "sent to a1"
        await ctx.execute_async(world.charge, "a1", 20)
    assert world.calls == Counter({"charge:a0": 1, "charge:a1": 2, "notify:a1": 1})
    state = await store.load(SCOPE)
    assert state is not None
    assert decode_fn_record(state.records["fn:0000000001"]).function.endswith("World.notify")


async def test_a_pending_call_is_settled_by_the_reconciler_without_running_again() -> None:
    store, world = MemoryStore(), World()
    keys: list[str] = []

    def reconciler(key: str) -> dict[str, Any]:
        keys.append(key)
        return {"account": "a1", "charged": 20, "reconciled": True}

    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 10)
        with pytest.raises(Crash):
            await ctx.execute_async(world.explode, "a1", reconciler=reconciler)
    state = await store.load(SCOPE)
    assert state is not None
    assert decode_fn_record(state.records["fn:0000000001"]).status == "PENDING"
    for _ in range(2):
        async with DurableContext(store, SCOPE) as ctx:
            await ctx.execute_async(world.charge, "a0", 10)
            settled = await ctx.execute_async(world.explode, "a1", reconciler=reconciler)
    assert settled == {"account": "a1", "charged": 20, "reconciled": True}
    assert world.calls == Counter({"charge:a0": 1, "explode:a1": 1})
    key = call_key(SCOPE, 1, function_id(world.explode), args_digest(("a1",), {}))
    assert keys == [key], "asked once; then the record answered"


async def test_a_reconciler_that_finds_nothing_has_the_call_run_again() -> None:
    store, world = MemoryStore(), World()

    async def nothing_there(key: str) -> Any:
        raise LookupError(key)

    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(Crash):
            await ctx.execute_async(world.explode, "a0", reconciler=nothing_there)
    async with DurableContext(store, SCOPE) as ctx:
        result = await ctx.execute_async(world.charge, "a0", 5, reconciler=nothing_there)
    assert result == {"account": "a0", "charged": 5}
    assert world.calls == Counter({"explode:a0": 1, "charge:a0": 1})


async def test_a_pending_call_without_a_reconciler_runs_again() -> None:
    store, world = MemoryStore(), World()
    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(Crash):
            await ctx.execute_async(world.explode, "a0", pending=True)
    state = await store.load(SCOPE)
    assert (
        state is not None and decode_fn_record(state.records["fn:0000000000"]).status == "PENDING"
    )
    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(Crash):
            await ctx.execute_async(world.explode, "a0")
    assert world.calls == Counter({"explode:a0": 2})


async def test_without_pending_a_crash_leaves_no_record() -> None:
    store, world = MemoryStore(), World()
    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 1)
        with pytest.raises(Crash):
            await ctx.execute_async(world.explode, "a1")
    assert await stored_keys(store) == ["fn:0000000000"]


async def test_the_key_is_stable_across_replays_and_distinct_per_call() -> None:
    store, world = MemoryStore(), World()
    await attempt(store, world, [1, 2])
    store2 = MemoryStore()
    await attempt(store2, world, [1, 2])
    charge = function_id(world.charge)
    expected = [call_key(SCOPE, i, charge, args_digest((f"a{i}", i + 1), {})) for i in range(2)]
    assert world.keys == {"a0": [expected[0]] * 2, "a1": [expected[1]] * 2}
    assert expected[0] != expected[1]
    # another call in the place of call 1 (the input changed) gets a key of its own
    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 1)
        await ctx.execute_async(world.charge, "a1", 7)
    assert world.keys["a1"][-1] not in expected
    with pytest.raises(LookupError):
        current_key()


def test_the_sync_flavour_runs_fn_in_the_calling_plain_thread(tmp_path: Path) -> None:
    from asyncsink.stores.sqlite import SQLiteStore

    store, world = SQLiteStore(tmp_path / "calls.db"), World()
    threads: list[int] = []
    outcomes: list[Any] = []

    def work(account: str) -> str:
        threads.append(threading.get_ident())
        return str(world.charge(account, 3)["account"])

    def partition() -> None:
        for _ in range(2):
            with DurableContext.sync(store, SCOPE) as ctx:
                outcomes.append([ctx.execute(work, f"a{i}") for i in range(3)])
                outcomes.append(ctx.execute(world.charge, "a9", 1)["charged"])
                with pytest.raises(TypeError, match="is async: call it with execute_async"):
                    ctx.execute(world.notify, "a9")  # type: ignore[unused-coroutine]
                with pytest.raises(Declined):
                    ctx.execute(world.refuse, "a5")
                ctx.complete()
            outcomes.append((ctx.context.completed, ctx.statistics().replayed))

    worker = threading.Thread(target=partition)
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    assert outcomes == [["a0", "a1", "a2"], 1, (True, 0), ["a0", "a1", "a2"], 1, (True, 5)]
    assert set(threads) == {worker.ident}
    assert world.calls == Counter(
        {"charge:a0": 1, "charge:a1": 1, "charge:a2": 1, "charge:a9": 1, "refuse:a5": 1}
    )
    anyio.run(store.aclose)


async def test_two_contexts_on_one_scope_the_older_is_fenced() -> None:
    store, world = MemoryStore(), World()
    async with DurableContext(store, SCOPE) as old:
        await old.execute_async(world.charge, "a0", 1)
        async with DurableContext(store, SCOPE) as new:
            with pytest.raises(FencedError):
                await old.execute_async(world.charge, "a1", 1, pending=True)
            with pytest.raises(FencedError):
                await old.execute_async(world.charge, "a2", 1)
            assert await new.execute_async(world.charge, "a0", 1) == {"account": "a0", "charged": 1}
            await new.execute_async(world.charge, "a1", 1)
            with pytest.raises(FencedError):
                await old.complete()
    # the older attempt's fenced PENDING write stopped a1 before it ran; a2 ran unrecorded
    assert world.calls == Counter({"charge:a0": 1, "charge:a1": 1, "charge:a2": 1})
    assert (old.epoch, new.epoch) == (1, 2)


async def test_joining_the_epoch_of_a_running_attempt_does_not_fence_it() -> None:
    store, world = MemoryStore(), World()
    owner = await store.take(SCOPE)
    async with DurableContext(store, SCOPE, epoch=owner.epoch) as ctx:
        await ctx.execute_async(world.charge, "a0", 1)
    await store.put(SCOPE, owner.epoch, {"call:0000000000": b"{}"})
    await store.take(SCOPE)
    with pytest.raises(FencedError):
        async with DurableContext(store, SCOPE, epoch=owner.epoch):
            pass


async def test_a_completed_scope_keeps_its_records_and_still_replays() -> None:
    store, world = MemoryStore(), World()
    async with DurableContext(store, SCOPE) as ctx:
        await ctx.execute_async(world.charge, "a0", 1)
        await ctx.complete()
    async with DurableContext(store, SCOPE) as ctx:
        assert ctx.completed
        await ctx.execute_async(world.charge, "a0", 1)
    assert world.calls == Counter({"charge:a0": 1})


async def test_a_corrupt_record_fails_on_entry_naming_scope_and_key() -> None:
    store = MemoryStore()
    epoch = (await store.take(SCOPE)).epoch
    await store.put(SCOPE, epoch, {"fn:0000000002": b'{"v": 1, "call": 2, "fn": 3}'})
    with pytest.raises(CorruptRecordError, match=r"jobs/3/1.*fn:0000000002.*'fn'"):
        async with DurableContext(store, SCOPE):
            pass


async def test_results_that_cannot_be_pickled_and_arguments_that_cannot_be_digested() -> None:
    store = MemoryStore()
    async with DurableContext(store, SCOPE) as ctx:
        with pytest.raises(DurableError, match="result of call 0"):
            await ctx.execute_async(threading.Lock)
        with pytest.raises(TypeError, match="JSON-like or picklable"):
            await ctx.execute_async(len, threading.Lock())
        assert await ctx.execute_async(len, "abc") == 3
    assert await stored_keys(store) == ["fn:0000000001"], "the failed digest used no number"


async def test_cancellation_is_not_recorded_as_an_outcome() -> None:
    store = MemoryStore()
    async with DurableContext(store, SCOPE) as ctx:
        with anyio.move_on_after(0.01):
            await ctx.execute_async(anyio.sleep, 5, pending=True)
    state = await store.load(SCOPE)
    assert state is not None
    assert decode_fn_record(state.records["fn:0000000000"]).status == "PENDING"


def test_argument_digests_agree_across_processes_with_different_hash_seeds() -> None:
    code = (
        "from asyncsink.durable.calls import args_digest;"
        "print(args_digest(({'x', 'y', 'z', 'w'}, b'raw'), {'when': {3, 1, 2}, 'k': 1.5}))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    local = args_digest(({"w", "z", "y", "x"}, b"raw"), {"k": 1.5, "when": {2, 3, 1}})
    assert digests == {local}
    assert args_digest((1,), {}) != args_digest((1.0,), {})
    assert args_digest((b"a",), {}) != args_digest(("a",), {})


_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from asyncsink import Scope
    from asyncsink.durable.calls import DurableContext
    from asyncsink.stores.sqlite import SQLiteStore

    db, journal, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def step(n):
        with open(journal, "a") as out:
            out.write(f"{os.getpid()} {n}\\n")
        if n == crash_at:
            os._exit(3)
        return n * n

    with DurableContext.sync(SQLiteStore(db), Scope("jobs", 3, 1)) as ctx:
        results = [ctx.execute(step, n, pending=True) for n in range(8)]
        ctx.complete()
    print(results)
    """
)


def test_a_second_process_replays_what_a_crashed_one_recorded(tmp_path: Path) -> None:
    db, journal = tmp_path / "calls.db", tmp_path / "journal.txt"

    def run(crash_at: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(db), str(journal), str(crash_at)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    crashed = run(crash_at=5)
    assert crashed.returncode == 3, crashed.stderr
    finished = run(crash_at=-1)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == str([n * n for n in range(8)])
    lines = [line.split() for line in journal.read_text().splitlines()]
    pids = {pid for pid, _ in lines}
    assert len(pids) == 2
    first_pid = lines[0][0]
    by_step = {n: [pid for pid, step in lines if int(step) == n] for n in range(8)}
    assert all(by_step[n] == [first_pid] for n in range(5)), "replayed, not run again"
    assert len(by_step[5]) == 2 and by_step[5][0] == first_pid, "PENDING at the crash re-ran"
    assert all(len(by_step[n]) == 1 and by_step[n][0] != first_pid for n in range(6, 8))
