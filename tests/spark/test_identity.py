"""Durable records never skip what was not delivered: completion where Spark commits, and
a run identity that a new run never shares with an old one."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio
import pytest

from asyncsink.spark import foreach_batch, foreach_partition
from asyncsink.testing import FaultServer

from .test_spark import assert_exactly_once, file_stream, http_options, rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def run_stream(writer: Any, checkpoint: Any) -> None:
    """Start a stream on ``checkpoint``, process everything available, stop it."""
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def flaky_rows(spark: Any, n: int, fail_at: int, *, timestamps: bool) -> Any:
    """Rows whose ``id`` comes from a Python UDF that raises at ``fail_at`` on a task's
    first attempt: an operator upstream of the sink fails mid-partition."""
    from pyspark.sql import functions as F

    def label(i: int) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if i == fail_at and context is not None and context.attemptNumber() == 0:
            raise ValueError("upstream operator failed")
        return f"r{i}"

    flaky = F.udf(label, "string", useArrow=False)
    df = spark.range(0, n, 1, 2).select(flaky("id").alias("id"), F.col("id").alias("n"))
    if timestamps:  # a realistic column, read through Arrow as well
        df = df.withColumn("ts", F.timestamp_seconds(F.col("n")))
    return df


@pytest.mark.parametrize("timestamps", [False, True], ids=["flat", "timestamps"])
def test_an_upstream_failure_never_completes_a_half_read_partition(
    spark: Any, server: FaultServer, tmp_path: Any, timestamps: bool
) -> None:
    df = flaky_rows(spark, 8000, 3500, timestamps=timestamps)
    stats = foreach_partition(
        df,
        "http",
        http_options(server, f"sqlite:///{tmp_path}/r.db"),
        sink_id=f"upstream-{timestamps}",
        batch_id=1,
    )
    assert_exactly_once(server, 8000)
    assert stats.delivered + stats.skipped == 8000


def test_an_upstream_failure_in_a_streaming_batch_loses_nothing(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    from pyspark.sql import functions as F

    def label(name: str) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if name == "f0-250" and context is not None and context.attemptNumber() == 0:
            raise ValueError("upstream operator failed")
        return name

    source = file_stream(spark, tmp_path / "in", files=2, per_file=600)
    source = source.select(F.udf(label, "string", useArrow=False)("id").alias("id"), "v")
    sink = foreach_batch(
        "http", http_options(server, f"sqlite:///{tmp_path}/r.db"), sink_id="stream-upstream"
    )
    run_stream(source.writeStream.foreachBatch(sink), tmp_path / "ck")
    assert_exactly_once(server, 1200)


def test_a_second_batch_write_with_the_same_sink_id_is_a_new_run(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    first = foreach_partition(rows(spark, 1000), "http", options, sink_id="backfill")
    second_rows = rows(spark, 2000).selectExpr("concat('s', id) AS id", "v")
    second = foreach_partition(second_rows, "http", options, sink_id="backfill")
    assert first.delivered == 1000 and second.delivered == 2000
    assert second.skipped == 0
    assert len(set(server.applied_ids())) == 3000


def test_an_explicit_batch_id_deduplicates_a_rerun_and_refuses_changed_input(
    spark: Any, server: FaultServer, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    foreach_partition(rows(spark, 1000), "http", options, sink_id="daily", batch_id=20261123)
    with caplog.at_level(logging.WARNING, logger="asyncsink.spark"):
        again = foreach_partition(
            rows(spark, 1000), "http", options, sink_id="daily", batch_id=20261123
        )
    assert again.skipped == 1000 and again.delivered == 0
    warned = [r.getMessage() for r in caplog.records if "already delivered" in r.getMessage()]
    assert warned and "1000 of 1000 rows" in warned[0] and "daily/20261123/" in warned[0]
    changed = rows(spark, 1000).selectExpr("concat('x', id) AS id", "v")
    with pytest.raises(Exception, match="ReplayMismatchError") as caught:
        foreach_partition(changed, "http", options, sink_id="daily", batch_id=20261123)
    assert "daily" in str(caught.value) and "batchId" in str(caught.value)
    assert_exactly_once(server, 1000)


@pytest.mark.parametrize("before, after", [(1, 3), (3, 1)], ids=["more", "fewer"])
def test_a_rerun_of_a_batch_id_in_other_partitions_sends_nothing_and_fails(
    spark: Any, server: FaultServer, tmp_path: Any, before: int, after: int
) -> None:
    """The same rows cut into more partitions bring scopes the completed run never had:
    they are refused before they send, as the changed old ones are at their end."""
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    foreach_partition(rows(spark, 900, before), "http", options, sink_id="cut", batch_id=5)
    requests = server.stats().requests
    with pytest.raises(Exception, match="ReplayMismatchError") as caught:
        foreach_partition(rows(spark, 900, after), "http", options, sink_id="cut", batch_id=5)
    assert "Nothing was sent" in str(caught.value)
    assert server.stats().requests == requests
    assert_exactly_once(server, 900)


def test_a_stream_restarted_on_a_new_checkpoint_delivers_everything_again(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    source = file_stream(spark, tmp_path / "in", files=2, per_file=300)
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    for checkpoint in ("first", "second"):
        sink = foreach_batch("http", options, sink_id="reprocess")
        run_stream(source.writeStream.foreachBatch(sink), tmp_path / checkpoint)
        assert sum(stats.skipped for stats in sink.statistics.values()) == 0
    ids = server.applied_ids()
    assert len(ids) == 1200 and len(set(ids)) == 600  # each row once per run, keys differ


def test_data_source_writes_without_batch_id_are_separate_runs(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    store = f"sqlite:///{tmp_path}/r.db"
    for prefix in ("a", "b"):
        (
            rows(spark, 700)
            .selectExpr(f"concat('{prefix}', id) AS id", "v")
            .write.format("asyncsink-http")
            .options(**http_options(server, store))
            .option("sinkId", "ds-runs")
            .mode("append")
            .save()
        )
    assert len(set(server.applied_ids())) == 1400


def test_a_streaming_data_source_on_a_new_checkpoint_is_a_new_run(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    source = file_stream(spark, tmp_path / "in", files=2, per_file=200)
    sink_id = f"ds-stream-{uuid.uuid4().hex[:6]}"
    for checkpoint in ("one", "two"):
        writer = (
            source.writeStream.format("asyncsink-http")
            .options(**http_options(server, f"sqlite:///{tmp_path}/s.db"))
            .option("sinkId", sink_id)
        )
        run_stream(writer, tmp_path / checkpoint)
    ids = server.applied_ids()
    assert len(ids) == 800 and len(set(ids)) == 400


@pytest.mark.parametrize("batch_id", ["4", None], ids=["named-run", "fresh-run"])
def test_an_upstream_failure_under_a_data_source_write_loses_nothing(
    spark: Any, server: FaultServer, tmp_path: Any, batch_id: str | None
) -> None:
    """Task retries of one save() share its run, named or fresh: the retry skips what the
    failed attempt delivered and sends the rest."""
    writer = (
        flaky_rows(spark, 6000, 2500, timestamps=False)
        .write.format("asyncsink-http")
        .options(**http_options(server, f"sqlite:///{tmp_path}/r.db"))
        .option("sinkId", "ds-upstream")
    )
    if batch_id is not None:
        writer = writer.option("batchId", batch_id)
    writer.mode("append").save()
    assert_exactly_once(server, 6000)


def test_an_upstream_failure_under_a_streaming_data_source_loses_nothing(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    from pyspark.sql import functions as F

    def label(name: str) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if name == "f1-250" and context is not None and context.attemptNumber() == 0:
            raise ValueError("upstream operator failed")
        return name

    source = file_stream(spark, tmp_path / "in", files=2, per_file=500)
    source = source.select(F.udf(label, "string", useArrow=False)("id").alias("id"), "v")
    writer = (
        source.writeStream.format("asyncsink-http")
        .options(**http_options(server, f"sqlite:///{tmp_path}/s.db"))
        .option("sinkId", "ds-stream-upstream")
    )
    run_stream(writer, tmp_path / "ck")
    assert_exactly_once(server, 1000)


@pytest.mark.parametrize("entry", ["foreach_partition", "data source"])
def test_a_failed_write_without_a_batch_id_leaves_no_records(
    spark: Any, server: FaultServer, tmp_path: Any, entry: str
) -> None:
    from asyncsink.stores import open_store

    store = f"sqlite:///{tmp_path}/r.db"
    options = http_options(server, store, maxRetries=0, failFastOnConnectionRefused="false")
    options["url"] = "http://127.0.0.1:9/refused"  # nothing listens: every request fails
    with pytest.raises(Exception, match="DeliveryError"):
        # One partition: a task Spark has not stopped yet when it gives up on the write
        # may still take its scope after the records were dropped (best effort).
        if entry == "data source":
            writer = rows(spark, 200, 1).write.format("asyncsink-http").options(**options)
            writer.option("sinkId", "doomed").mode("append").save()
        else:
            foreach_partition(rows(spark, 200, 1), "http", options, sink_id="doomed")

    async def scopes() -> list[Any]:
        async with open_store(store) as opened:
            return await opened.scopes("doomed")

    assert anyio.run(scopes) == []  # nothing replays a fresh run: its records are gone


def test_two_columns_of_one_name_are_refused_before_anything_is_sent(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    df = spark.createDataFrame([(1, 10, "x")], ["a", "a", "b"])
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    with pytest.raises(ValueError, match="two columns named 'a'"):
        foreach_partition(df, "http", options, sink_id="twins")
    assert server.stats().requests == 0


def test_the_data_sources_refuse_to_overwrite(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    writer = rows(spark, 10).write.format("asyncsink-http").options(**options)
    with pytest.raises(Exception, match=r"mode\('overwrite'\) cannot replace"):
        writer.mode("overwrite").save()
    assert server.stats().requests == 0
