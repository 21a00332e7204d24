"""Each program of ``examples/`` runs against the local destinations and does what its
docstring says."""

from __future__ import annotations

import importlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import botocore.session
import orjson
import pytest

from asyncsink import OptionError
from asyncsink.plugins import sinks as registry
from asyncsink.request import CallInfo, _current
from asyncsink.testing import FaultServer
from tests.servers.elasticsearch import ElasticsearchServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def test_every_example_has_a_test() -> None:
    programs = {path.stem for path in EXAMPLES.glob("*.py")}
    tested = {
        "http_stream",
        "elasticsearch_backfill",
        "kinesis_stream",
        "custom_sink",
        "sqs_orders",
        "firehose_clicks",
        "dynamodb_customers",
    }
    assert programs == tested


def test_http_stream_delivers_with_a_token_and_dead_letters_the_large_row(
    spark: Any, tmp_path: Path
) -> None:
    example = load("http_stream")
    example.write_input(tmp_path / "in", 400)
    with FaultServer(require_auth="Bearer s3cret") as server:
        batches = example.run(spark, server.ingest_url, "s3cret", tmp_path)
        assert server.stats().entries_received == 399
    assert sum(stats.delivered for stats in batches.values()) == 399
    assert sum(stats.dead_lettered for stats in batches.values()) == 1
    (letter,) = (tmp_path / "dead-letters.jsonl").read_text().splitlines()
    assert "e3" in letter


def test_elasticsearch_backfill_indexes_by_id_and_a_rerun_sends_nothing(
    spark: Any, tmp_path: Path
) -> None:
    example = load("elasticsearch_backfill")
    orders = example.orders_frame(spark, 800)
    store = f"sqlite://{tmp_path / 'records.db'}"
    with ElasticsearchServer() as server:
        first = example.backfill(orders, server.url, store, batch_id=1)
        again = example.backfill(orders, server.url, store, batch_id=1)
        assert set(server.documents("orders")) == {f"o{i}" for i in range(800)}
    assert (first.delivered, again.delivered) == (800, 0)


def test_custom_sink_is_a_data_source_with_a_required_option(spark: Any) -> None:
    example = load("custom_sink")
    assert len((EXAMPLES / "custom_sink.py").read_text().splitlines()) < 60
    spark.sparkContext.addPyFile(str(EXAMPLES / "custom_sink.py"))
    from asyncsink.spark import foreach_batch, register_data_sources

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "_SINKS", registry._SINKS.copy())
        example.register()
        register_data_sources(spark)
        rows = spark.range(600).selectExpr("id", "id % 3 AS kind")
        with FaultServer() as server:
            rows.write.format("asyncsink-collector").option("endpoint", server.ingest_url).mode(
                "append"
            ).save()
            foreach_batch("collector", {"endpoint": server.ingest_url})(rows, 0)
            assert server.stats().entries_received == 1200
        with pytest.raises(Exception, match="option 'endpoint' is required by the collector"):
            rows.write.format("asyncsink-collector").mode("append").save()
        with pytest.raises(OptionError, match="option 'endpoint' is required by the collector"):
            foreach_batch("collector", {"statusUrl": "http://127.0.0.1:9/{key}"})
    writer = example.CollectorWriter(example.CollectorOptions(endpoint="http://u:pw@h:9/x"))
    assert "pw" not in writer.describe_destination()


@pytest.mark.anyio
async def test_custom_sink_reconciles_a_call_by_its_key() -> None:
    example = load("custom_sink")
    with FaultServer(in_thread=True) as server:
        own = example.CollectorOptions(
            endpoint=server.ingest_url, status_url=server.url + "/_control/status/{key}"
        )
        writer = example.CollectorWriter(own)
        sent = CallInfo(0, "key-sent", "scope", range(0, 2))
        token = _current.set(sent)
        try:
            await writer.submit_request_entries([b'{"id": 1}', b'{"id": 2}'])
        finally:
            _current.reset(token)
        assert await writer.reconcile(sent) == [0, 1]
        assert await writer.reconcile(CallInfo(1, "key-lost", "scope", range(2, 4))) == []
        no_status = example.CollectorWriter(example.CollectorOptions(endpoint=server.ingest_url))
        assert await no_status.reconcile(sent) is None


@pytest.fixture
def kinesis(kinesalite_endpoint: str) -> Iterator[Any]:
    client = botocore.session.get_session().create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url=kinesalite_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    yield client
    client.close()


