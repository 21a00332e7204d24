"""The Kinesis sink: options, row conversion, limits, error handling, shared clients, and
delivery into kinesalite (records read back shard by shard)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import decimal
import logging
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

import asyncsink.sinks.kinesis as kinesis_package
from asyncsink import (
    AsyncSinkError,
    BadRecordError,
    DeadLetter,
    DeliveryError,
    FatalError,
    OptionError,
    RetryableError,
    SinkOptions,
    ThrottledError,
)
from asyncsink.options import option_specs
from asyncsink.sinks import sink_factory, sink_options
from asyncsink.sinks.kinesis import (
    KinesisEntry,
    KinesisOptions,
    KinesisWriter,
    close_clients,
    create_writer,
    translate_error,
)
from asyncsink.sinks.kinesis.clients import open_client_count
from asyncsink.sinks.kinesis.shards import hash_key
from tests.core.test_connections import closed_port

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
REGION = "us-east-1"
KEY_ID = "AKIATESTKEYID0000001"
SECRET = "s3cr3t/Value+ForTests0000000000000000000"
TOKEN = "session-token-for-tests-0000000000"


class Row(tuple):  # type: ignore[type-arg]
    """Shaped like ``pyspark.sql.Row``: a tuple with field names and ``asDict``."""

    __fields__: tuple[str, ...]

    def __new__(cls, **fields: Any) -> Row:
        row = super().__new__(cls, tuple(fields.values()))
        row.__fields__ = tuple(fields)
        return row

    def asDict(self) -> dict[str, Any]:  # noqa: N802 - pyspark's name
        return dict(zip(self.__fields__, self, strict=True))


class FakeKinesis:
    """Accepts every PutRecords request and keeps its parameters."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def put_records(self, **params: Any) -> dict[str, Any]:
        self.requests.append(params)
        records = [{"SequenceNumber": str(i), "ShardId": "shardId-000000000000"}
                   for i in range(len(params["Records"]))]  # fmt: skip
        return {"FailedRecordCount": 0, "Records": records}

    @property
    def records(self) -> list[dict[str, Any]]:
        return [record for request in self.requests for record in request["Records"]]


def fake_writer(**kinesis: Any) -> tuple[KinesisWriter, FakeKinesis]:
    options = kinesis.pop("options", None)
    client = FakeKinesis()
    kinesis.setdefault("stream_name", "events")
    return KinesisWriter(KinesisOptions(**kinesis), options=options, client=client), client


async def deliver(writer: KinesisWriter, rows: Any) -> None:
    async with writer:
        await writer.write_all(rows)


# ---------------------------------------------------------------------------- options


def test_exactly_one_of_stream_name_or_stream_arn_is_required() -> None:
    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    for kwargs, given in (({}, "neither"), ({"stream_name": "a", "stream_arn": arn}, "both")):
        with pytest.raises(OptionError, match=f"'streamName' or 'streamArn' \\({given}"):
            KinesisOptions(**kwargs)
    with pytest.raises(OptionError, match="streamArn"):
        KinesisOptions(stream_arn="arn:aws:s3:::bucket")
    with pytest.raises(OptionError, match="streamName"):
        KinesisOptions(stream_name="has spaces")


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"stream_name": "events\n"}, "streamName"),
        ({"stream_arn": "arn:aws:kinesis:eu-west-1:123456789012:stream/events\n"}, "streamArn"),
        ({"stream_name": "events", "region": "eu-west-1\n"}, "region"),
        ({"stream_name": "events", "aws_access_key_id": "AKIDEXAMPLE\n",
          "aws_secret_access_key": "secret"}, "awsAccessKeyId"),
        ({"stream_name": "events", "aws_access_key_id": "AKIDEXAMPLE",
          "aws_secret_access_key": "secret", "aws_session_token": "token\n"}, "awsSessionToken"),
    ],
)  # fmt: skip
def test_a_trailing_line_break_is_refused_naming_the_option(
    options: dict[str, str], name: str
) -> None:
    with pytest.raises(OptionError, match=f"'{name}'") as caught:
        KinesisOptions(**options)
    assert "token" not in str(caught.value) and "AKIDEXAMPLE" not in str(caught.value)


def test_every_option_is_documented_under_its_spark_name() -> None:
    specs = {spec.spark_name: spec for spec in option_specs(KinesisOptions)}
    assert {"streamName", "streamArn", "partitionKeyField", "maxRecordSizeInBytes"} <= set(specs)
    for name, spec in specs.items():
        assert len(spec.doc) > 20, name
    assert {name for name, spec in specs.items() if spec.secret} == {
        "awsAccessKeyId", "awsSecretAccessKey", "awsSessionToken", "awsExternalId"}  # fmt: skip


def test_spark_options_build_both_option_groups_case_insensitively() -> None:
    writer = create_writer(
        {
            "STREAMNAME": "events",
            "region": "eu-west-1",
            "endpointUrl": "http://127.0.0.1:1",
            "partitionkeymode": "FIELD",
            "partitionKeyField": "country, city",
            "maxBatchSize": "100",
            "maxInFlightRequests": "4",
            "maxRecordSizeInBytes": "2mb",
            "deadLetter": "/tmp/kinesis-dead-letters.jsonl",
        }
    )
    assert writer.kinesis.stream_name == "events"
    assert writer.kinesis.effective_region == "eu-west-1"
    assert writer.kinesis.resolved_partition_key_mode == "field"
    assert writer.kinesis.key_fields == ("country", "city")
    assert writer.options.max_batch_size == 100
    assert writer.options.max_in_flight_requests == 4
    assert writer.options.max_record_size_in_bytes == 2 * MiB, "the stream's size is wired in"
    assert writer.options.max_batch_size_in_bytes == 5 * MiB
    assert writer.options.dead_letter == "/tmp/kinesis-dead-letters.jsonl"
    built = sink_factory("kinesis")({"streamName": "events", "maxBatchSize": "100"})
    assert isinstance(built, KinesisWriter) and built.options.max_batch_size == 100
    assert sink_options("kinesis") is KinesisOptions


