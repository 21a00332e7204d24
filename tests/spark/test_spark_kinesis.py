"""Spark local mode with the Kinesis sink: a Python worker killed mid-partition, with
requests in flight, and still every row in the stream exactly once (the retry settles the
lost calls by reading the shards)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import botocore.session
import orjson
import pytest

from asyncsink.spark import foreach_partition

pytestmark = [pytest.mark.spark, pytest.mark.emulator, pytest.mark.timeout(600)]

REGION = "us-east-1"
ROWS = 4000


@pytest.fixture
def kinesis(kinesalite_endpoint: str) -> Iterator[Any]:
    client = botocore.session.get_session().create_client(
        "kinesis", region_name=REGION, endpoint_url=kinesalite_endpoint,
        aws_access_key_id="admin", aws_secret_access_key="admin",
    )  # fmt: skip
    yield client
    client.close()


@pytest.fixture
def stream(kinesis: Any) -> Iterator[str]:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    kinesis.create_stream(StreamName=name, ShardCount=4)
    deadline = time.monotonic() + 30
    while status(kinesis, name) != "ACTIVE":
        assert time.monotonic() < deadline, "the stream did not become active"
        time.sleep(0.05)
    yield name
    kinesis.delete_stream(StreamName=name)


def status(kinesis: Any, name: str) -> str:
    summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    return str(summary["StreamStatus"])


def stored_ids(kinesis: Any, name: str) -> list[str]:
    ids: list[str] = []
    for shard in kinesis.list_shards(StreamName=name)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            ids.extend(orjson.loads(record["Data"])["id"] for record in page["Records"])
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return ids


def test_a_worker_killed_mid_partition_leaves_each_row_in_the_stream_once(
    spark: Any, kinesis: Any, stream: str, kinesalite_endpoint: str, tmp_path: Any
) -> None:
    options = {
        "streamName": stream, "endpointUrl": kinesalite_endpoint, "region": REGION,
        "awsAccessKeyId": "AKIASPARKTEST0000001", "awsSecretAccessKey": "spark",
        "partitionKeyField": "id", "maxBatchSize": "50", "maxInFlightRequests": "4",
        "requestTimeoutMs": "2s", "reconcileClockSkewMs": "300ms",
        "initialBackoffMs": "5", "maxBackoffMs": "50",
        "recordStore": f"sqlite:///{tmp_path}/records.db", "killAfterAnswers": "12",
    }  # fmt: skip
    df = spark.range(0, ROWS, 1, 2).selectExpr("concat('r', id) AS id", "id * 2 AS v")
    stats = foreach_partition(
        df,
        "tests.spark.kinesis_writers:create_killing_kinesis_writer",
        options,
        sink_id="kinesis-kill",
        batch_id=1,
    )
    held = Counter(stored_ids(kinesis, stream))
    lost = ROWS - len(held)
    duplicates = sum(held.values()) - len(held)
    assert (lost, duplicates) == (0, 0), f"{lost} lost, {duplicates} duplicates"
    assert set(held) == {f"r{i}" for i in range(ROWS)}
    # the retry skipped what the dead worker recorded, and settled what it left pending
    assert stats.skipped >= 11 * 50 and stats.reconciled >= 1, stats.summary()
    assert stats.resent_calls == 0, stats.summary()
    assert stats.delivered + stats.skipped == ROWS
