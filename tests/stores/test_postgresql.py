"""PostgreSQLStore against a real PostgreSQL server that the tests start on 127.0.0.1.

Each test gets tables of its own (a fresh ``table`` prefix), so the server is shared by
the whole session.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from asyncsink.errors import DurableError, FencedError
from asyncsink.stores import RecordStore, Scope, check_store_url, open_store
from asyncsink.stores.postgresql import PostgreSQLStore
from tests.core.test_connections import closed_port
from tests.servers.postgres import PostgresServer
from tests.stores.conformance import StoreConformance

pytestmark = pytest.mark.postgres

SHARED = Scope("hammer", 1, 0)


def _table() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def _store(url: str, **options: str) -> PostgreSQLStore:
    store = open_store(f"{url}?table={options.pop('table', _table())}")
    assert isinstance(store, PostgreSQLStore)
    return store


class TestPostgreSQLStore(StoreConformance):
    @pytest.fixture
    async def store(self, postgres_url: str) -> AsyncIterator[RecordStore]:
        async with _store(postgres_url) as store:
            yield store


# -- tables -------------------------------------------------------------------------------


def _admin(server: PostgresServer) -> psycopg.Connection[Any]:
    return psycopg.connect(server.url(), autocommit=True, connect_timeout=10)


@pytest.mark.anyio
async def test_the_tables_and_the_listing_index_are_created_on_first_use(
    postgres_server: PostgresServer,
) -> None:
    table = _table()
    async with _store(postgres_server.url(), table=table) as store:
        await store.verify()
    with _admin(postgres_server) as conn:
        names = {row[0] for row in conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE %s", (f"{table}%",))}  # fmt: skip
    assert names >= {f"{table}_scopes", f"{table}_records", f"{table}_scopes_sink_age"}


@pytest.mark.anyio
async def test_without_create_table_a_missing_table_is_named(postgres_url: str) -> None:
    table = _table()
    store = open_store(f"{postgres_url}?table={table}&create_table=false")
    async with store:
        with pytest.raises(DurableError, match=f"table '{table}_scopes' does not exist"):
            await store.take(SHARED)
    async with _store(postgres_url, table=table) as creator:
        await creator.take(SHARED)
    async with open_store(f"{postgres_url}?table={table}&create_table=false") as existing:
        assert (await existing.take(SHARED)).epoch == 2


@pytest.mark.anyio
async def test_a_table_of_another_shape_is_refused_naming_the_columns(
    postgres_server: PostgresServer,
) -> None:
    table = _table()
    with _admin(postgres_server) as conn:
        conn.execute(f"CREATE TABLE {table}_scopes (sink_id text, epoch integer)")
        conn.execute(f"CREATE TABLE {table}_records (sink_id text)")
    async with _store(postgres_server.url(), table=table) as store:
        with pytest.raises(DurableError, match="does not match the schema") as caught:
            await store.load(SHARED)
    message = str(caught.value)
    assert f"{table}_scopes" in message and "epoch bigint" in message and "run text" in message


@pytest.mark.anyio
async def test_a_schema_qualified_table_lives_in_that_schema(
    postgres_server: PostgresServer,
) -> None:
    with _admin(postgres_server) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS pipelines")
    async with open_store(f"{postgres_server.url()}?table=pipelines.calls") as store:
        assert (await store.take(SHARED)).epoch == 1
        assert repr(store).endswith("table='pipelines.calls')")
    with _admin(postgres_server) as conn:
        row = conn.execute("SELECT count(*) FROM pipelines.calls_scopes").fetchone()
    assert row == (1,)


def test_stores_of_many_processes_creating_the_tables_at_once_all_succeed(
    postgres_url: str, tmp_path: Path
) -> None:
    table = _table()
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0
    processes = [
        context.Process(target=_create_and_take, args=(postgres_url, table, worker, start_at))
        for worker in range(6)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    codes = [process.exitcode for process in processes]
    for process in processes:
        if process.is_alive():  # pragma: no cover - only on a hang
            process.kill()
            process.join()
    assert codes == [0] * 6

    async def listed() -> list[Scope]:
        async with _store(postgres_url, table=table) as store:
            return [info.scope for info in await store.scopes()]

    assert anyio.run(listed) == [Scope("create", 0, worker) for worker in range(6)]


def _create_and_take(url: str, table: str, worker: int, start_at: float) -> None:
    async def run() -> None:
        await anyio.sleep(max(0.0, start_at - time.time()))
        async with _store(url, table=table) as store:
            await store.take(Scope("create", 0, worker))

    anyio.run(run)


# -- connections --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_connection_the_server_dropped_is_replaced_without_an_error(
    postgres_server: PostgresServer,
) -> None:
    async with _store(postgres_server.url()) as store:
        epoch = (await store.take(SHARED)).epoch
        with _admin(postgres_server) as conn:
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'asyncsink' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert ended is not None and ended[0] >= 1
        await store.put(SHARED, epoch, {"after": b"reconnect"})
        assert await store.load_record(SHARED, "after") == b"reconnect"


@pytest.mark.anyio
async def test_concurrent_operations_share_a_bounded_pool(
    postgres_server: PostgresServer,
) -> None:
    def sessions() -> int:
        with _admin(postgres_server) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'asyncsink' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert found is not None
        return int(found[0])

    before = sessions()
    store = PostgreSQLStore(postgres_server.url(), table=_table(), max_connections=2)
    async with store:
        scopes = [Scope("pool", 0, partition) for partition in range(10)]
        async with anyio.create_task_group() as group:
            for scope in scopes:
                group.start_soon(store.take, scope)
        assert sessions() - before <= 2
        assert [info.scope for info in await store.scopes("pool")] == scopes


def test_the_store_serves_one_event_loop_after_another(postgres_url: str) -> None:
    store = _store(postgres_url)

    async def take() -> int:
        return (await store.take(SHARED)).epoch

    assert anyio.run(take) == 1
    assert anyio.run(take) == 2, "a new loop opens connections of its own"
    anyio.run(store.aclose)


def test_a_forked_child_opens_its_own_connections(postgres_url: str) -> None:
    store = _store(postgres_url)

    async def parent_write() -> int:
        epoch = (await store.take(SHARED)).epoch
        await store.put(SHARED, epoch, {"parent": b"1"})
        return epoch

    parent_epoch = anyio.run(parent_write)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:

            async def child_write() -> None:
                state = await store.take(SHARED)
                await store.put(SHARED, state.epoch, {"child": b"2"})

            anyio.run(child_write)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

    async def parent_check() -> None:
        with pytest.raises(FencedError) as caught:
            await store.put(SHARED, parent_epoch, {"late": b"x"})
        assert caught.value.current == parent_epoch + 1
        state = await store.load(SHARED)
        assert state is not None and dict(state.records) == {"parent": b"1", "child": b"2"}
        await store.aclose()

    anyio.run(parent_check)


# -- errors and secrets -------------------------------------------------------------------

PASSWORD = "p/a?s#s@w:o%rd-Zq7pg-\u00e9"


@pytest.fixture(scope="module")
def secret_url(postgres_server: PostgresServer) -> str:
    """A role whose password holds the characters that break naive masking."""
    from urllib.parse import quote

    role = f"secret_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.admin_url(), autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(PASSWORD)
            )
        )
    with psycopg.connect(postgres_server.admin_url("records"), autocommit=True) as conn:
        conn.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
    return (
        f"postgresql://{role}:{quote(PASSWORD, safe='')}@127.0.0.1:{postgres_server.port}/records"
    )


def _no_password(*texts: str) -> None:
    from urllib.parse import quote

    for text in texts:
        for form in (PASSWORD, quote(PASSWORD, safe=""), "Zq7pg"):
            assert form not in text, f"{form!r} shows in: {text}"


def _bad_urls(url: str, port: int) -> dict[str, str]:
    wrong_password = url.replace("Zq7pg", "Zq7pgWRONG")
    return {
        "a refused login": wrong_password,
        "a port nobody listens on": url.replace(f":{port}/", f":{closed_port()}/"),
        "an unknown host": url.replace("127.0.0.1", "no-such-host.invalid"),
        "a missing table": f"{url}?table={_table()}&create_table=false",
    }


@pytest.mark.anyio
async def test_errors_name_the_problem_and_never_the_password(
    secret_url: str, postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    expected = {
        "a refused login": "password authentication failed",
        "a port nobody listens on": "onnection refused",
        "an unknown host": "no-such-host.invalid",
        "a missing table": "does not exist",
    }
    for case, url in _bad_urls(secret_url, postgres_server.port).items():
        store = open_store(url)
        with pytest.raises(DurableError) as caught:
            async with store:
                await store.verify()
        message = str(caught.value)
        assert expected[case] in message, (case, message)
        assert "127.0.0.1" in message or "no-such-host" in message, message
        _no_password(message, repr(store), repr(caught.value))
    async with open_store(secret_url + f"&table={_table()}".replace("&", "?", 1)) as store:
        epoch = (await store.take(SHARED)).epoch
        await store.put(SHARED, epoch, {"k": b"v"})
        listing = repr(await store.scopes()) + repr(await store.load(SHARED))
    _no_password(listing, caplog.text)


def test_check_url_refuses_unknown_parameters_and_bad_options_without_values() -> None:
    from urllib.parse import quote

    base = f"postgresql://u:{quote(PASSWORD, safe='')}@127.0.0.1:5432/db"
    for bad, named in (
        ("nosuch=Zq7pg-value", "nosuch"),
        ("table=1bad", "table"),
        ("table=a.b.c", "table"),
        ("create_table=maybe", "create_table"),
    ):
        with pytest.raises(ValueError, match=named) as caught:
            check_store_url(f"{base}?{bad}")
        _no_password(str(caught.value))
    check_store_url("postgresql://")  # everything from the PG* variables
    check_store_url("postgres://db.internal/pipelines?sslmode=require&connect_timeout=5")
    store = PostgreSQLStore.from_url(f"{base}?table=calls&application_name=etl")
    assert repr(store) == (
        "PostgreSQLStore('postgresql://***@127.0.0.1:5432/db?application_name=***', table='calls')"
    )


def test_the_records_cli_shows_no_password(secret_url: str) -> None:
    from asyncsink.cli.records_command import main

    url = f"{secret_url}?table={_table()}"

    async def write() -> None:
        async with open_store(url) as store:
            epoch = (await store.take(SHARED)).epoch
            await store.put(SHARED, epoch, {"call:0000000001": b"{}"})

    anyio.run(write)
    import contextlib
    import io

    for argv in (["list", url], ["show", url, "hammer", "1", "0"], ["purge", url, "hammer",
                 "--all", "--dry-run"], ["list", url.replace("Zq7pg", "Zq7pgWRONG")]):  # fmt: skip
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit:
                pass
        _no_password(out.getvalue(), err.getvalue())
        assert out.getvalue() or err.getvalue()


# -- processes: fencing and a kill mid-write ---------------------------------------------


def _hammer(url: str, worker: int, rounds: int, start_at: float, out: str) -> None:
    """One OS process: contend for SHARED with the others, and write a scope of its own."""

    async def run() -> dict[str, object]:
        own = Scope("hammer", 2, worker)
        rng = random.Random(worker)
        takes: list[int] = []
        puts: list[tuple[int, int, bool]] = []
        async with open_store(url) as store:
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

    Path(out).write_text(json.dumps(anyio.run(run)))


def _shared_records(worker: int, n: int, epoch: int) -> dict[str, bytes]:
    value = f"{worker}:{n}:{epoch}".encode() * 40
    return {f"w{worker}-{n}-{part}": value for part in "abc"}


def _join_all(processes: list[Any], timeout: float) -> list[int | None]:
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(timeout=max(0.1, deadline - time.monotonic()))
    codes = []
    for process in processes:
        if process.is_alive():  # pragma: no cover - only on a hang
            process.kill()
            process.join()
        codes.append(process.exitcode)
    return codes


def test_three_processes_contending_for_a_scope_keep_fencing_and_lose_no_write(
    postgres_url: str, tmp_path: Path
) -> None:
    url = f"{postgres_url}?table={_table()}"
    workers, rounds = 3, 40
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0
    outs = [tmp_path / f"worker-{w}.json" for w in range(workers)]
    processes = [
        context.Process(target=_hammer, args=(url, w, rounds, start_at, str(outs[w])))
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    assert _join_all(processes, 90) == [0] * workers
    results = [json.loads(out.read_text()) for out in outs]
    takes = sorted(epoch for result in results for epoch in result["takes"])
    assert takes == list(range(1, workers * rounds + 1)), "each take won a distinct epoch"

    async def final() -> tuple[Any, list[Any]]:
        async with open_store(url) as store:
            own = [await store.load(Scope("hammer", 2, w)) for w in range(workers)]
            return await store.load(SHARED), own

    shared, own = anyio.run(final)
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
                assert not set(_shared_records(worker, n, epoch)) & set(records)
    assert records == expected, "every accepted put is whole and nothing else is there"
    assert won > 0 and fenced > 0, (won, fenced)
    for worker, state in enumerate(own):
        assert state.epoch == 1
        assert dict(state.records) == {
            f"own-{n}": f"{worker}:{n}".encode() * 50 for n in range(rounds)
        }


def _writer(url: str, acked: str) -> None:
    """Write puts of 40 records of 4 KiB each, one after the other, appending each one's
    number to ``acked`` once ``put`` returned; runs until it is killed."""

    async def run(out: Any) -> None:
        async with open_store(url) as store:
            epoch = (await store.take(SHARED)).epoch
            out.write(f"epoch {epoch}\n")
            for n in range(100_000):
                await store.put(SHARED, epoch, _batch(n))
                out.write(f"{n}\n")

    with open(acked, "a", buffering=1) as out:
        anyio.run(run, out)


def _batch(n: int) -> dict[str, bytes]:
    return {f"call:{n:06d}:{i:02d}": bytes([n % 251]) * 4096 for i in range(40)}


@pytest.mark.parametrize("after_s", [0.8, 1.3])
def test_a_writer_killed_mid_write_leaves_whole_puts_and_is_fenced(
    postgres_url: str, tmp_path: Path, after_s: float
) -> None:
    url = f"{postgres_url}?table={_table()}"
    acked = tmp_path / "acked.txt"
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_writer, args=(url, str(acked)))
    process.start()
    deadline = time.monotonic() + 60
    while not acked.exists() or acked.read_text().count("\n") < 3:
        assert time.monotonic() < deadline and process.is_alive(), "the writer never wrote"
        time.sleep(0.02)
    time.sleep(after_s * random.uniform(0.8, 1.2))
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL
    lines = acked.read_text().splitlines()
    epoch = int(lines[0].split()[1])
    done = [int(line) for line in lines[1:]]
    assert done == list(range(len(done))) and done, "puts returned in order"

    async def after() -> tuple[Any, int]:
        async with open_store(url) as store:
            with anyio.fail_after(10):  # the killed session's locks are gone
                state = await store.take(SHARED)
            with pytest.raises(FencedError):
                await store.put(SHARED, epoch, {"late": b"x"})
            return state, state.epoch

    state, new_epoch = anyio.run(after)
    assert new_epoch == epoch + 1
    puts = {key.split(":")[1] for key in state.records}
    written = sorted(int(n) for n in puts)
    assert written[: len(done)] == done, "every put that returned is there"
    assert len(written) - len(done) <= 1, "at most the put in flight, which returned no answer"
    for n in written:
        assert {k: v for k, v in state.records.items() if k.split(":")[1] == f"{n:06d}"} == (
            _batch(n)
        ), f"put {n} is whole"


@pytest.mark.anyio
async def test_a_key_value_connection_string_shows_no_password() -> None:
    secret = "kv-Zq7pg-secret"
    port = closed_port()
    store = PostgreSQLStore(f"host=127.0.0.1 port={port} dbname=records user=u password='{secret}'")
    shown = f"'host=127.0.0.1 port={port} dbname=records user=u'"
    assert repr(store) == f"PostgreSQLStore({shown}, table='asyncsink')"
    with pytest.raises(DurableError) as caught:
        async with store:
            await store.verify()
    assert "refused" in str(caught.value) and secret not in str(caught.value)
