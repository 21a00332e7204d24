"""Spark local mode with the SQS, DynamoDB and Firehose sinks behind the fault proxy: a
Python worker killed mid-partition (Spark retries the task), then the batch replayed,
and each sink keeps its promise: FIFO SQS every row once, DynamoDB every key's last
write, Firehose every row at least once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncsink.spark import foreach_partition
from tests.servers.aws_faults import AwsFaultProxy
from tests.sinks.aws_helpers import options
from tests.sinks.test_dynamodb import make_table, scanned
from tests.sinks.test_firehose import make_stream, stored
from tests.sinks.test_sqs import make_queue, received

pytestmark = [pytest.mark.spark, pytest.mark.emulator, pytest.mark.timeout(600)]

ROWS = 300
WRITER = "tests.spark.aws_writers:create_killing_writer"


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[AwsFaultProxy]:
    # light faults: the fault paths are the sink tests' (tests/sinks); here the kill
    with AwsFaultProxy(moto_endpoint, throttle=0.02, partial=0.05, lost=0.02) as running:
        yield running


def deliver(df: Any, sink: str, settings: dict[str, str], store: Path, sink_id: str) -> Any:
    """Write ``df`` with a killed first attempt of partition 0, then replay the batch."""
    both = {
        **settings,
        "sink": sink,
        "killAfterAnswers": "4",
        "maxInFlightRequests": "4",
        "recordStore": f"sqlite:///{store}",
    }
    stats = foreach_partition(df, WRITER, both, sink_id=sink_id, batch_id=1)
    again = foreach_partition(df, WRITER, both, sink_id=sink_id, batch_id=1)
    assert again.delivered == 0, again.summary()  # Spark committed it: nothing sent again
    return stats


def test_a_fifo_queue_holds_each_row_once_after_a_killed_task_and_a_replay(
    spark: Any, proxy: AwsFaultProxy, moto_endpoint: str, tmp_path: Path
) -> None:
    name, url = make_queue(moto_endpoint, fifo=True)
    df = spark.range(0, ROWS, 1, 2).selectExpr("concat('r', id) AS id", "id % 9 AS g")
    settings = options(proxy.url, queueName=name, messageGroupIdField="g")
    stats = deliver(df, "sqs", settings, tmp_path / "sqs.db", "sqs-kill")
    held = Counter(
        str(__import__("orjson").loads(m["Body"])["id"]) for m in received(moto_endpoint, url)
    )
    assert set(held) == {f"r{i}" for i in range(ROWS)}
    assert max(held.values()) == 1
    assert stats.skipped >= 20, stats.summary()  # the dead attempt's acknowledged calls


def test_dynamodb_holds_each_keys_last_write_after_a_killed_task_and_a_replay(
    spark: Any, proxy: AwsFaultProxy, moto_endpoint: str, tmp_path: Path
) -> None:
    table = make_table(moto_endpoint)
    df = (
        spark.range(0, ROWS, 1, 1)
        .selectExpr(
            "concat('k', id % 100) AS id",
            "CAST(id DIV 100 AS INT) AS v",
            "IF((id % 100 + id DIV 100) % 5 = 0, 'delete', 'put') AS op",
        )
        .repartition(2, "id")
        .sortWithinPartitions("id", "v")
    )
    settings = options(proxy.url, tableName=table, keyFields="id", operationField="op")
    deliver(df, "dynamodb", settings, tmp_path / "dynamodb.db", "dynamodb-kill")
    want: dict[str, int] = {}
    for row in df.orderBy("v").collect():
        if row.op == "delete":
            want.pop(row.id, None)
        else:
            want[row.id] = row.v
    items = scanned(moto_endpoint, table)
    assert {key: int(item["v"]["N"]) for key, item in items.items()} == want


def test_firehose_holds_each_row_at_least_once_after_a_killed_task_and_a_replay(
    spark: Any, proxy: AwsFaultProxy, moto_endpoint: str, tmp_path: Path
) -> None:
    name, bucket = make_stream(moto_endpoint)
    df = spark.range(0, ROWS, 1, 2).selectExpr("concat('r', id) AS id", "id * 2 AS n")
    settings = options(proxy.url, deliveryStreamName=name, maxBatchSize="50")
    deliver(df, "firehose", settings, tmp_path / "firehose.db", "firehose-kill")
    held = stored(moto_endpoint, bucket)
    assert set(held) == {f"r{i}" for i in range(ROWS)}, "a row was lost"
