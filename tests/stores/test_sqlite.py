from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink.errors import DurableError, FencedError
from asyncsink.stores import RecordStore, Scope, ScopeState, sqlite_file
from asyncsink.stores.sqlite import SQLiteStore
from tests.stores.conformance import StoreConformance

SHARED = Scope("hammer", 1, 0)


class TestSQLiteStore(StoreConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[RecordStore]:
        async with SQLiteStore(tmp_path / "records.db") as store:
            yield store


@pytest.mark.anyio
async def test_the_file_uses_wal_and_normal_sync_with_a_busy_timeout(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "records.db", timeout=3.5)
    try:
        await store.take(SHARED)
        conn = store._connection()
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (3500,)
    finally:
        await store.aclose()
    forever = SQLiteStore(tmp_path / "records.db", timeout=1e9)  # would wrap around to 0
    try:
        await forever.take(SHARED)
        conn = forever._connection()
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (2**31 - 1,)
    finally:
        await forever.aclose()
    with sqlite3.connect(tmp_path / "records.db") as other:
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {row[0] for row in other.execute("SELECT name FROM sqlite_master")}
        assert {"scopes", "records"} <= tables
    other.close()


@pytest.mark.anyio
async def test_records_survive_closing_and_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "records.db"
    async with SQLiteStore(path) as first:
        epoch = (await first.take(SHARED)).epoch
        await first.put(SHARED, epoch, {"k": b"v"})
    async with SQLiteStore(path) as second:
        state = await second.take(SHARED)
    assert (state.epoch, dict(state.records)) == (epoch + 1, {"k": b"v"})


@pytest.mark.anyio
async def test_an_unusable_file_raises_durable_error_naming_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path)
    with pytest.raises(DurableError, match=str(tmp_path)) as caught:
        await store.take(SHARED)
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    await store.aclose()


@pytest.mark.anyio
async def test_a_file_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    async with SQLiteStore(path) as store:
        with pytest.raises(DurableError, match="schema version 7"):
            await store.load(SHARED)


@pytest.mark.anyio
async def test_a_small_put_costs_well_under_a_millisecond(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "records.db") as store:
        epoch = (await store.take(SHARED)).epoch
        timings = []
        for i in range(400):
            puts = {f"call-{i}-{j}": os.urandom(120) for j in range(3)}
            start = time.perf_counter()
            await store.put(SHARED, epoch, puts)
            timings.append(time.perf_counter() - start)
    median = statistics.median(timings[50:])
    assert median < 0.0005, f"median put took {median * 1e3:.3f} ms"


def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "records.db")

    async def parent_write() -> int:
        epoch = (await store.take(SHARED)).epoch
        await store.put(SHARED, epoch, {"parent": b"1"})
        return epoch

    parent_epoch = anyio.run(parent_write)
    parent_conn = store._conn
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:

            async def child_write() -> bool:
                state = await store.take(SHARED)
                await store.put(SHARED, state.epoch, {"child": b"2"})
                return store._conn is not parent_conn and store._conn is not None

            code = 0 if anyio.run(child_write) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

    async def parent_check() -> None:
        with pytest.raises(FencedError) as caught:
            await store.put(SHARED, parent_epoch, {"late": b"x"})
        assert caught.value.current == parent_epoch + 1
        state = await store.load(SHARED)
        assert state is not None
        assert dict(state.records) == {"parent": b"1", "child": b"2"}
        await store.aclose()

    anyio.run(parent_check)
    assert store._conn is None


def _hammer(path: str, worker: int, rounds: int, start_at: float, out: str) -> None:
    """One OS process: contend for SHARED with the others, and write a scope of its own."""

    async def run() -> dict[str, object]:
        own = Scope("hammer", 2, worker)
        rng = random.Random(worker)
        takes: list[int] = []
        puts: list[tuple[int, int, bool]] = []
        async with SQLiteStore(path) as store:
            own_epoch = (await store.take(own)).epoch
            await anyio.sleep(max(0.0, start_at - time.time()))
            for n in range(rounds):
                epoch = (await store.take(SHARED)).epoch
                takes.append(epoch)
                await anyio.sleep(rng.uniform(0, 0.002))
                try:
                    await store.put(SHARED, epoch, _shared_records(worker, n, epoch))
                    puts.append((n, epoch, True))
                except FencedError:
                    puts.append((n, epoch, False))
                await store.put(own, own_epoch, {f"own-{n}": f"{worker}:{n}".encode() * 50})
        return {"takes": takes, "puts": puts}

    result = anyio.run(run)
    Path(out).write_text(json.dumps(result))