def test_kinesis_defaults_for_the_writer_options() -> None:
    writer = create_writer({"streamName": "events"})
    assert writer.options.max_batch_size == 500
    assert writer.options.max_batch_size_in_bytes == 5 * MiB
    assert writer.options.max_record_size_in_bytes == 1 * MiB
    python = KinesisWriter(KinesisOptions(stream_name="events"))
    assert python.options.max_batch_size == 500
    assert python.options.max_batch_size_in_bytes == 5 * MiB


def test_a_larger_stream_record_size_raises_the_request_size_to_hold_one() -> None:
    writer = create_writer({"streamName": "events", "maxRecordSizeInBytes": "8mb"})
    assert writer.options.max_record_size_in_bytes == 8 * MiB
    assert writer.options.max_batch_size_in_bytes == 8 * MiB
    python = KinesisWriter(KinesisOptions(stream_name="events", max_record_size_in_bytes=8 * MiB))
    assert python.options.max_record_size_in_bytes == 8 * MiB
    with pytest.raises(OptionError, match="set it in KinesisOptions"):
        KinesisWriter(
            KinesisOptions(stream_name="events", max_record_size_in_bytes=2 * MiB),
            options=SinkOptions(max_record_size_in_bytes=512 * 1024),
        )


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"maxBatchSize": "501"}, "maxBatchSize"),
        ({"maxBatchSizeInBytes": "11mb"}, "maxBatchSizeInBytes"),
        ({"maxRecordSizeInBytes": "11mb", "maxBatchSizeInBytes": "11mb"}, "maxRecordSizeInBytes"),
    ],
)
def test_options_above_the_put_records_limits_are_refused(raw: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError) as caught:
        create_writer({"streamName": "events", **raw})
    assert caught.value.option == named
    assert "at most" in str(caught.value)


def test_options_at_the_put_records_limits_are_accepted() -> None:
    writer = create_writer(
        {"streamName": "s", "maxBatchSize": "500", "maxBatchSizeInBytes": "10mb",
         "maxRecordSizeInBytes": "10mb"}
    )  # fmt: skip
    assert (writer.options.max_batch_size, writer.options.max_batch_size_in_bytes) == (
        500, 10 * MiB)  # fmt: skip
    with pytest.raises(OptionError) as caught:
        KinesisWriter(KinesisOptions(stream_name="s"), options=SinkOptions(max_batch_size=1000))
    assert caught.value.option == "maxBatchSize"


