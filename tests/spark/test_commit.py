"""The driver's completion step, driven without a Spark session: runs of partitions
through ``run_partition`` and ``commit_run``, as the entry points do."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from asyncsink import AsyncSinkWriter, Scope, WriterStatistics
from asyncsink.durable.completion import ScopeDigest, ScopeSummary
from asyncsink.spark.commit import RunIdentity, batch_identity, commit_run
from asyncsink.spark.runner import PartitionResult, run_partition
from asyncsink.spark.spec import SinkSpec
from asyncsink.stores import open_store

SENT: list[bytes] = []


class ListWriter(AsyncSinkWriter[str, bytes]):
    """Appends every entry it is asked to send to ``SENT``."""

    def convert(self, element: str) -> bytes:
        return element.encode()

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        SENT.extend(entries)


def spec(store: str, **options: str) -> SinkSpec:
    return SinkSpec(f"{__name__}:ListWriter", {"sinkId": "jobs", "recordStore": store, **options})


def scopes(store: str) -> list[Any]:
    async def listing() -> list[Any]:
        async with open_store(store) as opened:
            return await opened.scopes("jobs")

    return anyio.run(listing)


def record_bytes(store: str, listed: list[Any]) -> int:
    async def total() -> int:
        async with open_store(store) as opened:
            states = [await opened.load(scope) for scope in listed]
        return sum(len(v) for state in states if state for v in state.records.values())

    return anyio.run(total)


def write(run_spec: SinkSpec, identity: RunIdentity, rows: list[str], *, stream: bool = False):
    result = run_partition(run_spec, rows, identity.run, identity.batch_id)
    return commit_run(run_spec, identity, [result], completed_by="test", stream=stream)


def test_two_hundred_fresh_runs_leave_no_records(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path}/r.db"
    SENT.clear()
    for run in range(200):
        run_spec = spec(store)
        identity = batch_identity(run_spec)
        assert identity.fresh
        stats = write(run_spec, identity, [f"{run}-{i}" for i in range(20)])
        assert stats.delivered == 20
    assert len(SENT) == 4000 and len(set(SENT)) == 4000
    assert scopes(store) == []


def test_two_hundred_named_runs_keep_a_few_bytes_each(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path}/r.db"
    for run in range(200):
        run_spec = spec(store, batchId=str(run))
        write(run_spec, batch_identity(run_spec), [f"{run}-{i}" for i in range(500)])
    listed = scopes(store)
    assert len(listed) == 200
    # each its summary, and (partition 0) how many partitions its batch completed
    assert all(info.completed and info.record_count == 2 for info in listed)
    held = record_bytes(store, [info.scope for info in listed])
    assert held < 200 * 120, f"{held} bytes of records for 200 completed scopes"


def test_stream_retention_keeps_the_newest_batches_of_the_run(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path}/r.db"
    run_spec = spec(store, retainBatches="5")
    for batch in range(20):
        write(run_spec, RunIdentity("query-1", batch), [f"{batch}-a"], stream=True)
    write(run_spec, RunIdentity("query-0", 3), ["other run"], stream=True)
    kept = {(info.scope.run, info.scope.batch_id) for info in scopes(store)}
    assert kept == {("query-1", batch) for batch in range(14, 20)} | {("query-0", 3)}


def test_a_driver_that_dies_before_completing_replays_without_sending(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path}/r.db"
    run_spec = spec(store, batchId="9")
    identity = batch_identity(run_spec)
    rows = [f"row-{i}" for i in range(300)]
    SENT.clear()
    run_partition(run_spec, rows, identity.run, identity.batch_id)  # the driver dies here
    assert len(SENT) == 300 and not scopes(store)[0].completed
    stats = write(run_spec, identity, rows)  # Spark runs the job again
    assert stats.skipped == 300 and len(SENT) == 300
    assert scopes(store)[0].completed
    stats = write(run_spec, identity, rows)  # and again, after COMPLETED
    assert stats.skipped == 300 and len(SENT) == 300


def test_the_skip_warning_names_only_the_scopes_that_skipped(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = f"sqlite:///{tmp_path}/r.db"
    run_spec = spec(store, batchId="4")
    identity = batch_identity(run_spec)
    results = [
        PartitionResult(
            WriterStatistics(written=10, skipped=skipped, delivered=10 - skipped),
            ScopeSummary(Scope("jobs", 4, partition), 10, ScopeDigest().hexdigest()),
        )
        for partition, skipped in enumerate([0, 0, 6, 0])
    ]
    with caplog.at_level(logging.WARNING, logger="asyncsink.spark"):
        commit_run(run_spec, identity, results, completed_by="test")
    (line,) = [r.getMessage() for r in caplog.records if "not sent" in r.getMessage()]
    assert "6 of 40 rows not sent" in line and line.endswith("scopes jobs/4/2)")
