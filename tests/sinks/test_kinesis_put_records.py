"""The PutRecords body the Kinesis sink builds is the one botocore would build, it is what
botocore signs and sends, and an answer reads as botocore would parse it: the request is
caught as it leaves a real aiobotocore client (``before-send``) and answered there, and
the payload the signature hashed is recorded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import botocore.auth
import botocore.session
import orjson
import pytest
from aiobotocore.awsrequest import AioAWSResponse
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from asyncsink.sinks.kinesis.converter import KinesisEntry
from asyncsink.sinks.kinesis.put_records import (
    EncodedRecords,
    install,
    put_records,
    put_records_body,
)

pytestmark = pytest.mark.anyio

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/events"
ENTRIES = [
    KinesisEntry(bytes(range(256)), "every byte"),
    KinesisEntry(b'{"id": 1, "name": "\xc3\xa9t\xc3\xa9"}', "cl\u00e9 \u2603"),
    KinesisEntry(b"", "empty data", explicit_hash_key=str(2**128 - 1)),
    KinesisEntry(b"x" * 1000, "k" * 256, explicit_hash_key="0"),
]


@pytest.mark.parametrize("stream", [{"StreamName": "events"}, {"StreamARN": ARN}])
def test_the_body_is_the_json_botocore_serializes(stream: dict[str, str]) -> None:
    client = botocore.session.get_session().create_client(
        "kinesis", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    operation = client.meta.service_model.operation_model("PutRecords")
    params = {"Records": [entry.to_request() for entry in ENTRIES], **stream}
    theirs = client._serializer.serialize_to_request(params, operation)["body"]
    assert json.loads(put_records_body(ENTRIES, stream)) == json.loads(theirs)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def read(self) -> bytes:
        return self._body


class Caught:
    """The bodies that left the client and the ones its signatures hashed."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.signed: list[bytes] = []
        self.reply: bytes | None = None  # the answer's body; by default every record stored

    def answer(self, request: Any, **_: Any) -> AioAWSResponse:
        body = request.body
        self.sent.append(body if isinstance(body, bytes) else body.read())
        content = self.reply
        if content is None:
            count = len(orjson.loads(self.sent[-1])["Records"])
            records = [{"SequenceNumber": str(i), "ShardId": "shardId-000000000000"}
                       for i in range(count)]  # fmt: skip
            content = orjson.dumps({"FailedRecordCount": 0, "Records": records})
        headers = {"x-amzn-RequestId": "req-1", "Content-Type": "application/x-amz-json-1.1"}
        return AioAWSResponse(request.url, 200, headers, _Raw(content))


@pytest.fixture
async def caught(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Any, Caught]]:
    seen = Caught()
    payload = botocore.auth.SigV4Auth.payload

    def recorded(self: Any, request: Any) -> str:
        seen.signed.append(request.body)
        return payload(self, request)  # type: ignore[no-any-return]

    monkeypatch.setattr(botocore.auth.SigV4Auth, "payload", recorded)
    async with get_session().create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",  # never reached: answered before it is sent
        aws_access_key_id="AKIATESTTESTTESTTEST",
        aws_secret_access_key="not-a-secret",
        config=AioConfig(parameter_validation=False),  # as the sink's clients are
    ) as client:
        client.meta.events.register("before-send.kinesis.PutRecords", seen.answer)
        yield client, seen


async def test_the_body_built_here_is_what_is_signed_and_sent(
    caught: tuple[Any, Caught],
) -> None:
    client, seen = caught
    install(client)
    install(client)  # once is enough; twice changes nothing
    answer = await put_records(client, ENTRIES, {"StreamName": "events"})
    expected = put_records_body(ENTRIES, {"StreamName": "events"})
    assert seen.sent == [expected]
    assert seen.signed == [expected]
    assert len(answer["Records"]) == len(ENTRIES)


async def test_a_client_without_the_hooks_sends_the_same_records_serialized_by_botocore(
    caught: tuple[Any, Caught],
) -> None:
    client, seen = caught  # not installed: botocore serializes the records one by one
    await put_records(client, ENTRIES, {"StreamName": "events"})
    expected = put_records_body(ENTRIES, {"StreamName": "events"})
    assert orjson.loads(seen.sent[0]) == orjson.loads(expected)


async def test_a_client_that_validates_parameters_takes_the_same_path(
    caught: tuple[Any, Caught],
) -> None:
    client, seen = caught
    async with get_session().create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIATESTTESTTESTTEST",
        aws_secret_access_key="not-a-secret",
    ) as validating:  # a caller's client, with botocore's defaults
        validating.meta.events.register("before-send.kinesis.PutRecords", seen.answer)
        install(validating)
        await put_records(validating, ENTRIES, {"StreamARN": ARN})
    assert seen.sent == [put_records_body(ENTRIES, {"StreamARN": ARN})]


async def test_a_body_never_put_in_leaves_a_placeholder_kinesis_refuses(
    caught: tuple[Any, Caught],
) -> None:
    client, seen = caught
    install(client)
    client.meta.events.unregister(
        "before-sign.kinesis.PutRecords", unique_id="asyncsink-put-records-body"
    )
    await put_records(client, ENTRIES, {"StreamName": "events"})
    (record,) = orjson.loads(seen.sent[0])["Records"]
    assert record["Data"] == "" and len(record["PartitionKey"]) > 256  # Kinesis: at most 256


def test_encoded_records_read_as_the_members_botocore_takes() -> None:
    records = EncodedRecords(ENTRIES)
    assert len(records) == len(ENTRIES)
    assert list(records) == [entry.to_request() for entry in ENTRIES]
    assert records[1:3] == [entry.to_request() for entry in ENTRIES[1:3]]


async def test_other_calls_of_the_client_keep_their_own_bodies(
    caught: tuple[Any, Caught],
) -> None:
    client, seen = caught
    install(client)
    records = [entry.to_request() for entry in ENTRIES[:2]]
    await client.put_records(Records=records, StreamName="events")
    sent = orjson.loads(seen.sent[0])
    assert [record["PartitionKey"] for record in sent["Records"]] == [
        entry.partition_key for entry in ENTRIES[:2]
    ]


MIXED = {
    "FailedRecordCount": 1,
    "Records": [
        {"SequenceNumber": "4960", "ShardId": "shardId-000000000001"},
        {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"},
    ],
    "EncryptionType": "KMS",
}


async def test_an_answer_reads_as_botocore_parses_it(caught: tuple[Any, Caught]) -> None:
    client, seen = caught
    seen.reply = orjson.dumps(MIXED)
    parsed = await client.put_records(Records=[ENTRIES[0].to_request()], StreamName="events")
    install(client)
    read = await put_records(client, ENTRIES[:2], {"StreamName": "events"})
    assert {key: read[key] for key in MIXED} == MIXED
    assert {key: parsed[key] for key in MIXED} == MIXED
    metadata = {key: read["ResponseMetadata"][key] for key in ("RequestId", "HTTPStatusCode")}
    assert metadata == {"RequestId": "req-1", "HTTPStatusCode": 200}


async def test_an_answer_that_is_not_json_reads_as_botocore_reads_it(
    caught: tuple[Any, Caught],
) -> None:
    client, seen = caught
    seen.reply = b'{"FailedRecordCount": 0, "Records": [{"Sequ'  # cut short on the way
    parsed = await client.put_records(Records=[ENTRIES[0].to_request()], StreamName="events")
    install(client)
    read = await put_records(client, ENTRIES[:1], {"StreamName": "events"})
    # No results either way: the sink's answer check then sends the request again.
    assert "Records" not in read
    assert read.keys() == parsed.keys() == {"ResponseMetadata"}