@pytest.mark.emulator
def test_kinesis_stream_puts_each_row_with_dynamodb_records(
    spark: Any,
    tmp_path: Path,
    kinesis: Any,
    kinesalite_endpoint: str,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The DynamoDB store takes credentials from the environment, on the driver and in
    # the Python workers (which get the SparkContext's environment).
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
        monkeypatch.setitem(spark.sparkContext.environment, name, "testing")
    stream = f"example-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    deadline = time.monotonic() + 30
    while (
        kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"
        ]
        != "ACTIVE"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    folder = tmp_path / "in"
    folder.mkdir()
    lines = (orjson.dumps({"id": str(i), "user": f"u{i % 5}"}) for i in range(300))
    (folder / "part-0.json").write_bytes(b"\n".join(lines))
    events = spark.readStream.schema("id STRING, user STRING").json(str(folder))
    example = load("kinesis_stream")
    example.run(
        events,
        stream,
        "us-east-1",
        f"records-{uuid.uuid4().hex[:6]}",
        tmp_path / "checkpoint",
        kinesalite_endpoint,
        moto_endpoint,
    )
    ids: list[str] = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
        ids.extend(orjson.loads(record["Data"])["id"] for record in page["Records"])
    assert sorted(ids, key=int) == [str(i) for i in range(300)]


@pytest.mark.emulator
def test_sqs_orders_sends_each_order_once_with_its_group_and_kind(
    spark: Any, tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
        monkeypatch.setitem(spark.sparkContext.environment, name, "testing")
    sqs = botocore.session.get_session().create_client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    url = sqs.create_queue(
        QueueName=f"orders-{uuid.uuid4().hex[:6]}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    example = load("sqs_orders")
    orders = example.orders_frame(spark, 200)
    store = f"sqlite://{tmp_path / 'records.db'}"
    first = example.send(orders, url, "us-east-1", store, 1, moto_endpoint)
    again = example.send(orders, url, "us-east-1", store, 1, moto_endpoint)
    assert (first.delivered, again.delivered) == (200, 0)
    bodies = []
    for _ in range(100):
        page = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=300,
        )
        if not page.get("Messages"):
            break
        bodies += [
            (orjson.loads(m["Body"]), m["MessageAttributes"]["kind"]["StringValue"])
            for m in page["Messages"]
        ]
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(page["Messages"])
            ],
        )
    assert sorted(body["order_id"] for body, _ in bodies) == sorted(f"o{i}" for i in range(200))
    assert all(
        kind == ("refund" if int(b["order_id"][1:]) % 10 == 0 else "sale") for b, kind in bodies
    )
    assert {b["order_id"]: b["total"] for b, _ in bodies}["o3"] == 3.75
    sqs.close()


@pytest.mark.emulator
def test_firehose_clicks_lands_each_click_in_s3_as_json_lines(
    spark: Any, tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
        monkeypatch.setitem(spark.sparkContext.environment, name, "testing")
    session = botocore.session.get_session()
    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    s3 = session.create_client("s3", region_name="us-east-1", endpoint_url=moto_endpoint, **keys)
    firehose = session.create_client(
        "firehose", region_name="us-east-1", endpoint_url=moto_endpoint, **keys
    )
    bucket, stream = f"clicks-{uuid.uuid4().hex[:6]}", f"clicks-{uuid.uuid4().hex[:6]}"
    s3.create_bucket(Bucket=bucket)
    firehose.create_delivery_stream(
        DeliveryStreamName=stream,
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": f"arn:aws:s3:::{bucket}",
        },
    )
    example = load("firehose_clicks")
    clicks = example.clicks_frame(spark, 300)
    store = f"sqlite://{tmp_path / 'records.db'}"
    keys = {"awsAccessKeyId": "testing", "awsSecretAccessKey": "testing"}
    example.send(clicks, stream, "us-east-1", store, 1, moto_endpoint, **keys)
    example.send(clicks, stream, "us-east-1", store, 1, moto_endpoint, **keys)  # sends nothing
    lines = []
    for item in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        lines += s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().splitlines()
    clicks_seen = sorted(orjson.loads(line)["click_id"] for line in lines)
    assert clicks_seen == sorted(f"c{i}" for i in range(300))
    first = orjson.loads(next(line for line in lines if b'"c1"' in line))
    assert first["at"] == "2026-11-28T12:00:01.000000Z"  # the JSON contract's instants
    s3.close()
    firehose.close()


@pytest.mark.emulator
def test_dynamodb_customers_leaves_each_customer_with_its_last_change(
    spark: Any, tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
        monkeypatch.setitem(spark.sparkContext.environment, name, "testing")
    dynamodb = botocore.session.get_session().create_client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    table = f"customers-{uuid.uuid4().hex[:6]}"
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "customer_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "customer_id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    example = load("dynamodb_customers")
    store = f"sqlite://{tmp_path / 'records.db'}"
    stats = example.apply(
        example.changes_frame(spark, 50, 4), table, "us-east-1", store, 1, moto_endpoint
    )
    assert stats.delivered == 200
    items = dynamodb.scan(TableName=table)["Items"]
    assert sorted(item["customer_id"]["S"] for item in items) == sorted(
        f"c{i}" for i in range(50) if i % 5 != 0
    )
    one = next(item for item in items if item["customer_id"]["S"] == "c1")
    assert one["version"] == {"N": "3"} and one["balance"] == {"N": "75.50"}
    assert one["profile"]["M"]["city"] == {"S": "city-1"} and "op" not in one
    dynamodb.close()