def _shared_records(worker: int, n: int, epoch: int) -> dict[str, bytes]:
    value = f"{worker}:{n}:{epoch}".encode() * 40
    return {f"w{worker}-{n}-{part}": value for part in "abc"}


def test_three_processes_sharing_one_file_keep_fencing_and_lose_no_write(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "records.db")
    workers, rounds = 3, 60
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0
    outs = [tmp_path / f"worker-{w}.json" for w in range(workers)]
    processes = [
        context.Process(target=_hammer, args=(path, w, rounds, start_at, str(outs[w])))
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=90)
    for process in processes:
        if process.is_alive():  # pragma: no cover - only on a hang
            process.kill()
            process.join()
        exitcode = process.exitcode
        process.close()
        assert exitcode == 0
    results = [json.loads(out.read_text()) for out in outs]

    takes = sorted(epoch for result in results for epoch in result["takes"])
    assert takes == list(range(1, workers * rounds + 1)), "each take won a distinct epoch"

    async def final() -> tuple[ScopeState | None, list[ScopeState | None]]:
        async with SQLiteStore(path) as store:
            return await store.load(SHARED), [
                await store.load(Scope("hammer", 2, w)) for w in range(workers)
            ]

    shared, own = anyio.run(final)
    assert shared is not None
    records = dict(shared.records)
    expected: dict[str, bytes] = {}
    won = fenced = 0
    for worker, result in enumerate(results):
        for n, epoch, ok in result["puts"]:
            if ok:
                won += 1
                expected.update(_shared_records(worker, n, epoch))
            else:
                fenced += 1
                for key in _shared_records(worker, n, epoch):
                    assert key not in records, f"fenced put left {key}"
    assert records == expected, "every accepted put is whole and nothing else is there"
    assert won > 0 and fenced > 0, (won, fenced)
    for worker, state in enumerate(own):
        assert state is not None and state.epoch == 1
        assert dict(state.records) == {
            f"own-{n}": f"{worker}:{n}".encode() * 50 for n in range(rounds)
        }


_VERSION_1 = """
CREATE TABLE scopes (
    sink_id TEXT NOT NULL, batch_id INTEGER NOT NULL, partition_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL, completed INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL,
    PRIMARY KEY (sink_id, batch_id, partition_id)
) WITHOUT ROWID;
CREATE TABLE records (
    sink_id TEXT NOT NULL, batch_id INTEGER NOT NULL, partition_id INTEGER NOT NULL,
    key TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (sink_id, batch_id, partition_id, key)
);
INSERT INTO scopes VALUES ('orders', 3, 0, 2, 0, 1000.0), ('orders', 4, 1, 1, 1, 2000.0);
INSERT INTO records VALUES ('orders', 3, 0, 'call:1', x'0102'), ('orders', 3, 0, 'meta', x'');
PRAGMA user_version = 1;
"""