def test_an_unknown_option_is_named_with_the_known_ones_and_without_its_value() -> None:
    with pytest.raises(OptionError) as caught:
        create_writer({"streamName": "events", "partitionKeyFeld": "user-secret-value"})
    message = str(caught.value)
    assert "unknown option 'partitionKeyFeld'" in message
    assert "partitionKeyField" in message and "maxBatchSize" in message
    assert "user-secret-value" not in message


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"partition_key_field": "a", "partition_key": "k"}, "partitionKey"),
        ({"partition_key": "k", "partition_key_fn": str}, "partitionKeyFn"),
        ({"partition_key_mode": "field"}, "partitionKeyMode"),
        ({"partition_key_mode": "fixed"}, "partitionKeyMode"),
        ({"partition_key_mode": "random", "partition_key_field": "a"}, "partitionKeyMode"),
        ({"partition_key_mode": "hash", "partition_key_fn": str}, "partitionKeyMode"),
        ({"partition_key": "k" * 257}, "partitionKey"),
        ({"partition_key_field": " , "}, "partitionKeyField"),
        ({"partition_key_fn": "not callable"}, "partitionKeyFn"),
        ({"endpoint_url": "localhost:4567"}, "endpointUrl"),
    ],
)
def test_contradicting_or_invalid_key_options_are_refused(
    kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(OptionError) as caught:
        KinesisOptions(stream_name="events", **kwargs)
    assert caught.value.option == named


def test_secrets_are_masked_in_repr_and_never_shown_by_option_errors() -> None:
    options = KinesisOptions(
        stream_name="events",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
    )
    writer = KinesisWriter(options)
    for text in (repr(options), str(options), repr(writer), repr(writer._settings)):
        for secret in (KEY_ID, SECRET, TOKEN):
            assert secret not in text
    assert "aws_secret_access_key='***'" in repr(options)
    for kwargs in (
        {"aws_access_key_id": KEY_ID},
        {"aws_secret_access_key": SECRET},
        {"aws_session_token": TOKEN},
    ):
        with pytest.raises(OptionError) as caught:
            KinesisOptions(stream_name="events", **kwargs)
        for secret in (KEY_ID, SECRET, TOKEN):
            assert secret not in str(caught.value)


# ---------------------------------------------------------------------------- records


def test_rows_become_json_with_dates_decimals_binary_and_nested_rows() -> None:
    writer, _ = fake_writer(partition_key_field="id")
    row = Row(
        id=7,
        day=datetime.date(2024, 2, 29),
        at=datetime.datetime(2024, 2, 29, 12, 30, 0, 123000),
        price=decimal.Decimal("12.50"),
        blob=b"\x00\xff",
        tags=["a", "b"],
        nested=Row(x=1, y=None),
        counts={1: "one"},
    )
    entry = writer.convert(row)
    assert entry.data == (
        b'{"id":7,"day":"2024-02-29","at":"2024-02-29T12:30:00.123000","price":12.50,'
        b'"blob":"AP8=","tags":["a","b"],"nested":{"x":1,"y":null},"counts":{"1":"one"}}'
    )
    assert entry.partition_key == "7"
    assert writer.convert({"id": 7, "day": datetime.date(2024, 2, 29)}).data == (
        b'{"id":7,"day":"2024-02-29"}'
    )


def test_a_spark_row_is_taken_without_importing_spark_in_the_sink() -> None:
    spark_types = pytest.importorskip("pyspark.sql.types")
    writer, _ = fake_writer(partition_key_field="name")
    entry = writer.convert(spark_types.Row(name="ada", inner=spark_types.Row(n=1)))
    assert orjson.loads(entry.data) == {"name": "ada", "inner": {"n": 1}}
    assert entry.partition_key == "ada"
    check = "import sys, asyncsink.sinks.kinesis; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)


def test_partition_keys_follow_the_mode() -> None:
    row = {"country": "FR", "city": "Paris", "n": 3}
    by_fields, _ = fake_writer(partition_key_field="country,city,n")
    assert by_fields.convert(row).partition_key == "FR|Paris|3"
    fixed, _ = fake_writer(partition_key="all")
    assert fixed.convert(row).partition_key == "all"
    by_fn, _ = fake_writer(partition_key_fn=lambda r: r["city"].upper())
    assert by_fn.convert(row).partition_key == "PARIS"
    random_keys, _ = fake_writer(partition_key_mode="random")
    assert len(random_keys.convert(row).partition_key) == 32
    hashed, _ = fake_writer()
    assert hashed.kinesis.resolved_partition_key_mode == "hash"
    first, again = hashed.convert(row), hashed.convert(dict(row))
    assert first.partition_key == again.partition_key, "equal payloads get equal keys"
    assert hashed.convert({**row, "n": 4}).partition_key != first.partition_key


def test_payload_field_sends_bytes_as_they_are_and_text_as_utf8() -> None:
    writer, _ = fake_writer(payload_field="body", partition_key="k")
    assert writer.convert({"body": b"\x00raw"}).data == b"\x00raw"
    assert writer.convert({"body": "héllo"}).data == "héllo".encode()
    assert writer.entry_size(writer.convert({"body": "héllo"})) == len("héllo".encode()) + 1
    with pytest.raises(TypeError, match="payload field 'body' holds int"):
        writer.convert({"body": 5})


async def test_random_keys_spread_equal_rows_and_come_back_the_same_on_a_retry(
    tmp_path: Path,
) -> None:
    """A retried task converts its rows another way (one at a time while it recovers, or
    after a bad record in a run): each record keeps its key, from its position."""
    rows = [{"v": "same"} for _ in range(200)]
    rows[57] = {"v": object()}  # a bad record: the run is converted again row by row

    async def keys(one_at_a_time: bool) -> list[tuple[bytes, str]]:
        options = SinkOptions(dead_letter=str(tmp_path / f"dead-{one_at_a_time}.jsonl"))
        writer, client = fake_writer(partition_key_mode="random", options=options)
        async with writer:
            if one_at_a_time:
                for row in rows:
                    await writer.write(row)
            else:
                await writer.write_all(rows)
        return sorted((r["PartitionKey"], r["Data"]) for r in client.records)

    first, again = await keys(False), await keys(True)
    assert len(first) == 199 and first == again
    assert len({key for key, _ in first}) == 199, "equal payloads get distinct keys"
    shards = Counter(hash_key(KinesisEntry(data, key)) * 4 >> 128 for key, data in first)
    assert len(shards) == 4 and min(shards.values()) >= 30, "spread over four shards"


async def test_rows_that_cannot_become_records_are_bad_records_naming_position_and_field() -> None:
    cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        ({"partition_key_field": "user"}, {"other": 1}, "partition key field 'user' is missing"),
        ({"partition_key_field": "user"}, {"user": None}, "partition key field 'user' is null"),
        ({"partition_key": "k"}, {"when": object()}, "field 'when': cannot encode"),
        ({"partition_key": "k"}, {"d": decimal.Decimal("NaN")}, "field 'd'"),
        ({"payload_field": "body", "partition_key": "k"}, {"body": None}, "'body' is null"),
        ({"partition_key_fn": lambda r: r.get("a", "ok")}, {"a": ""}, "key has 0 characters"),
        ({"partition_key_field": "k"}, {"k": "x" * 257}, "partition key has 257 characters"),
        (
            {"partition_key": "k", "explicit_hash_key_field": "h"},
            {"h": 2**128},
            "outside [0, 2^128)",
        ),
        ({"partition_key": "k", "explicit_hash_key_field": "h"}, {"h": "12a"}, "'h' holds '12a'"),
    ]
    for kinesis, bad, reason in cases:
        writer, client = fake_writer(**kinesis)
        good = {name: "v" for name in ("user", "body", "k", "h")} | {"h": "5"}
        with pytest.raises(BadRecordError) as caught:
            await deliver(writer, [good, good, bad])
        assert caught.value.position == 2
        assert reason in caught.value.reason, (reason, caught.value.reason)
    letters: list[DeadLetter] = []
    writer, client = fake_writer(
        partition_key_field="user", options=SinkOptions(dead_letter=letters.append)
    )
    await deliver(writer, [{"user": "a"}, {"nobody": 1}, {"user": "c"}])
    assert [letter.position for letter in letters] == [1]
    assert orjson.loads(letters[0].record) == {"nobody": 1}
    assert [r["PartitionKey"] for r in client.records] == ["a", "c"]
    assert writer.statistics().dead_lettered == 1


