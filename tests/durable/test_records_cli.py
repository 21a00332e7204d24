"""``asyncsink records`` lists, shows and purges scopes; ``purge_scopes`` keeps a window."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from asyncsink import Scope
from asyncsink.cli.records_command import main, parse_duration
from asyncsink.durable.calls import DurableContext
from asyncsink.durable.completion import ScopeSummary, complete_scopes
from asyncsink.durable.retention import purge_scopes
from asyncsink.errors import DurableError
from asyncsink.stores.dynamodb import DynamoDBStore
from asyncsink.stores.memory import MemoryStore
from asyncsink.stores.sqlite import SQLiteStore

from .harness import Crash, Destination, run_attempt

ENTRIES = [f"e{i}" for i in range(40)]
DAY = 86400.0


def populate(path: Path) -> str:
    """orders/1/0 completed; orders/2/0 crashed mid-way with durable calls beside it;
    orders/2/1 holds corrupt records; refunds/1/0 completed."""

    async def fill() -> None:
        async with SQLiteStore(path) as store:
            await run_attempt(store, Destination(), ENTRIES, scope=Scope("orders", 1, 0))
            crashing = Destination()
            crashing.crash_after_apply_on = 3
            with pytest.raises((Crash, BaseExceptionGroup)):
                await run_attempt(
                    store, crashing, ENTRIES, scope=Scope("orders", 2, 0), max_in_flight_requests=1
                )
            async with DurableContext(store, Scope("orders", 2, 0)) as ctx:
                await ctx.execute_async(len, "abcd")
                with pytest.raises(ValueError):
                    await ctx.execute_async(int, "not a number")
            broken = Scope("orders", 2, 1)
            epoch = (await store.take(broken)).epoch
            await store.put(
                broken, epoch, {"call:0000000004": b"{oops", "fn:0000000000": b'{"v": 9}'}
            )
            await run_attempt(store, Destination(), ENTRIES[:5], scope=Scope("refunds", 1, 0))

    anyio.run(fill)
    return f"sqlite://{path}"  # path is absolute: sqlite:///tmp/...


@pytest.fixture
def url(tmp_path: Path) -> str:
    return populate(tmp_path / "records.db")


def age(path: Path, scope: Scope, seconds: float) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE scopes SET updated_at = ?"
            " WHERE sink_id = ? AND batch_id = ? AND partition_id = ?",
            (time.time() - seconds, scope.sink_id, scope.batch_id, scope.partition_id),
        )
    conn.close()


def scopes_in(url: str) -> list[str]:
    async def read() -> list[str]:
        async with SQLiteStore(url.removeprefix("sqlite://")) as store:
            return [str(info.scope) for info in await store.scopes()]

    return anyio.run(read)


def lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_list_tabulates_every_scope_and_filters_by_sink(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", url]) == 0
    rows = lines(capsys.readouterr().out)
    assert rows[0] == ["scope", "run", "epoch", "completed", "records", "updated", "(UTC)"]
    body = {row[0]: row[1:5] for row in rows[1:]}
    assert body == {
        "orders/1/0": ["-", "2", "yes", "1"],  # completed: the summary stays
        "orders/2/0": ["-", "2", "no", "6"],  # 3 requests, meta, 2 durable calls
        "orders/2/1": ["-", "1", "no", "2"],
        "refunds/1/0": ["-", "2", "yes", "1"],
    }
    assert all(len(row) == 7 and row[5].startswith("20") for row in rows[1:]), "a date"
    assert main(["list", url, "--sink", "refunds"]) == 0
    assert [row[0] for row in lines(capsys.readouterr().out)[1:]] == ["refunds/1/0"]
    assert main(["list", url, "--sink", "nobody"]) == 0
    assert capsys.readouterr().out.strip() == "no scopes of sink 'nobody'"


def test_show_decodes_requests_and_durable_calls(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", url, "orders", "2", "0"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("scope orders/2/0: epoch 2, not completed")
    rows = lines(out)
    requests = rows[rows.index(["sink", "requests:"]) + 2 : rows.index(["durable", "calls:"])]
    # max batch 10, one in flight: calls 0 and 1 answered, call 2 applied but never answered
    assert requests == [
        ["0", "SUCCEEDED", "0-9", "10", "10", "0"],
        ["1", "SUCCEEDED", "10-19", "10", "10", "0"],
        ["2", "PENDING", "20-29", "10", "0", "0"],
    ]
    calls = rows[rows.index(["durable", "calls:"]) + 2 : rows.index(["other", "records:"])]
    assert calls[0] == ["0", "SUCCEEDED", "builtins.len"]
    assert calls[1][:4] == ["1", "FAILED", "builtins.int", "builtins.ValueError:"]
    assert rows[-1] == ["meta", '{"next_call":3}']


def add_runs(url: str) -> None:
    """orders/q-1/1/0 holds two records; orders/q-2/3/0 was sealed by a driver."""

    async def fill() -> None:
        async with SQLiteStore(url.removeprefix("sqlite://")) as store:
            running = Scope("orders", 1, 0, "q-1")
            epoch = (await store.take(running)).epoch
            await store.put(running, epoch, {"fn:0000000000": b"{}", "other": b"1"})
            sealed = ScopeSummary(Scope("orders", 3, 0, "q-2"), 5, "ab" * 16)
            await complete_scopes(
                store, [sealed], completed_by="batch 3 commit", whole_batches=True
            )

    anyio.run(fill)


def test_scopes_of_runs_are_listed_shown_and_purged_by_run(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add_runs(url)
    assert main(["list", url, "--sink", "orders"]) == 0
    rows = lines(capsys.readouterr().out)[1:]
    assert [row[:5] for row in rows] == [
        ["orders/1/0", "-", "2", "yes", "1"],
        ["orders/1/0", "q-1", "1", "no", "2"],
        ["orders/2/0", "-", "2", "no", "6"],
        ["orders/2/1", "-", "1", "no", "2"],
        ["orders/3/0", "q-2", "1", "yes", "2"],
    ]
    assert main(["list", url, "--run", "q-1"]) == 0
    assert [row[:2] for row in lines(capsys.readouterr().out)[1:]] == [["orders/1/0", "q-1"]]
    assert main(["list", url, "--run", "-"]) == 0
    assert len(lines(capsys.readouterr().out)) == 1 + 4, "'-' picks the scopes without a run"
    assert main(["list", url, "--sink", "orders", "--run", "q-9"]) == 0
    assert capsys.readouterr().out.strip() == "no scopes of sink 'orders', run 'q-9'"
    assert main(["list", url, "--run", "a/b"]) == 2
    assert "run must be at most 64 letters" in capsys.readouterr().err

    assert main(["show", url, "orders", "3", "0", "--run", "q-2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("scope orders/q-2/3/0: epoch 1, COMPLETED, 2 records")
    assert f"summary: 5 entries, digest {'ab' * 16}, completed by batch 3 commit" in out
    assert "batch: completed with 1 partition\n" in out
    assert main(["show", url, "orders", "3", "0"]) == 1
    err = capsys.readouterr().err
    assert "no scope orders/3/0" in err
    assert err.strip().endswith("batch 3, partition 0 is held with --run q-2")  # the hint
    assert main(["show", url, "orders", "1", "0", "--run", "q-9"]) == 1
    assert capsys.readouterr().err.strip().endswith("held with --run - or q-1")
    assert main(["show", url, "orders", "7", "0"]) == 1
    assert "held" not in capsys.readouterr().err  # nothing of that batch: no hint

    assert main(["purge", url, "orders", "--all", "--run", "q-1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "q-1" in out and "q-2" not in out
    assert out.strip().endswith("would purge 1 scopes of sink 'orders', run 'q-1' (dry run)")
    assert main(["purge", url, "orders", "--before-batch", "2", "--run", "-"]) == 0
    assert capsys.readouterr().out.strip() == "purged 1 scopes of sink 'orders', no run"
    assert main(["purge", url, "orders", "--all", "--run", "q-1"]) == 0
    assert capsys.readouterr().out.strip() == "purged 1 scopes of sink 'orders', run 'q-1'"
    assert scopes_in(url) == ["orders/2/0", "orders/2/1", "orders/q-2/3/0", "refunds/1/0"]


def test_show_prints_why_a_record_cannot_be_decoded(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", url, "orders", "2", "1"]) == 0
    out = capsys.readouterr().out
    corrupt = [line.split(None, 2) for line in out.splitlines() if "CORRUPT" in line]
    assert [(number, status) for number, status, _ in corrupt] == [
        ("4", "CORRUPT"),
        ("0", "CORRUPT"),
    ]
    assert "cannot be decoded: not JSON" in corrupt[0][2]
    assert "cannot be decoded: unknown format version 9" in corrupt[1][2]


def test_show_of_a_completed_scope_shows_only_its_summary(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", url, "orders", "1", "0"]) == 0
    out = capsys.readouterr().out
    assert "epoch 2, COMPLETED, 1 records" in out
    assert "summary: 40 entries, digest " in out and "sink requests:" not in out


def test_show_of_an_unknown_scope_fails_with_exit_code_1(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", url, "orders", "9", "0"]) == 1
    assert "no scope orders/9/0" in capsys.readouterr().err
    assert main(["show", url, "a/b", "1", "0"]) == 2
    assert "sink_id must be non-empty and free of '/'" in capsys.readouterr().err


def test_purge_before_batch_deletes_only_older_batches_of_that_sink(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["purge", url, "orders", "--before-batch", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "orders/1/0" in out and "orders/2/0" not in out
    assert out.strip().endswith("would purge 1 scopes of sink 'orders' (dry run)")
    assert len(scopes_in(url)) == 4, "a dry run deletes nothing"
    assert main(["purge", url, "orders", "--before-batch", "2"]) == 0
    assert capsys.readouterr().out.strip() == "purged 1 scopes of sink 'orders'"
    assert scopes_in(url) == ["orders/2/0", "orders/2/1", "refunds/1/0"]


def test_purge_older_than_goes_by_last_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "records.db"
    url = populate(path)
    age(path, Scope("orders", 2, 0), 8 * DAY)
    age(path, Scope("refunds", 1, 0), 30 * DAY)
    assert main(["purge", url, "orders", "--older-than", "7d", "--dry-run"]) == 0
    assert "would purge 1 scopes" in capsys.readouterr().out
    assert main(["purge", url, "orders", "--older-than", "9d"]) == 0
    assert capsys.readouterr().out.strip() == "purged 0 scopes of sink 'orders'"
    assert main(["purge", url, "orders", "--older-than", "7d"]) == 0
    assert capsys.readouterr().out.strip() == "purged 1 scopes of sink 'orders'"
    assert scopes_in(url) == ["orders/1/0", "orders/2/1", "refunds/1/0"]


def test_purge_all_empties_one_sink(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["purge", url, "orders", "--all"]) == 0
    assert capsys.readouterr().out.strip() == "purged 3 scopes of sink 'orders'"
    assert scopes_in(url) == ["refunds/1/0"]


def test_purge_needs_exactly_one_selection(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["purge", url, "orders"]) == 2
    assert "one of the arguments --before-batch --older-than --all is required" in (
        capsys.readouterr().err
    )
    assert main(["purge", url, "orders", "--all", "--before-batch", "3"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["purge", url, "orders", "--older-than", "7 days"]) == 2
    assert "'7 days' is not a duration like" in capsys.readouterr().err
    assert len(scopes_in(url)) == 4


@pytest.mark.parametrize(
    "bad",
    ["records.db", "mysql://db/records", "sqlite://", "sqlite:///x.db?timeout=soon"],
)
def test_a_bad_store_url_exits_2_with_a_clear_message(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncsink records: error: cannot open the store: ")
    assert bad.split("?")[0] in err or "no scheme" in err


def test_a_missing_sqlite_file_is_an_error_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope" / "records.db"
    assert main(["list", f"sqlite://{missing}"]) == 2
    assert f"no SQLite file at '{missing}'" in capsys.readouterr().err
    assert not missing.parent.exists()


def test_without_a_store_url_the_default_store_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    default = tmp_path / "state" / "asyncsink" / "records.db"
    assert main(["list"]) == 2
    assert f"no SQLite file at '{default}'" in capsys.readouterr().err
    populate(default)
    assert main(["list", "--sink", "refunds"]) == 0
    assert [row[0] for row in lines(capsys.readouterr().out)[1:]] == ["refunds/1/0"]
    assert main(["show", "orders", "2", "1"]) == 0
    assert "scope orders/2/1: epoch 1" in capsys.readouterr().out
    assert main(["purge", "orders", "--before-batch", "2"]) == 0
    assert capsys.readouterr().out.strip() == "purged 1 scopes of sink 'orders'"


def test_a_default_store_others_can_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "state" / "asyncsink").mkdir(parents=True)
    (tmp_path / "state" / "asyncsink").chmod(0o777)
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncsink records: error: cannot open the default store: ")
    assert "can be written by other users" in err and "recordStore=" in err


def test_help_is_offered_for_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert all(name in top for name in ("list", "show", "purge"))
    for command, phrase in [("list", "--sink"), ("show", "PARTITION"), ("purge", "--dry-run")]:
        assert main([command, "--help"]) == 0
        assert phrase in capsys.readouterr().out
    assert main([]) == 2


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("1.5H", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["7", "d", "-1d", "3y", "1d2h", ""])
def test_durations_without_a_known_unit_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


@pytest.mark.anyio
async def test_purge_scopes_keeps_the_newest_batches_seen_for_the_sink() -> None:
    store = MemoryStore()
    for batch in range(10):
        for partition in range(2):
            await store.take(Scope("orders", batch, partition))
    await store.take(Scope("other", 0, 0))
    assert await purge_scopes(store, "orders", keep_batches=3) == 14
    left = [str(info.scope) for info in await store.scopes()]
    assert left == [
        "orders/7/0",
        "orders/7/1",
        "orders/8/0",
        "orders/8/1",
        "orders/9/0",
        "orders/9/1",
        "other/0/0",
    ]
    assert await purge_scopes(store, "orders", keep_batches=3) == 0
    assert await purge_scopes(store, "orders", keep_batches=50) == 0
    assert await purge_scopes(store, "nobody", keep_batches=1) == 0
    assert await purge_scopes(store, "orders", keep_batches=1) == 4


@pytest.mark.anyio
async def test_purge_scopes_by_age_and_by_both_bounds(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    async with SQLiteStore(path) as store:
        for batch in range(4):
            await store.take(Scope("orders", batch, 0))
    age(path, Scope("orders", 0, 0), 3 * DAY)
    age(path, Scope("orders", 3, 0), 3 * DAY)  # old, but the newest batch
    async with SQLiteStore(path) as store:
        assert await purge_scopes(store, "orders", keep_batches=2, older_than_s=DAY) == 1
        assert [info.scope.batch_id for info in await store.scopes("orders")] == [1, 2, 3]
        assert await purge_scopes(store, "orders", older_than_s=DAY) == 1
        assert [info.scope.batch_id for info in await store.scopes("orders")] == [1, 2]
        for wrong in [{}, {"keep_batches": 0}, {"older_than_s": -1.0}]:
            with pytest.raises(ValueError):
                await purge_scopes(store, "orders", **wrong)  # type: ignore[arg-type]
        assert len(await store.scopes("orders")) == 2


def test_another_programs_sqlite_file_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE orders (x)")
        conn.commit()
    for command in (["list"], ["show"], ["purge"]):
        args = [
            command[0],
            f"sqlite://{path}",
            *(["orders", "1", "0"] if command == ["show"] else []),
        ]
        if command == ["purge"]:
            args += ["orders", "--all", "--dry-run"]
        assert main(args) == 2
        assert "another program's SQLite database" in capsys.readouterr().err
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert [name for (name,) in conn.execute("SELECT name FROM sqlite_master")] == ["orders"]


def test_a_reader_that_goes_away_ends_a_long_listing_quietly(tmp_path: Path) -> None:
    async def fill() -> None:
        async with SQLiteStore(tmp_path / "r.db") as store:
            scope = Scope("many", 1, 0)
            epoch = (await store.take(scope)).epoch
            await store.put(scope, epoch, {f"call:{i:010d}": b"{oops" for i in range(5000)})

    anyio.run(fill)
    command = [sys.executable, "-m", "asyncsink", "records", "show"]
    with subprocess.Popen(
        [*command, f"sqlite://{tmp_path / 'r.db'}", "many", "1", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as shown:
        assert shown.stdout is not None and shown.stderr is not None
        assert shown.stdout.readline().startswith(b"scope many/1/0")
        shown.stdout.close()  # as `| head -1` does
        errors = shown.stderr.read()
        assert shown.wait(timeout=60) == 0
    assert b"Traceback" not in errors and b"BrokenPipe" not in errors


@pytest.mark.emulator
def test_the_commands_name_a_dynamodb_store_without_secrets_and_create_no_table(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    token = "tok3n-value"
    base = f"region=us-east-1&endpoint_url={moto_endpoint}/?token={token}"
    table = f"cli-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        async with DynamoDBStore(table, "us-east-1", moto_endpoint) as store:
            await store.scopes()

    anyio.run(create)
    assert main(["show", f"dynamodb://{table}?{base}", "nosuch", "0", "0"]) == 1
    err = capsys.readouterr().err
    assert "no scope nosuch/0/0 in dynamodb://" in err and token not in err
    typo = f"{table}-typo"
    assert main(["list", f"dynamodb://{typo}?{base}"]) == 1
    err = capsys.readouterr().err
    assert "ResourceNotFoundException" in err and token not in err

    async def tables() -> list[str]:
        async with DynamoDBStore(typo, "us-east-1", moto_endpoint, create_table=False) as store:
            with pytest.raises(DurableError, match="ResourceNotFoundException"):
                await store.scopes()
        return []

    anyio.run(tables)  # the typo made no table
