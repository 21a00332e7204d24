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

from asyncsink.sinks import registry
from asyncsink.testing import ElasticsearchServer, FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def test_every_example_has_a_test() -> None:
    programs = {path.stem for path in EXAMPLES.glob("*.py")}
    tested = {"http_stream", "elasticsearch_backfill", "kinesis_stream", "custom_sink"}
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
    spark.sparkContext.addPyFile(str(EXAMPLES / "custom_sink.py"))
    from asyncsink.spark import register_data_sources

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "_SINKS", dict(registry._SINKS))
        example.register()
        register_data_sources(spark)
        rows = spark.range(600).selectExpr("id", "id % 3 AS kind")
        with FaultServer() as server:
            rows.write.format("asyncsink-collector").option("endpoint", server.ingest_url).mode(
                "append"
            ).save()
            assert server.stats().entries_received == 600
        with pytest.raises(Exception, match="endpoint"):
            rows.write.format("asyncsink-collector").mode("append").save()
    writer = example.create_writer({"endpoint": "http://user:pw@127.0.0.1:9/x"})
    assert "pw" not in writer.describe_destination()


@pytest.fixture
def kinesis(kinesalite_endpoint: str) -> Iterator[Any]:
    client = botocore.session.get_session().create_client(
        "kinesis", region_name="us-east-1", endpoint_url=kinesalite_endpoint,
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
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
    example.run(events, stream, "us-east-1", f"records-{uuid.uuid4().hex[:6]}",
                tmp_path / "checkpoint", kinesalite_endpoint, moto_endpoint)  # fmt: skip
    ids: list[str] = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
        ids.extend(orjson.loads(record["Data"])["id"] for record in page["Records"])
    assert sorted(ids, key=int) == [str(i) for i in range(300)]