async def test_explicit_hash_keys_and_stream_arns_reach_the_request() -> None:
    arn = "arn:aws:kinesis:eu-central-1:123456789012:stream/events"
    writer, client = fake_writer(
        stream_name=None, stream_arn=arn, partition_key="k", explicit_hash_key_field="h"
    )
    assert writer.kinesis.effective_region == "eu-central-1"
    await deliver(writer, [{"h": 0}, {"h": str(2**128 - 1)}, {"h": decimal.Decimal(42)}])
    (request,) = client.requests
    assert request["StreamARN"] == arn and "StreamName" not in request
    assert [r["ExplicitHashKey"] for r in request["Records"]] == ["0", str(2**128 - 1), "42"]


async def test_an_oversized_record_is_a_bad_record_or_a_dead_letter() -> None:
    big = {"body": b"x" * (MiB - 1)}
    writer, client = fake_writer(payload_field="body", partition_key="kk")
    with pytest.raises(BadRecordError) as caught:
        await deliver(writer, [{"body": b"ok"}, big])
    assert caught.value.position == 1
    assert f"{MiB + 1} bytes exceeds maxRecordSizeInBytes ({MiB})" in caught.value.reason
    letters: list[DeadLetter] = []
    writer, client = fake_writer(
        payload_field="body", partition_key="kk", options=SinkOptions(dead_letter=letters.append)
    )
    await deliver(writer, [{"body": b"a"}, big, {"body": b"b"}])
    assert [(letter.position, len(letter.record)) for letter in letters] == [(1, MiB - 1)]
    assert [r["Data"] for r in client.records] == [b"a", b"b"]
    assert writer.statistics().dead_lettered == 1


# ---------------------------------------------------------------------------- errors


def client_error(code: str, status: int, message: str = "details") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutRecords")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (client_error("ProvisionedThroughputExceededException", 400), ThrottledError),
        (client_error("ThrottlingException", 400), ThrottledError),
        (client_error("LimitExceededException", 400), ThrottledError),
        (client_error("KMSThrottlingException", 400), ThrottledError),
        (client_error("SomethingNew", 429), ThrottledError),
        (client_error("InternalFailure", 500), RetryableError),
        (client_error("ServiceUnavailable", 503), RetryableError),
        (client_error("SomethingNew", 502), RetryableError),
        (client_error("ResourceNotFoundException", 400), FatalError),
        (client_error("AccessDeniedException", 400), FatalError),
        (client_error("KMSAccessDeniedException", 400), FatalError),
        (client_error("KMSDisabledException", 400), FatalError),
        (client_error("KMSInvalidStateException", 400), FatalError),
        (client_error("KMSNotFoundException", 400), FatalError),
        (client_error("KMSOptInRequired", 400), FatalError),
        (client_error("ValidationException", 400), FatalError),
        (client_error("InvalidArgumentException", 400), FatalError),
        (client_error("UnrecognizedClientException", 400), FatalError),
        (client_error("413", 413, ""), FatalError),
        (client_error("SomethingNew", 400), FatalError),
    ],
)
def test_whole_request_errors_are_sorted_and_name_the_stream_and_code(
    exc: ClientError, kind: type[Exception]
) -> None:
    error = translate_error(exc, "events")
    assert type(error) is kind
    code = exc.response["Error"]["Code"]
    assert "'events'" in str(error) and code in str(error)
    assert error is not None and error.status == code


def test_transport_errors_retry_and_bugs_are_left_alone() -> None:
    for exc in (
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
        ConnectionResetError(),
    ):
        assert type(translate_error(exc, "events")) is RetryableError, exc
    assert translate_error(ZeroDivisionError(), "events") is None
    assert "maxBatchSizeInBytes" in str(translate_error(client_error("413", 413, ""), "events"))


async def test_unexpected_record_error_codes_are_retried_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class OddCodes(FakeKinesis):
        async def put_records(self, **params: Any) -> dict[str, Any]:
            answer = await super().put_records(**params)
            if len(self.requests) == 1:
                answer["FailedRecordCount"] = 1
                answer["Records"][1] = {"ErrorCode": "BrandNewError", "ErrorMessage": "hm"}
            return answer

    client = OddCodes()
    writer = KinesisWriter(
        KinesisOptions(stream_name="events", partition_key_field="i"),
        options=SinkOptions(initial_backoff_ms=1, max_backoff_ms=5),
        client=client,
    )
    with caplog.at_level(logging.WARNING, logger="asyncsink"):
        await deliver(writer, [{"i": i} for i in range(3)])
    assert [[r["PartitionKey"] for r in q["Records"]] for q in client.requests] == [
        ["0", "1", "2"], ["1"]]  # fmt: skip
    assert "BrandNewError: hm" in caplog.text
    stats = writer.statistics()
    assert (stats.delivered, stats.retried, stats.throttled) == (3, 1, 0)


