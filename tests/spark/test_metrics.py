"""OpenTelemetry metrics of Spark writes, read back as a user's backend would see them:
committed figures equal the statistics Spark brought back and the endpoint's count, one
request-duration observation per request, attributes as documented."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncsink import WriterStatistics
from asyncsink.spark import foreach_batch, foreach_partition, register_data_sources
from asyncsink.telemetry import INSTRUMENTS, Kind
from asyncsink.testing import Faults, FaultServer
from tests.metrics import data_points, total
from tests.spark.metrics_file import NAME, exporter_distribution, read_points

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = {"asyncsink.report": "committed"}
FAULTS = Faults(latency_ms=1, throttle_rate=0.1, partial_failure_rate=0.05,
                retry_after_s=0.01, seed=11)  # fmt: skip


@pytest.fixture
def faulty() -> Iterator[FaultServer]:
    with FaultServer(FAULTS) as running:
        yield running


def rows(spark: Any, n: int) -> Any:
    return spark.range(0, n, 1, 2).selectExpr("concat('r', id) AS id", "id * 2 AS v")


def options(server: FaultServer) -> dict[str, str]:
    return {"url": server.ingest_url, "maxBatchSize": "100", "initialBackoffMs": "5",
            "maxBackoffMs": "50"}  # fmt: skip


def assert_committed(points: list[Any], stats: WriterStatistics, server: FaultServer,
                     sink_id: str) -> None:  # fmt: skip
    applied = server.applied_ids()
    delivered = total(points, "asyncsink.entries.delivered", **COMMITTED)
    assert delivered == stats.delivered == len(applied) == len(set(applied))
    assert stats.retried > 0 and stats.throttled > 0, "the faults were not met"
    for name, field in (("asyncsink.entries.written", "written"),
                        ("asyncsink.entries.retried", "retried"),
                        ("asyncsink.requests.throttled", "throttled"),
                        ("asyncsink.requests.sent", "requests"),
                        ("asyncsink.bytes.sent", "bytes_sent")):  # fmt: skip
        assert total(points, name, **COMMITTED) == getattr(stats, field), name
    assert total(points, "asyncsink.request.duration", **COMMITTED) == stats.requests
    assert total(points, "asyncsink.request.entries", **COMMITTED) == stats.requests
    destination = server.ingest_url.removeprefix("http://")
    committed = [attrs for name, attrs, _ in points if attrs.get("asyncsink.report") == "committed"]
    assert committed
    for attributes in committed:
        assert attributes == {"asyncsink.sink.name": "http", "asyncsink.sink.id": sink_id,
                              "asyncsink.destination.name": destination, **COMMITTED}  # fmt: skip


def test_foreach_partition_records_the_committed_job(
    spark: Any, faulty: FaultServer, metric_reader: Any, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/records.db"
    http = {**options(faulty), "recordStore": store}
    stats = foreach_partition(rows(spark, 10_000), "http", http, sink_id="metrics-fp")
    points = data_points(metric_reader)
    assert stats.delivered == 10_000
    assert_committed(points, stats, faulty, "metrics-fp")
    # The executors have no SDK: nothing live, nothing counted twice
    assert not [attrs for _, attrs, _ in points if attrs.get("asyncsink.report") == "live"]


def file_stream(spark: Any, folder: Path, files: int, per_file: int) -> Any:
    folder.mkdir()
    for f in range(files):
        lines = "\n".join(f'{{"id": "f{f}-{i}", "v": {i}}}' for i in range(per_file))
        (folder / f"part-{f}.json").write_text(lines)
    return (
        spark.readStream.schema("id STRING, v LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
    )


def test_foreach_batch_records_each_committed_micro_batch(
    spark: Any, faulty: FaultServer, metric_reader: Any, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/records.db"
    sink = foreach_batch("http", {**options(faulty), "recordStore": store}, sink_id="metrics-fb")
    query = (
        file_stream(spark, tmp_path / "in", files=2, per_file=2000)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(sink.statistics) == 2
    stats = sum(sink.statistics.values(), WriterStatistics())
    assert stats.delivered == 4000
    assert_committed(data_points(metric_reader), stats, faulty, "metrics-fb")


@pytest.fixture
def worker_metrics(spark: Any, tmp_path: Path) -> Iterator[Path]:
    """Spark's Python workers export their metrics to files in the returned folder,
    configured by the standard OTEL_* variables."""
    folder = tmp_path / "points"
    folder.mkdir()
    distribution = exporter_distribution(tmp_path / "exporter")
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update({
        "OTEL_METRICS_EXPORTER": NAME,
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "ASYNCSINK_TEST_METRICS_DIR": str(folder),
        "PYTHONPATH": f"{distribution}:{ROOT}",
    })  # fmt: skip
    register_data_sources(spark)  # a data source runs with the variables of its registration
    try:
        yield folder
    finally:
        environment.clear()
        environment.update(saved)
        register_data_sources(spark)


def wait_for(folder: Path, name: str, value: int, **attributes: str) -> list[Any]:
    deadline = time.monotonic() + 30
    while True:
        points = read_points(folder)
        if total(points, name, **attributes) >= value or time.monotonic() > deadline:
            return points
        time.sleep(0.2)


def test_the_data_source_records_its_commit_and_its_writers_live(
    spark: Any, faulty: FaultServer, worker_metrics: Path, tmp_path: Path
) -> None:
    sink_id = f"metrics-ds-{uuid.uuid4().hex[:6]}"
    (
        rows(spark, 10_000)
        .write.format("asyncsink-http")
        .options(**options(faulty))
        .option("recordStore", f"sqlite:///{tmp_path}/records.db")
        .option("sinkId", sink_id)
        .mode("append")
        .save()
    )
    points = wait_for(worker_metrics, "asyncsink.entries.delivered", 10_000, **COMMITTED)
    live = {"asyncsink.report": "live"}
    points = wait_for(worker_metrics, "asyncsink.entries.delivered", 10_000, **live)
    # The commit message brought each task's statistics: rebuild their sum from the
    # writers' live figures, which count the same requests (no task was retried).
    names = {spec.field: spec.name for spec in INSTRUMENTS if spec.kind is Kind.COUNTER}
    fields = ("written", "delivered", "retried", "throttled", "requests", "bytes_sent")
    stats = WriterStatistics(**{field: total(points, names[field], **live) for field in fields})
    assert stats.delivered == 10_000
    assert total(points, "asyncsink.request.duration", **live) == stats.requests
    assert_committed(points, stats, faulty, sink_id)
