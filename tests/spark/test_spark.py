"""Spark local mode end to end: every row reaches the fault server exactly once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from asyncsink import OptionError, WriterStatistics
from asyncsink.spark import foreach_batch, foreach_partition
from asyncsink.testing import Faults, FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def rows(spark: Any, n: int, partitions: int = 2) -> Any:
    return spark.range(0, n, 1, partitions).selectExpr("concat('r', id) AS id", "id * 2 AS v")


def http_options(server: FaultServer, store: str, **extra: Any) -> dict[str, str]:
    options = {
        "url": server.ingest_url,
        "maxBatchSize": "50",
        "recordStore": store,
        "initialBackoffMs": "5",
        "maxBackoffMs": "50",
        "requestTimeoutMs": "2s",
    }
    options.update({k: str(v) for k, v in extra.items()})
    return options


def assert_exactly_once(server: FaultServer, n: int) -> None:
    ids = server.applied_ids()
    assert len(set(ids)) == n, f"{n - len(set(ids))} rows lost"
    assert len(ids) == n, f"{len(ids) - n} duplicates"


def test_foreach_batch_delivers_every_row_once(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    server.set_faults(
        Faults(
            latency_ms=2,
            throttle_rate=0.1,
            error_rate=0.05,
            partial_failure_rate=0.05,
            retry_after_s=0.01,
            seed=3,
        )
    )
    store = f"sqlite:///{tmp_path}/records.db"
    seen: dict[int, WriterStatistics] = {}
    sink = foreach_batch(
        "http",
        http_options(server, store),
        sink_id="fb",
        on_batch=lambda b, s: seen.__setitem__(b, s),
    )
    sink(rows(spark, 3000), 7)
    assert_exactly_once(server, 3000)
    assert seen[7].delivered == 3000 and seen[7].retried > 0
    # the same batch again (a replay after a driver restart) sends nothing
    server.reset()
    sink(rows(spark, 3000), 7)
    assert server.stats().entries_received == 0
    assert sink.statistics[7].skipped == 3000


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_retried_task_sends_only_what_was_not_acknowledged(
    spark: Any, server: FaultServer, tmp_path: Any, mode: str
) -> None:
    store = f"sqlite:///{tmp_path}/records.db"
    options = http_options(server, store, killAfterRequests=6, killMode=mode)
    stats = foreach_partition(
        rows(spark, 2000),
        "tests.spark.writers:create_killing_writer",
        options,
        sink_id=f"kill-{mode}",
        batch_id=1,
    )
    assert_exactly_once(server, 2000)
    assert stats.skipped > 0  # the retry skipped what the dead attempt delivered
    if mode == "raise":  # an orderly failure saves every terminal record it knows
        assert stats.skipped >= 5 * 50
    assert server.stats().replays <= 50


def test_batch_data_source_write(spark: Any, server: FaultServer, tmp_path: Any) -> None:
    (
        rows(spark, 1500)
        .write.format("asyncsink-http")
        .options(**http_options(server, f"sqlite:///{tmp_path}/r.db"))
        .option("sinkId", "ds")
        .option("batchId", "3")
        .mode("append")
        .save()
    )
    assert_exactly_once(server, 1500)


def file_stream(spark: Any, folder: Any, files: int, per_file: int) -> Any:
    folder.mkdir()
    for f in range(files):
        lines = "\n".join(f'{{"id": "f{f}-{i}", "v": {i}}}' for i in range(per_file))
        (folder / f"part-{f}.json").write_text(lines)
    return (
        spark.readStream.schema("id STRING, v LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
    )


def test_streaming_data_source_write(spark: Any, server: FaultServer, tmp_path: Any) -> None:
    source = file_stream(spark, tmp_path / "in", files=3, per_file=400)
    query = (
        source.writeStream.format("asyncsink-http")
        .options(**http_options(server, f"sqlite:///{tmp_path}/s.db"))
        .option("sinkId", f"stream-{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert_exactly_once(server, 1200)


def test_stream_failed_mid_batch_and_restarted_resends_nothing_that_landed(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    source = file_stream(spark, tmp_path / "in", files=2, per_file=600)
    checkpoint = str(tmp_path / "checkpoint")
    options = http_options(server, f"sqlite:///{tmp_path}/r.db", maxBatchSize=20)
    doomed = foreach_batch(
        "tests.spark.writers:create_killing_writer",
        {**options, "killAfterRequests": "5", "killMode": "raise-always"},
        sink_id="restart",
    )
    first = source.writeStream.foreachBatch(doomed).option("checkpointLocation", checkpoint).start()
    with pytest.raises(Exception, match="injected task failure"):
        first.awaitTermination(300)
    landed = len(server.applied_ids())
    assert 0 < landed < 1200  # the batch failed part way
    healthy = foreach_batch("http", options, sink_id="restart")
    second = (
        source.writeStream.foreachBatch(healthy).option("checkpointLocation", checkpoint).start()
    )
    try:
        second.processAllAvailable()
    finally:
        second.stop()
    assert_exactly_once(server, 1200)
    replayed = min(healthy.statistics)
    assert healthy.statistics[replayed].skipped >= 5 * 20


def test_bad_option_fails_on_the_driver_with_its_name(server: FaultServer) -> None:
    with pytest.raises(OptionError, match="maxBatchSise"):
        foreach_batch("http", {"url": server.ingest_url, "maxBatchSise": "5"})
    with pytest.raises(OptionError, match="maxBatchSize"):
        foreach_batch("http", {"url": server.ingest_url, "maxBatchSize": "none"})


@pytest.mark.parametrize(
    ("store", "rule"),
    [
        ("mysql://x", "unknown store scheme"),
        ("sqlite://", "without a file path"),
        ("/tmp/x.db", "has no scheme"),
        ("sqlite:///x.db?timeout=abc", "timeout"),
    ],
)
def test_a_bad_record_store_fails_on_the_driver(server: FaultServer, store: str, rule: str) -> None:
    with pytest.raises(OptionError, match="recordStore") as caught:
        foreach_batch("http", {"url": server.ingest_url, "recordStore": store}, sink_id="s")
    assert rule in str(caught.value)