# ---------------------------------------------------------------------------- shared clients


async def test_writers_of_one_loop_share_a_client_until_close_clients() -> None:
    def options(**extra: Any) -> KinesisOptions:
        return KinesisOptions(
            stream_name="s",
            region=REGION,
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            **extra,
        )

    first, second = KinesisWriter(options()), KinesisWriter(options(partition_key="k"))
    other = KinesisWriter(options(aws_session_token=TOKEN))
    async with first, second, other:
        assert first.client is second.client
        assert other.client is not first.client, "other credentials, other client"
        assert open_client_count() == 2
    await close_clients()
    assert open_client_count() == 0
    assert first.client._endpoint.http_session._sessions is None, "closed"
    async with KinesisWriter(options()) as third:
        assert third.client is not first.client
    await close_clients()


def test_each_event_loop_gets_its_own_client_closed_when_the_loop_ends() -> None:
    settings = {"stream_name": "s", "region": REGION, "endpoint_url": "http://127.0.0.1:9",
                "aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}  # fmt: skip

    async def open_writer() -> Any:
        async with KinesisWriter(KinesisOptions(**settings)) as writer:
            assert open_client_count() == 1
            return writer.client

    first = asyncio.run(open_writer())
    assert open_client_count() == 0, "asyncio.run closed the loop's client"
    assert first._endpoint.http_session._sessions is None
    second = asyncio.run(open_writer())
    assert second is not first


def test_clients_of_a_loop_closed_by_hand_are_released_by_the_next_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def open_writer() -> Any:
        options = KinesisOptions(
            stream_name="s", region=REGION, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET
        )
        async with KinesisWriter(options) as writer:
            return writer.client

    loop = asyncio.new_event_loop()
    stale = loop.run_until_complete(open_writer())
    loop.close()
    assert open_client_count() == 1
    with caplog.at_level(logging.WARNING, logger="asyncsink"):
        fresh = asyncio.run(open_writer())
    assert fresh is not stale
    assert stale._endpoint.http_session._sessions is None
    assert open_client_count() == 0
    assert "closed without close_clients()" in caplog.text


# ---------------------------------------------------------------------------- kinesalite


@pytest.fixture
async def admin(kinesalite_endpoint: str) -> AsyncIterator[Any]:
    """A client of its own (with botocore retries) to create and read streams."""
    async with get_session().create_client(
        "kinesis",
        region_name=REGION,
        endpoint_url=kinesalite_endpoint,
        aws_access_key_id="admin",
        aws_secret_access_key="admin",
        config=AioConfig(retries={"mode": "standard", "total_max_attempts": 5}),
    ) as client:
        yield client


StreamFactory = Callable[[int], Awaitable[str]]


@pytest.fixture
async def new_stream(admin: Any) -> AsyncIterator[StreamFactory]:
    """Creates ACTIVE streams (deleted afterwards; kinesalite allows 10 shards at once)."""
    names: list[str] = []

    async def create(shards: int) -> str:
        name = f"test-{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + 10
        while True:
            try:
                await admin.create_stream(StreamName=name, ShardCount=shards)
                break
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "LimitExceededException":
                    raise
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        names.append(name)
        while True:
            summary = await admin.describe_stream_summary(StreamName=name)
            if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                return name
            await asyncio.sleep(0.02)

    yield create
    for name in names:
        await admin.delete_stream(StreamName=name)


@pytest.fixture
def endpoint_options(kinesalite_endpoint: str) -> dict[str, Any]:
    return {"region": REGION, "endpoint_url": kinesalite_endpoint,
            "aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}  # fmt: skip


async def read_stream(admin: Any, name: str) -> list[tuple[str, str, bytes]]:
    """Every record of every shard: (shard id, partition key, data)."""
    found: list[tuple[str, str, bytes]] = []
    shards = (await admin.list_shards(StreamName=name))["Shards"]
    for shard in shards:
        iterator = (
            await admin.get_shard_iterator(
                StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )
        )["ShardIterator"]
        while iterator:
            page = await admin.get_records(ShardIterator=iterator, Limit=10_000)
            found.extend((shard["ShardId"], r["PartitionKey"], r["Data"]) for r in page["Records"])
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
    return found


class FlakyRecords:
    """A real client whose first ``rounds`` requests see a fraction of their records fail
    with the given codes; the other records of those requests really reach the stream."""

    def __init__(self, client: Any, codes: list[str], fraction: float, rounds: int) -> None:
        self.client = client
        self.codes = codes
        self.fraction = fraction
        self.rounds = rounds
        self.calls = 0
        self.injected = 0
        self.sizes: list[tuple[int, int]] = []
        self.windows: list[int] = []
        self.writer: KinesisWriter | None = None
        self._rng = random.Random(7)

    async def put_records(self, *, Records: list[dict[str, Any]], **params: Any) -> Any:  # noqa: N803
        self.calls += 1
        self.sizes.append(
            (len(Records), sum(len(r["Data"]) + len(r["PartitionKey"].encode()) for r in Records))
        )
        if self.writer is not None:
            self.windows.append(self.writer.statistics().window)
        if self.calls > self.rounds:
            return await self.client.put_records(Records=Records, **params)
        failing = {i for i in range(len(Records)) if self._rng.random() < self.fraction}
        passing = [record for i, record in enumerate(Records) if i not in failing]
        real = await self.client.put_records(Records=passing, **params)
        results = iter(real["Records"])
        merged = []
        for i in range(len(Records)):
            if i in failing:
                code = self.codes[i % len(self.codes)]
                merged.append({"ErrorCode": code, "ErrorMessage": "injected"})
            else:
                merged.append(next(results))
        self.injected += len(failing)
        return {"FailedRecordCount": len(failing) + real["FailedRecordCount"], "Records": merged}


async def shared_client(options: dict[str, Any]) -> Any:
    async with KinesisWriter(KinesisOptions(stream_name="unused", **options)) as writer:
        return writer.client


@pytest.mark.emulator
async def test_rows_are_read_back_from_every_shard_exactly_once(
    admin: Any, new_stream: StreamFactory, endpoint_options: dict[str, Any]
) -> None:
    name = await new_stream(4)
    rows = [
        {"id": i, "name": f"user-{i}", "day": datetime.date(2024, 1, 1 + i % 28),
         "amount": decimal.Decimal(f"{i}.{i % 100:02d}")}
        for i in range(5000)
    ]  # fmt: skip
    writer = create_writer({"streamName": name, "partitionKeyField": "id", **endpoint_options})
    started = time.monotonic()
    await deliver(writer, rows)
    elapsed = time.monotonic() - started
    found = await read_stream(admin, name)
    assert Counter(int(key) for _, key, _ in found) == Counter(range(5000)), "each exactly once"
    for _, key, data in found:
        i = int(key)
        expected_day = f"2024-01-{1 + i % 28:02d}"
        expected = {"id": i, "name": f"user-{i}", "day": expected_day, "amount": i + i % 100 / 100}
        assert orjson.loads(data) == expected
        assert data.endswith(f'"amount":{i}.{i % 100:02d}}}'.encode()), "exact decimal digits"
    shards = Counter(shard for shard, _, _ in found)
    assert len(shards) == 4 and min(shards.values()) > 900, shards
    stats = writer.statistics()
    assert (stats.written, stats.delivered, stats.failed, stats.retried) == (5000, 5000, 0, 0)
    assert stats.requests == 10
    assert elapsed < 30


@pytest.mark.emulator
async def test_failed_records_are_retried_until_each_lands_once_and_throttling_shrinks_the_window(
    admin: Any, new_stream: StreamFactory, endpoint_options: dict[str, Any]
) -> None:
    name = await new_stream(2)
    flaky = FlakyRecords(
        await shared_client(endpoint_options),
        ["ProvisionedThroughputExceededException", "InternalFailure"],
        fraction=0.3,
        rounds=3,
    )
    writer = KinesisWriter(
        KinesisOptions(stream_name=name, partition_key_field="id"),
        options=SinkOptions(initial_backoff_ms=5, max_backoff_ms=50, max_in_flight_requests=2),
        client=flaky,
    )
    flaky.writer = writer
    ceiling = 500 * 2
    await deliver(writer, [{"id": i} for i in range(2000)])
    found = await read_stream(admin, name)
    assert Counter(int(key) for _, key, _ in found) == Counter(range(2000))
    assert flaky.injected > 300
    stats = writer.statistics()
    assert stats.retried == flaky.injected
    assert stats.throttled >= 1
    assert stats.delivered == 2000 and stats.failed == 0
    assert min(flaky.windows) < ceiling, "a throttled response halves the in-flight window"
    assert flaky.windows[0] == ceiling


@pytest.mark.emulator
async def test_an_open_writer_survives_close_clients_with_a_fresh_client(
    admin: Any, new_stream: StreamFactory, endpoint_options: dict[str, Any]
) -> None:
    name = await new_stream(1)
    writer = KinesisWriter(KinesisOptions(stream_name=name, partition_key="k", **endpoint_options))
    async with writer:
        await writer.write_all([{"i": 0}, {"i": 1}])
        await writer.flush()
        before = writer.client
        await close_clients()
        await writer.write_all([{"i": 2}])
    assert writer.client is not before
    assert before._endpoint.http_session._sessions is None
    found = [orjson.loads(data)["i"] for _, _, data in await read_stream(admin, name)]
    assert found == [0, 1, 2]
    assert writer.statistics().requests_failed == 0


@pytest.mark.emulator
async def test_a_missing_stream_fails_fast_naming_the_stream_without_retries(
    endpoint_options: dict[str, Any],
) -> None:
    flaky = FlakyRecords(await shared_client(endpoint_options), ["x"], 0.0, rounds=0)
    writer = KinesisWriter(
        KinesisOptions(stream_name="no-such-stream", partition_key="k"),
        options=SinkOptions(max_retries=5),
        client=flaky,
    )
    started = time.monotonic()
    with pytest.raises(FatalError) as caught:
        await deliver(writer, [{"i": i} for i in range(10)])
    assert time.monotonic() - started < 5
    assert "'no-such-stream'" in str(caught.value)
    assert "ResourceNotFoundException" in str(caught.value)
    assert isinstance(caught.value.__cause__, ClientError)
    assert flaky.calls == 1
    assert writer.statistics().retried == 0


@pytest.mark.emulator
async def test_a_request_the_service_finds_malformed_fails_fast(
    new_stream: StreamFactory, endpoint_options: dict[str, Any]
) -> None:
    name = await new_stream(1)
    flaky = FlakyRecords(await shared_client(endpoint_options), ["x"], 0.0, rounds=0)
    writer = KinesisWriter(
        KinesisOptions(stream_name=name, payload_field="body", partition_key="k",
                       max_record_size_in_bytes=2 * MiB),
        client=flaky,
    )  # fmt: skip
    with pytest.raises(FatalError) as caught:
        await deliver(writer, [{"body": b"x" * (MiB + 1)}])
    assert "ValidationException" in str(caught.value) and repr(name) in str(caught.value)
    assert flaky.calls == 1


@pytest.mark.emulator
async def test_a_request_larger_than_the_endpoint_takes_fails_fast_with_a_hint(
    new_stream: StreamFactory, endpoint_options: dict[str, Any]
) -> None:
    name = await new_stream(1)
    writer = create_writer(
        {"streamName": name, "payloadField": "body", "partitionKey": "k",
         "maxBatchSizeInBytes": "10mb", "maxTimeInBufferMs": "10s", **endpoint_options}
    )  # fmt: skip
    with pytest.raises(FatalError) as caught:
        await deliver(writer, [{"body": bytes(1_000_000)} for _ in range(8)])
    message = str(caught.value)
    assert "413" in message and "maxBatchSizeInBytes" in message and repr(name) in message
    assert writer.statistics().requests == 1


@pytest.mark.emulator
async def test_batches_stay_within_500_records_and_5_mib(
    admin: Any, new_stream: StreamFactory, endpoint_options: dict[str, Any]
) -> None:
    name = await new_stream(1)
    recorder = FlakyRecords(await shared_client(endpoint_options), ["x"], 0.0, rounds=0)
    writer = KinesisWriter(
        KinesisOptions(stream_name=name, payload_field="body", partition_key_field="id"),
        options=SinkOptions(max_time_in_buffer_ms=10_000),
        client=recorder,
    )
    small = [{"id": f"s{i}", "body": b"x" * 10} for i in range(1100)]
    large = [{"id": f"l{i}", "body": bytes(300_000)} for i in range(20)]
    await deliver(writer, small + large)
    assert sum(count for count, _ in recorder.sizes) == 1120
    assert max(count for count, _ in recorder.sizes) == 500
    assert max(size for _, size in recorder.sizes) <= 5 * MiB
    assert any(count < 500 and size > 5 * MiB - 300_003 for count, size in recorder.sizes), (
        "a request was cut by bytes"
    )
    found = await read_stream(admin, name)
    assert len(found) == 1120 and {key for _, key, _ in found} == {
        row["id"] for row in small + large}  # fmt: skip


@pytest.mark.emulator
async def test_oversized_records_are_dead_lettered_and_the_rest_delivered(
    admin: Any, new_stream: StreamFactory, endpoint_options: dict[str, Any], tmp_path: Any
) -> None:
    name = await new_stream(1)
    dead = tmp_path / "dead.jsonl"
    writer = create_writer(
        {"streamName": name, "payloadField": "body", "partitionKey": "k",
         "deadLetter": str(dead), **endpoint_options}
    )  # fmt: skip
    await deliver(writer, [{"body": b"a"}, {"body": b"\xff" * MiB}, {"body": b"c"}])
    assert [data for _, _, data in await read_stream(admin, name)] == [b"a", b"c"]
    (letter,) = [orjson.loads(line) for line in dead.read_bytes().splitlines()]
    assert letter["position"] == 1 and "exceeds maxRecordSizeInBytes" in letter["reason"]
    assert base64.b64decode(letter["record_base64"]) == b"\xff" * MiB


@pytest.mark.emulator
async def test_secrets_never_reach_logs_or_errors(
    endpoint_options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    options = KinesisOptions(
        stream_name="missing-stream", partition_key="k", aws_session_token=TOKEN, **endpoint_options
    )
    writer = KinesisWriter(options)
    with caplog.at_level(logging.DEBUG, logger="asyncsink"), pytest.raises(FatalError) as caught:
        await deliver(writer, [{"a": 1}])
    shown = " ".join(
        (caplog.text, str(caught.value), repr(caught.value), str(caught.value.__cause__),
         repr(options), repr(writer))
    )  # fmt: skip
    assert "missing-stream" in shown
    assert "writer failed" in caplog.text
    for secret in (KEY_ID, SECRET, TOKEN):
        assert secret not in shown


def test_secrets_in_vendor_messages_are_scrubbed() -> None:
    writer = KinesisWriter(
        KinesisOptions(stream_name="s", aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    )
    error = writer._translate(client_error("UnrecognizedClientException", 400, f"bad {KEY_ID}"))
    assert error is not None and KEY_ID not in str(error) and "***" in str(error)


async def test_dropped_connections_are_retried_by_the_writer_alone_then_fail_the_barrier() -> None:
    connections = 0

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        writer = KinesisWriter(
            KinesisOptions(stream_name="s", partition_key="k", region=REGION,
                           endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id=KEY_ID,
                           aws_secret_access_key=SECRET),
            options=SinkOptions(max_retries=2, initial_backoff_ms=1, max_backoff_ms=5),
        )  # fmt: skip
        with pytest.raises(DeliveryError) as caught:
            await deliver(writer, [{"a": 1}])
    finally:
        server.close()
        await server.wait_closed()
    assert isinstance(caught.value.sample, RetryableError)
    assert f"127.0.0.1:{port}" in str(caught.value.sample)
    stats = writer.statistics()
    assert (stats.requests, stats.requests_failed, stats.failed) == (3, 3, 1)
    assert connections == 3, "botocore does not retry behind the writer's back"


async def test_a_refused_connection_names_the_stream_and_its_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    writer = KinesisWriter(
        KinesisOptions(stream_name="orders", partition_key="k", region=REGION,
                       endpoint_url=endpoint, aws_access_key_id=KEY_ID,
                       aws_secret_access_key=SECRET),
    )  # fmt: skip
    assert writer.describe_destination() == f"Kinesis stream 'orders' at {endpoint}"
    with caplog.at_level(logging.WARNING), pytest.raises(AsyncSinkError) as caught:
        await deliver(writer, [{"a": 1}])
    assert f"Kinesis stream 'orders' at {endpoint} refused the connection" in str(caught.value)
    assert f"Kinesis stream 'orders' at {endpoint}" in caplog.text
    no_endpoint = KinesisWriter(KinesisOptions(stream_name="orders", region=REGION))
    assert no_endpoint.describe_destination() == f"Kinesis stream 'orders' at {REGION}"


def test_the_package_exports_what_it_names() -> None:
    assert sorted(kinesis_package.__all__) == sorted(
        ["KinesisEntry", "KinesisOptions", "KinesisWriter", "close_clients", "create_writer",
         "sink_options_for_kinesis", "translate_error"]
    )  # fmt: skip
    for name in kinesis_package.__all__:
        assert hasattr(kinesis_package, name)
    assert KinesisEntry(b"ab", "ké").size == 2 + 3


def test_the_reason_of_failed_records_counts_their_error_codes() -> None:
    from asyncsink.sinks.kinesis.answers import read_put_records

    stored = {"SequenceNumber": "1", "ShardId": "shardId-0"}
    busy = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate"}
    internal = {"ErrorCode": "InternalFailure", "ErrorMessage": "oops"}
    answer = {"FailedRecordCount": 3, "Records": [busy, stored, internal, busy]}
    result, unexpected = read_put_records(answer, 4, "s")
    assert result is not None and list(result.retry) == [0, 2, 3] and result.throttled
    assert result.reason == "ProvisionedThroughputExceededException (2), InternalFailure (1)"
    assert unexpected == []


def test_a_connection_dropped_after_the_request_left_may_have_stored_it() -> None:
    from botocore.exceptions import ConnectTimeoutError

    from asyncsink.sinks.kinesis.errors import never_connected

    url = "http://127.0.0.1:1"
    reset = aiohttp.ClientOSError(104, "Connection reset by peer")  # reading the answer
    refused = ConnectionRefusedError(111, "Connection refused")
    assert not never_connected(EndpointConnectionError(endpoint_url=url, error=reset))
    assert not never_connected(ConnectionClosedError(endpoint_url=url))
    assert never_connected(EndpointConnectionError(endpoint_url=url, error=refused))
    assert never_connected(ConnectTimeoutError(endpoint_url=url))
    writer = KinesisWriter(KinesisOptions(stream_name="s", partition_key="k", region="us-east-1"))
    for cause, landed in ((reset, True), (refused, False)):
        error = translate_error(EndpointConnectionError(endpoint_url=url, error=cause), "s")
        assert error is not None
        error.__cause__ = EndpointConnectionError(endpoint_url=url, error=cause)
        assert writer.may_have_landed(error) is landed


# ---------------------------------------------------------------------------- ordered


class SlowFirstKinesis(FakeKinesis):
    """Fails each record the first time it is sent, so every record is retried."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[bytes] = set()
        self.stored: list[tuple[str, bytes]] = []

    async def put_records(self, **params: Any) -> dict[str, Any]:
        self.requests.append(params)
        out = []
        for i, record in enumerate(params["Records"]):
            if record["Data"] in self.seen:
                self.stored.append((record["PartitionKey"], record["Data"]))
                out.append({"SequenceNumber": str(i), "ShardId": "shardId-000000000000"})
            else:
                self.seen.add(record["Data"])
                out.append({"ErrorCode": "ProvisionedThroughputExceededException",
                            "ErrorMessage": "slow down"})  # fmt: skip
        await asyncio.sleep(random.random() / 100)
        return {"FailedRecordCount": sum("ErrorCode" in r for r in out), "Records": out}


async def test_ordered_delivers_each_partition_keys_records_in_order() -> None:
    client = SlowFirstKinesis()
    options = SinkOptions(max_batch_size=7, initial_backoff_ms=1, max_backoff_ms=2,
                          max_time_in_buffer_ms=1, max_retries=20)  # fmt: skip
    kinesis = KinesisOptions(stream_name="events", partition_key_field="user", ordered=True)
    writer = KinesisWriter(kinesis, options=options, client=client)
    rows = [{"user": f"u{i % 3}", "n": i} for i in range(60)]
    async with writer:
        await writer.write_all(rows)
    for user in ("u0", "u1", "u2"):
        ns = [orjson.loads(data)["n"] for key, data in client.stored if key == user]
        assert ns == sorted(ns) and len(ns) == 20
    assert all(len({r["PartitionKey"] for r in req["Records"]}) == len(req["Records"])
               for req in client.requests)  # fmt: skip


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"ordered": True}, "ordered"),
        ({"ordered": True, "partition_key_mode": "random"}, "ordered"),
    ],
)
def test_ordered_needs_a_partition_key_to_order_by(options: dict[str, Any], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        KinesisOptions(stream_name="events", **options)


def test_ordered_and_ordering_key_together_are_refused() -> None:
    with pytest.raises(OptionError, match="orderingKey"):
        create_writer({"streamName": "e", "partitionKeyField": "u", "ordered": "true",
                       "orderingKey": "u"})  # fmt: skip
