"""The driver's part of the durable contract around a run's end: a re-run of a completed
batch in fewer partitions is refused, an empty run is recorded, and a failed run fences
the attempts Spark has not stopped yet."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from asyncsink.durable.completion import BATCH_KEY, CompletedBatch
from asyncsink.errors import ReplayMismatchError
from asyncsink.spark import foreach_partition
from asyncsink.stores import Scope, open_store
from asyncsink.testing import Faults, FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _rows(spark: Any, n: int, partitions: int) -> Any:
    return spark.range(0, n, 1, partitions).selectExpr("concat('r', id) AS id")


def _options(server: FaultServer, store: str, **extra: str) -> dict[str, str]:
    return {"url": server.ingest_url, "recordStore": store, "maxBatchSize": "100", **extra}


def _batch_record(store: str, scope: Scope) -> int | None:
    async def load() -> bytes | None:
        async with open_store(store) as opened:
            return await opened.load_record(scope, BATCH_KEY)

    data = anyio.run(load)
    return None if data is None else CompletedBatch.decode(data).partitions


def test_a_completed_batch_re_run_in_fewer_partitions_is_refused(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    store = f"sqlite:///{tmp_path}/records.db"
    options = _options(server, store)
    stats = foreach_partition(_rows(spark, 3000, 3), "http", options, sink_id="s", batch_id=9)
    assert stats.delivered == 3000
    with pytest.raises(ReplayMismatchError, match="completed with 3 partitions, replayed with 2"):
        foreach_partition(_rows(spark, 2000, 2), "http", options, sink_id="s", batch_id=9)
    assert len(server.applied_ids()) == 3000, "the re-run sent nothing"
    assert _batch_record(store, Scope("s", 9, 0)) == 3, "the recorded count is kept"
    again = foreach_partition(_rows(spark, 3000, 3), "http", options, sink_id="s", batch_id=9)
    assert (again.delivered, again.skipped) == (0, 3000), "the same input still passes"


def test_an_empty_run_is_recorded_and_rows_under_its_ids_are_refused(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    store = f"sqlite:///{tmp_path}/records.db"
    options = _options(server, store)
    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), "id string")
    assert empty.rdd.getNumPartitions() == 0
    stats = foreach_partition(empty, "http", options, sink_id="e", batch_id=4)
    assert stats.written == 0
    assert _batch_record(store, Scope("e", 4, 0)) == 0
    with pytest.raises(Exception, match="ReplayMismatchError"):
        foreach_partition(_rows(spark, 500, 2), "http", options, sink_id="e", batch_id=4)
    assert server.applied_ids() == [], "nothing delivered under the empty run's ids"


def test_a_failed_run_fences_its_attempts_still_running(
    spark: Any, server: FaultServer, tmp_path: Any
) -> None:
    """Partition 1 fails on every attempt after a second; partition 0 is a slow sender
    (one request of 10 rows at a time, 20 ms each: 5 s in all) that Spark leaves running
    when the job fails. Once ``foreach_partition`` raised, its next record write is
    fenced: at most the request it had in flight still arrives."""
    from pyspark.sql import functions as F

    server.set_faults(Faults(latency_ms=20))

    def fail_in_partition_one(i: int) -> str:
        if i == 2500:
            time.sleep(1.0)
            raise ValueError("partition 1 always fails")
        return f"r{i}"

    label = F.udf(fail_in_partition_one, "string", useArrow=False)
    df = spark.range(0, 5000, 1, 2).select(label("id").alias("id"))
    store = f"sqlite:///{tmp_path}/records.db"
    options = _options(
        server, store, maxBatchSize="10", maxInFlightRequests="1", adaptiveConcurrency="false"
    )
    with pytest.raises(Exception, match="partition 1 always fails"):
        foreach_partition(df, "http", options, sink_id="f", batch_id=1)
    at_fence = server.stats().requests
    time.sleep(1.5)
    after = server.stats().requests
    assert 0 < at_fence < 250, f"partition 0 was still sending when the job failed: {at_fence}"
    assert after - at_fence <= 1, f"{after - at_fence} requests left after the fence"