@pytest.mark.anyio
async def test_a_version_1_file_is_migrated_in_place_with_the_empty_run(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    conn = sqlite3.connect(path)
    conn.executescript(_VERSION_1)
    conn.close()
    async with SQLiteStore(path) as store:
        listed = [(i.scope, i.epoch, i.completed, i.record_count) for i in await store.scopes()]
        assert listed == [
            (Scope("orders", 3, 0), 2, False, 2),
            (Scope("orders", 4, 1), 1, True, 0),
        ]
        assert [info.updated_at for info in await store.scopes()] == [1000.0, 2000.0]
        state = await store.take(Scope("orders", 3, 0))
        assert (state.epoch, dict(state.records)) == (3, {"call:1": b"\x01\x02", "meta": b""})
        assert await store.load(Scope("orders", 3, 0, "run-1")) is None
        await store.take(Scope("orders", 3, 0, "run-1"))
        assert len(await store.scopes("orders")) == 3
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone() == (2,)
        tables = sorted(row[0] for row in check.execute("SELECT name FROM sqlite_master"))
        assert [name for name in tables if not name.startswith("sqlite_")] == [
            "records",
            "scopes",
        ], "the version-1 tables are gone"
        columns = [row[1] for row in check.execute("PRAGMA table_info(scopes)")]
        assert columns[:2] == ["sink_id", "run"]
    check.close()


@pytest.mark.anyio
async def test_a_failed_migration_leaves_the_version_1_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    conn = sqlite3.connect(path)
    conn.executescript(_VERSION_1)
    # A table in the way of the second rename makes the migration fail after the first.
    conn.execute("CREATE TABLE records_v1 (x)")
    conn.commit()
    conn.close()
    async with SQLiteStore(path) as store:
        with pytest.raises(DurableError, match="records_v1"):
            await store.scopes()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone() == (1,)
        assert check.execute("SELECT count(*) FROM scopes").fetchone() == (2,)
        assert check.execute("SELECT count(*) FROM records").fetchone() == (2,)
    check.close()


@pytest.mark.anyio
async def test_seal_drops_prefixes_literally_not_as_patterns(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "records.db") as store:
        epoch = (await store.take(SHARED)).epoch
        await store.put(SHARED, epoch, {"a%b": b"1", "axb": b"2", "a_c": b"3", "abc": b"4"})
        await store.seal(SHARED, {}, drop_prefixes=("a%", "a_"))
        state = await store.load(SHARED)
    assert state is not None and dict(state.records) == {"axb": b"2", "abc": b"4"}


def _open_fresh_files(base: str, worker: int, rounds: int, barrier: Any, out: str) -> None:
    """One OS process: each round, open a store on a new file together with the others."""

    async def run(path: str) -> None:
        async with SQLiteStore(path) as store:
            for partition in range(3):
                scope = Scope("open", worker, partition)
                epoch = (await store.take(scope)).epoch
                await store.put(scope, epoch, {"k": str(worker).encode()})

    failures: list[str] = []
    for round_ in range(rounds):
        barrier.wait(timeout=60)
        try:
            anyio.run(run, str(Path(base) / f"round-{round_}.db"))
        except Exception as exc:
            failures.append(f"round {round_}: {type(exc).__name__}: {exc}")
    Path(out).write_text(json.dumps(failures))


def _spin(seconds: float) -> None:
    """Keep one CPU busy, so the openers are descheduled at awkward moments."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.timeout(90)
def test_processes_opening_a_new_file_at_once_wait_for_each_other(tmp_path: Path) -> None:
    workers, rounds = 8, 20
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers)
    outs = [tmp_path / f"opener-{w}.json" for w in range(workers)]
    spinners = [context.Process(target=_spin, args=(60.0,)) for _ in range(2)]
    openers = [
        context.Process(
            target=_open_fresh_files, args=(str(tmp_path), w, rounds, barrier, str(outs[w]))
        )
        for w in range(workers)
    ]
    for process in spinners + openers:
        process.start()
    try:
        for process in openers:
            process.join(timeout=60)
    finally:
        for process in spinners + openers:
            if process.is_alive():
                process.kill()
            process.join()
    assert [process.exitcode for process in openers] == [0] * workers
    assert [failure for out in outs for failure in json.loads(out.read_text())] == []

    async def count(path: Path) -> int:
        async with SQLiteStore(path) as store:
            return len(await store.scopes("open"))

    assert {anyio.run(count, tmp_path / f"round-{r}.db") for r in range(rounds)} == {workers * 3}


@pytest.mark.anyio
async def test_a_busy_setup_is_retried_until_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_up = sqlite_file._set_up
    calls = 0

    def busy_twice(conn: sqlite3.Connection) -> None:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise sqlite3.OperationalError("database is locked")
        set_up(conn)

    monkeypatch.setattr(sqlite_file, "_set_up", busy_twice)
    async with SQLiteStore(tmp_path / "records.db", timeout=5) as store:
        assert (await store.take(SHARED)).epoch == 1
    assert calls == 3

    def always_busy(conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(sqlite_file, "_set_up", always_busy)
    start = time.monotonic()
    async with SQLiteStore(tmp_path / "other.db", timeout=0.4) as store:
        with pytest.raises(DurableError, match="database is locked"):
            await store.take(SHARED)
    assert 0.2 < time.monotonic() - start < 2.0, "it waited about the store's timeout"


@pytest.mark.anyio
async def test_a_setup_error_other_than_busy_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0

    def broken(conn: sqlite3.Connection) -> None:
        nonlocal calls
        calls += 1
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_file, "_set_up", broken)
    async with SQLiteStore(tmp_path / "records.db", timeout=5) as store:
        with pytest.raises(DurableError, match="disk I/O error"):
            await store.take(SHARED)
    assert calls == 1
