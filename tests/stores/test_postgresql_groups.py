"""Group commit of a PostgreSQL store's puts: first the grouping alone (``PutGroups`` with
a writer that records its groups), then against the test server, with a process killed
while its writers' groups commit."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from asyncsink.errors import DurableError, FencedError
from asyncsink.stores import Scope, open_store
from asyncsink.stores.postgresql import PostgreSQLStore
from asyncsink.stores.postgresql_groups import GroupPut, PutGroups

SCOPES = [Scope("groups", 1, partition) for partition in range(8)]


class Recorder:
    """Writes groups by remembering them, each after ``gate`` opens when one is given."""

    def __init__(self, *, fenced: Sequence[Scope] = (), fails: bool = False) -> None:
        self.groups: list[list[tuple[Scope, dict[str, bytes]]]] = []
        self.fenced = set(fenced)
        self.fails = fails
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def __call__(self, group: Sequence[GroupPut]) -> dict[int, BaseException]:
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fails:
            raise DurableError("the connection broke")
        self.groups.append([(put.scope, put.puts) for put in group])
        return {
            index: FencedError(put.scope, put.epoch, put.epoch + 1)
            for index, put in enumerate(group)
            if put.scope in self.fenced
        }


async def _put(groups: PutGroups, scope: Scope, value: bytes = b"x") -> None:
    await groups.put(scope, 1, {"call:0": value}, [])


@pytest.mark.anyio
async def test_puts_made_while_a_group_commits_share_the_next_one() -> None:
    recorder = Recorder()
    recorder.gate = asyncio.Event()
    groups = PutGroups(recorder)
    first = asyncio.create_task(_put(groups, SCOPES[0]))
    await recorder.started.wait()
    rest = [asyncio.create_task(_put(groups, scope)) for scope in SCOPES[1:]]
    await asyncio.sleep(0)
    recorder.gate.set()
    await asyncio.gather(first, *rest)
    assert [[scope for scope, _ in group] for group in recorder.groups] == [
        SCOPES[:1],
        SCOPES[1:],
    ]


@pytest.mark.anyio
async def test_a_failed_round_trip_fails_every_put_of_its_group() -> None:
    recorder = Recorder(fails=True)
    groups = PutGroups(recorder)
    results = await asyncio.gather(
        *(_put(groups, scope) for scope in SCOPES), return_exceptions=True
    )
    assert all(isinstance(result, DurableError) for result in results), results
    recorder.fails = False
    await _put(groups, SCOPES[0])  # the next group is written as usual
    assert recorder.groups == [[(SCOPES[0], {"call:0": b"x"})]]


@pytest.mark.anyio
async def test_a_fenced_put_fails_alone_and_the_rest_of_its_group_commits() -> None:
    recorder = Recorder(fenced=[SCOPES[2]])
    groups = PutGroups(recorder)
    results = await asyncio.gather(
        *(_put(groups, scope) for scope in SCOPES), return_exceptions=True
    )
    assert isinstance(results[2], FencedError)
    assert results[:2] + results[3:] == [None] * (len(SCOPES) - 1)


@pytest.mark.anyio
async def test_two_puts_of_one_scope_never_share_a_group_and_keep_their_order() -> None:
    recorder = Recorder()
    recorder.gate = asyncio.Event()
    groups = PutGroups(recorder)
    first = asyncio.create_task(_put(groups, SCOPES[7]))
    await recorder.started.wait()
    waiting = [
        asyncio.create_task(_put(groups, scope, value))
        for scope, value in [(SCOPES[0], b"1"), (SCOPES[1], b"1"), (SCOPES[0], b"2")]
    ]
    await asyncio.sleep(0)
    recorder.gate.set()
    await asyncio.gather(first, *waiting)
    assert recorder.groups[1:] == [
        [(SCOPES[0], {"call:0": b"1"}), (SCOPES[1], {"call:0": b"1"})],
        [(SCOPES[0], {"call:0": b"2"})],
    ]


@pytest.mark.anyio
async def test_a_writer_cancelled_before_its_group_starts_writes_nothing() -> None:
    recorder = Recorder()
    recorder.gate = asyncio.Event()
    groups = PutGroups(recorder)
    first = asyncio.create_task(_put(groups, SCOPES[0]))
    await recorder.started.wait()
    gone = asyncio.create_task(_put(groups, SCOPES[1]))
    kept = asyncio.create_task(_put(groups, SCOPES[2]))
    await asyncio.sleep(0)
    gone.cancel()
    recorder.gate.set()
    await asyncio.gather(first, kept)
    assert gone.cancelled()
    assert [scope for group in recorder.groups for scope, _ in group] == [SCOPES[0], SCOPES[2]]


@pytest.mark.anyio
async def test_a_writer_cancelled_mid_commit_leaves_its_group_to_finish() -> None:
    recorder = Recorder()
    recorder.gate = asyncio.Event()
    groups = PutGroups(recorder)
    tasks = [asyncio.create_task(_put(groups, scope)) for scope in SCOPES[:3]]
    await recorder.started.wait()
    tasks[1].cancel()
    await asyncio.sleep(0)
    recorder.gate.set()
    await asyncio.gather(tasks[0], tasks[2])
    assert tasks[1].cancelled()
    assert [scope for scope, _ in recorder.groups[0]] == SCOPES[:3], "written whole"


# -- against the server -------------------------------------------------------------------


def _store(url: str) -> PostgreSQLStore:
    store = open_store(f"{url}?table=g_{uuid.uuid4().hex[:12]}")
    assert isinstance(store, PostgreSQLStore)
    return store


@pytest.mark.postgres
@pytest.mark.anyio
async def test_writers_of_one_process_commit_together_and_a_fenced_one_alone(
    postgres_url: str,
) -> None:
    async with _store(postgres_url) as store:
        epochs = [(await store.take(scope)).epoch for scope in SCOPES]
        await store.take(SCOPES[3])  # another attempt took this one over
        statements = 0
        write = store._write_group  # counted where the store's groups call it

        async def counted(group: Sequence[GroupPut]) -> dict[int, BaseException]:
            nonlocal statements
            statements += 1
            return await write(group)

        store._groups = type(store._groups)(counted)
        results = await asyncio.gather(
            *(
                store.put(scope, epoch, {f"call:{n}": bytes([n]) * 3000 for n in range(3)})
                for scope, epoch in zip(SCOPES, epochs, strict=True)
            ),
            return_exceptions=True,
        )
        assert isinstance(results[3], FencedError) and results[3].current == epochs[3] + 1
        assert results[:3] + results[4:] == [None] * (len(SCOPES) - 1)
        assert statements < len(SCOPES)
        for index, scope in enumerate(SCOPES):
            state = await store.load(scope)
            assert state is not None
            expected = {} if index == 3 else {f"call:{n}": bytes([n]) * 3000 for n in range(3)}
            assert dict(state.records) == expected


@pytest.mark.postgres
@pytest.mark.anyio
async def test_a_group_whose_statement_fails_fails_every_writer_in_it(postgres_url: str) -> None:
    async with _store(postgres_url) as store:
        epochs = [(await store.take(scope)).epoch for scope in SCOPES]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP TABLE {store.table}_records")
        results = await asyncio.gather(
            *(
                store.put(scope, epoch, {"call:0": b"x"})
                for scope, epoch in zip(SCOPES, epochs, strict=True)
            ),
            return_exceptions=True,
        )
        assert all(isinstance(result, DurableError) for result in results), results
        assert all("records" in str(result) for result in results)


def _writers(url: str, acked: str, count: int) -> None:
    """``count`` writers in one event loop, each putting 10 records of 2 KiB to its own
    scope, one put after the other, appending ``scope n`` to ``acked`` once a put
    returned; runs until it is killed."""

    async def one(store: Any, scope: Scope, out: Any) -> None:
        epoch = (await store.take(scope)).epoch
        for n in range(100_000):
            await store.put(scope, epoch, _batch(scope, n))
            out.write(f"{scope.partition_id} {n}\n")

    async def run(out: Any) -> None:
        async with open_store(url) as store, anyio.create_task_group() as group:
            for partition in range(count):
                group.start_soon(one, store, Scope("killed", 1, partition), out)

    with open(acked, "a", buffering=1) as out:
        anyio.run(run, out)


def _batch(scope: Scope, n: int) -> dict[str, bytes]:
    return {f"call:{n:06d}:{i}": bytes([(n + scope.partition_id) % 251]) * 2048 for i in range(10)}


@pytest.mark.postgres
def test_a_process_killed_while_its_writers_commit_leaves_every_put_whole(
    postgres_url: str, tmp_path: Path
) -> None:
    writers = 6
    url = f"{postgres_url}?table=g_{uuid.uuid4().hex[:12]}"
    acked = tmp_path / "acked.txt"
    process = multiprocessing.get_context("spawn").Process(
        target=_writers, args=(url, str(acked), writers)
    )
    process.start()
    deadline = time.monotonic() + 60
    while not acked.exists() or acked.read_text().count("\n") < 5 * writers:
        assert time.monotonic() < deadline and process.is_alive(), "the writers never wrote"
        time.sleep(0.02)
    time.sleep(random.uniform(0.2, 0.6))
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL
    done: dict[int, list[int]] = {}
    for line in acked.read_text().splitlines():
        partition, n = map(int, line.split())
        done.setdefault(partition, []).append(n)

    async def states() -> list[Any]:
        async with open_store(url) as store:
            with anyio.fail_after(10):  # the killed sessions' locks are gone
                return [await store.load(Scope("killed", 1, p)) for p in range(writers)]

    for partition, state in enumerate(anyio.run(states)):
        scope = Scope("killed", 1, partition)
        mine = done.get(partition, [])
        assert mine == list(range(len(mine))), "puts returned in order"
        written = sorted({int(key.split(":")[1]) for key in state.records})
        assert written[: len(mine)] == mine, "every put that returned is there"
        assert len(written) - len(mine) <= 1, "at most the put in flight, which had no answer"
        for n in written:
            whole = {k: v for k, v in state.records.items() if k.split(":")[1] == f"{n:06d}"}
            assert whole == _batch(scope, n), f"{scope}: put {n} is whole"
