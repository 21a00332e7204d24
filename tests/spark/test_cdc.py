"""Change data capture through Spark: 2,000 keys x 25 changes (upserts, deletes mixed in),
each key's changes in order in its partition, streamed to an endpoint that answers out of
order (0-50 ms), fails 20% of items inside its answers and 5% of requests whole, while a
task of every micro-batch is killed mid-way. With ``orderingKey`` each key's changes are
applied in strictly increasing order, so its last change is its final state (a deleted key
stays deleted); without it, the same run applies some key out of order (the control)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from asyncsink.spark import foreach_batch
from asyncsink.testing import Faults, FaultServer

from .test_spark_kinesis import kinesis, stream  # noqa: F401 - the fixtures

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

KEYS, PER_KEY, FILES = 2000, 25, 2
SPAN = -(-PER_KEY // FILES)  # changes of a key per micro-batch
FAULTS = Faults(latency_jitter_ms=50, partial_failure_rate=0.2, error_rate=0.05, seed=46)


def op(key: int, n: int) -> str:
    last_delete = n == PER_KEY - 1 and key % 5 == 0
    return "delete" if n % 7 == 6 or last_delete else "upsert"


def write_changes(folder: Path, files: int = FILES, keys: int = KEYS) -> None:
    """One file per micro-batch, each key's changes in order: file ``f`` holds changes
    ``n`` of every key with ``n // SPAN == f``, ordered by ``(n, key)``."""
    folder.mkdir(parents=True)
    for f in range(files):
        rows = (
            {"id": f"k{key}:{n}", "key": f"k{key}", "n": n, "op": op(key, n)}
            for n in range(f * SPAN, min(PER_KEY, (f + 1) * SPAN))
            for key in range(keys)
        )
        (folder / f"part-{f}.json").write_bytes(b"\n".join(map(orjson.dumps, rows)) + b"\n")


def applied_per_key(server: FaultServer) -> dict[str, list[int]]:
    applied: dict[str, list[int]] = defaultdict(list)
    for identity in server.applied_ids():
        key, n = str(identity).split(":")
        applied[key].append(int(n))
    return applied


def options(server: FaultServer, tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "url": server.ingest_url,
        "recordStore": f"sqlite://{tmp_path / 'records.db'}",
        "maxBatchSize": "500",
        "initialBackoffMs": "5",
        "maxBackoffMs": "100",
        "maxRetries": "30",
        "requestTimeoutMs": "5s",
        **more,
    }


def stream_files(spark: Any, tmp_path: Path, sink: Any, files: int) -> None:
    events = (
        spark.readStream.schema("id STRING, key STRING, n INT, op STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    checkpoint = str(tmp_path / "checkpoint")
    query = events.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    try:
        deadline = time.monotonic() + 400
        while len(query.recentProgress) < files or query.status["isDataAvailable"]:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline
            query.processAllAvailable()
    finally:
        query.stop()


def test_ordered_changes_are_applied_in_order_under_faults_and_kills(
    spark: Any, tmp_path: Path
) -> None:
    write_changes(tmp_path / "in")
    with FaultServer(FAULTS, id_field="id") as server:
        sink = foreach_batch(
            "tests.spark.writers:create_killing_writer",
            options(server, tmp_path, orderingKey="key", killAfterRequests="3"),
            sink_id=f"cdc-{uuid.uuid4().hex[:6]}",
        )
        stream_files(spark, tmp_path, sink, FILES)
        applied = applied_per_key(server)
        done = server.stats()
    assert len(applied) == KEYS
    out_of_order = [
        k for k, ns in applied.items() if ns != sorted(set(ns)) or ns[-1] != PER_KEY - 1
    ]
    assert out_of_order == []
    assert done.duplicates == 0 and done.unique_ids == KEYS * PER_KEY
    deleted = {k for k, ns in applied.items() if op(int(k[1:]), ns[-1]) == "delete"}
    assert deleted == {f"k{key}" for key in range(0, KEYS, 5)}  # they stay deleted
    assert sink.totals.retried > 0  # the faults were felt


def test_without_ordering_the_same_run_applies_a_key_out_of_order(
    spark: Any, tmp_path: Path
) -> None:
    write_changes(tmp_path / "in", files=1)
    with FaultServer(FAULTS, id_field="id") as server:
        sink = foreach_batch("http", options(server, tmp_path), sink_id="cdc-control")
        stream_files(spark, tmp_path, sink, 1)
        applied = applied_per_key(server)
    out_of_order = [k for k, ns in applied.items() if ns != sorted(ns)]
    assert out_of_order, "the control must show the reordering that orderingKey prevents"


def test_the_data_source_keeps_order_too(spark: Any, tmp_path: Path) -> None:
    write_changes(tmp_path / "in", files=1, keys=500)
    changes = spark.read.schema("id STRING, key STRING, n INT, op STRING").json(
        str(tmp_path / "in")
    )
    with FaultServer(FAULTS, id_field="id") as server:
        (
            changes.coalesce(1)
            .write.format("asyncsink-http")
            .options(**options(server, tmp_path, orderingKey="key", sinkId="cdc-ds", batchId="1"))
            .mode("append")
            .save()
        )
        applied = applied_per_key(server)
    assert all(ns == list(range(SPAN)) for ns in applied.values()) and len(applied) == 500


@pytest.mark.emulator
def test_kinesis_ordered_keeps_each_partition_keys_changes_in_order(
    spark: Any,
    kinesis: Any,  # noqa: F811 - the fixture
    stream: str,  # noqa: F811 - the fixture
    kinesalite_endpoint: str,
    tmp_path: Path,
) -> None:
    """Read back with GetRecords per shard: each partition key's changes in order, once,
    although a task of each micro-batch was killed mid-way."""
    keys = 500
    write_changes(tmp_path / "in", keys=keys)
    options = {
        "streamName": stream, "endpointUrl": kinesalite_endpoint, "region": "us-east-1",
        "awsAccessKeyId": "AKIASPARKTEST0000001", "awsSecretAccessKey": "spark",
        "partitionKeyField": "key", "ordered": "true", "maxBatchSize": "100",
        "requestTimeoutMs": "2s", "reconcileClockSkewMs": "300ms",
        "initialBackoffMs": "5", "maxBackoffMs": "50", "killAfterAnswers": "5",
        "recordStore": f"sqlite://{tmp_path / 'records.db'}",
    }  # fmt: skip
    sink = foreach_batch("tests.spark.kinesis_writers:create_killing_kinesis_writer", options,
                         sink_id="cdc-kinesis")  # fmt: skip
    stream_files(spark, tmp_path, sink, FILES)
    per_key: dict[str, list[int]] = defaultdict(list)
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for record in page["Records"]:
                change = orjson.loads(record["Data"])
                assert record["PartitionKey"] == change["key"]
                per_key[change["key"]].append(change["n"])
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    assert len(per_key) == keys
    assert all(ns == list(range(PER_KEY)) for ns in per_key.values())
