"""Chaos: rows through Spark ``foreachBatch`` while everything goes wrong, none lost, none
stored twice.

The endpoint fails 10% of the entries inside accepted requests, throttles 5% of the
requests (429/503 with Retry-After), answers 2% with a 5xx, leaves 1% unanswered (half of
them after applying their entries: the late success a timed-out client misses) and resets
2% of the connections (half after applying). The Python worker of partition 0 is killed
(``os._exit``) mid-partition on its first attempt in every third micro-batch, right after
an answer arrived and before it was recorded. The streaming query is stopped while a
micro-batch runs and started again from its checkpoint. The endpoint honours idempotency
keys and the sink keeps durable call records, so every row must be stored exactly once.

The size comes from ``ASYNCSINK_CHAOS_ROWS`` (20,000 by default); the full run is
``ASYNCSINK_CHAOS_ROWS=1000000 scripts/test -m chaos``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from asyncsink import WriterStatistics
from asyncsink.spark import BatchSink, foreach_batch
from asyncsink.testing import Faults, FaultServer

from .writers import KILL_AFTER, KILL_EVERY, KILL_MARKS

ROWS = int(os.environ.get("ASYNCSINK_CHAOS_ROWS", "20000"))
BATCHES = 10  # one file per micro-batch
STOP_DURING = 5  # the micro-batch the first query is stopped in
EVERY = 3  # workers are killed in batches 1, 4, 7
BATCH_SIZE = 100
TIMEOUT_S = 300 + ROWS // 400

FAULTS = Faults(
    latency_ms=2,
    partial_failure_rate=0.10,
    throttle_rate=0.05,
    retry_after_s=0.05,
    error_rate=0.02,
    timeout_rate=0.005,
    timeout_after_apply_rate=0.005,
    hang_s=5,
    reset_rate=0.01,
    reset_after_apply_rate=0.01,
    seed=2026,
)

pytestmark = [pytest.mark.chaos, pytest.mark.spark]


class Batches:
    """The ``foreachBatch`` function: the asyncsink sink, watched by the test."""

    def __init__(self, sink: BatchSink, stop_during: int | None = None) -> None:
        self.sink = sink
        self.stop_during = stop_during
        self.reached = threading.Event()
        self.finished: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id == self.stop_during:
            self.reached.set()
        self.sink(df, batch_id)  # an interrupted batch raises here, so Spark never commits it
        self.finished.append(batch_id)


def write_files(folder: Path, rows: int) -> tuple[set[str], int]:
    """``BATCHES`` JSON-lines files of equal size; the ids written and the largest size."""
    folder.mkdir()
    ids: set[str] = set()
    per_file, extra = divmod(rows, BATCHES)
    largest = 0
    for f in range(BATCHES):
        count = per_file + (1 if f < extra else 0)
        names = [f"c{f:02d}-{i:07d}" for i in range(count)]
        ids.update(names)
        lines = [f'{{"id": "{name}", "v": {i}, "note": "chaos"}}\n' for i, name in enumerate(names)]
        path = folder / f"part-{f:02d}.json"
        path.write_text("".join(lines))
        largest = max(largest, path.stat().st_size)
    return ids, largest


def start_query(spark: Any, source: Path, checkpoint: Path, batches: Batches) -> Any:
    stream = (
        spark.readStream.schema("id STRING, v LONG, note STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    return (
        stream.writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)


@pytest.mark.timeout(TIMEOUT_S)
def test_streaming_under_chaos_stores_every_row_exactly_once(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected, largest = write_files(tmp_path / "in", ROWS)
    marks = tmp_path / "kills"
    marks.mkdir()
    rows_per_batch = ROWS // BATCHES
    sink_options = {
        "recordStore": f"sqlite:///{tmp_path / 'records.db'}",
        "maxBatchSize": str(BATCH_SIZE),
        "initialBackoffMs": "10",
        "maxBackoffMs": "200",
        "maxRetries": "20",
        "requestTimeoutMs": "1s",
        KILL_EVERY: str(EVERY),
        KILL_AFTER: str(max(2, rows_per_batch // 2 // BATCH_SIZE // 3)),
        KILL_MARKS: str(marks),
    }
    sink_id = f"chaos-{uuid.uuid4().hex[:8]}"
    factory = "tests.chaos.writers:create_chaos_writer"
    conf = spark.conf
    split_conf = "spark.sql.files.maxPartitionBytes"
    saved_split = conf.get(split_conf)
    queries: list[Any] = []
    with FaultServer(FAULTS) as server:
        options = {"url": server.ingest_url, **sink_options}
        # Two partitions per micro-batch: each file is read in two splits.
        conf.set(split_conf, str(largest // 2 + 1))
        started = time.monotonic()
        try:
            first = Batches(foreach_batch(factory, options, sink_id=sink_id), STOP_DURING)
            query = start_query(spark, tmp_path / "in", tmp_path / "checkpoint", first)
            queries.append(query)
            wait_for(
                lambda: first.reached.is_set() or not query.isActive,
                TIMEOUT_S / 2,
                f"micro-batch {STOP_DURING}",
            )
            assert query.isActive, f"the query stopped early: {query.exception()}"
            base = server.stats().requests
            wait_for(lambda: server.stats().requests >= base + 3, 60, "requests of the batch")
            query.stop()
            interrupted = STOP_DURING not in first.finished
            stopped_after = list(first.finished)

            second = Batches(foreach_batch(factory, options, sink_id=sink_id))
            query = start_query(spark, tmp_path / "in", tmp_path / "checkpoint", second)
            queries.append(query)
            query.processAllAvailable()
            query.stop()
        finally:
            for running in queries:
                if running.isActive:
                    running.stop()
            conf.set(split_conf, saved_split)
        elapsed = time.monotonic() - started
        applied = server.applied_ids()
        endpoint = server.stats()

    stored = set(applied)
    lost = len(expected - stored)
    duplicates = len(applied) - len(stored)
    unexpected = len(stored - expected)
    writers = sum(
        [*first.sink.statistics.values(), *second.sink.statistics.values()], WriterStatistics()
    )
    kills = sorted(path.name for path in marks.iterdir())
    statuses = ", ".join(f"{status}: {count:,}" for status, count in endpoint.statuses.items())
    report = f"""
chaos: {ROWS:,} rows through foreachBatch, {BATCHES} micro-batches of 2 partitions, \
{elapsed:.1f} s
  faults: 10% of entries failed, 5% of requests 429/503, 2% 5xx, 1% unanswered \
(half after applying), 2% connections reset (half after applying)
  Python workers killed mid-partition: {len(kills)} ({", ".join(kills)}: batch-partition)
  streaming restart: stopped during batch {STOP_DURING} \
({"mid-batch" if interrupted else "after it finished"}; batches done before: \
{stopped_after}), restarted from the checkpoint: batches {second.finished}
  endpoint: {endpoint.requests:,} requests ({statuses}); {endpoint.entries_rejected:,} \
entries failed inside accepted requests; {endpoint.resets} connections reset; \
{endpoint.timeouts} left unanswered; {endpoint.replays} re-sent requests answered from \
the idempotency store; {endpoint.conflicts} conflicts
  writers (attempts that finished): {writers.summary()}; {writers.resent_calls} calls \
re-sent by a retried task or a replayed batch, {writers.late_responses} late responses
  retries: {writers.retried:,} entries re-sent; {writers.requests_failed:,} requests failed \
whole ({writers.timeouts:,} of them timed out); {writers.throttled:,} answers throttled \
(429/503, whole or per entry)
  lost: {lost}   duplicates: {duplicates}   unexpected: {unexpected}"""
    with capsys.disabled():
        print(report)

    assert lost == 0, f"{lost} rows lost"
    assert duplicates == 0, f"{duplicates} rows stored twice"
    assert unexpected == 0, f"{unexpected} rows the test never wrote"
    assert endpoint.mismatches == 0, "an idempotency key was re-sent with a different body"
    # The chaos did happen.
    assert kills, "no Python worker was killed"
    assert endpoint.replays >= len(kills), "a killed attempt's last request was not re-sent"
    assert endpoint.entries_rejected > 0 and writers.retried > 0
    assert any(status in endpoint.statuses for status in (429, 503))
    assert endpoint.resets + endpoint.timeouts > 0
    assert STOP_DURING not in stopped_after and second.finished, "the query was not restarted"
    assert max(second.finished) == BATCHES - 1
