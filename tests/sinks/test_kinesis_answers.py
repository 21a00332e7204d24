"""The Kinesis sink trusts no PutRecords answer that does not say, record by record, that
each was stored: missing, short, long and ill-typed answers come from a small server on
127.0.0.1 speaking the Kinesis JSON protocol, through the real aiobotocore client."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from botocore.parsers import ResponseParserError

from asyncsink import DeliveryError, RetryableError, SinkOptions
from asyncsink.sinks.kinesis import KinesisOptions, KinesisWriter, close_clients, translate_error

pytestmark = pytest.mark.anyio

STREAM = "events"
RETRIES = 2
Answer = Callable[[int], Any]


def stored(count: int) -> list[dict[str, str]]:
    return [{"SequenceNumber": f"4960{i:020d}", "ShardId": "shardId-000000000000"}
            for i in range(count)]  # fmt: skip


def good(count: int) -> Any:
    return {"FailedRecordCount": 0, "Records": stored(count)}


class FakeStream:
    """A PutRecords endpoint: answers its first ``bad`` requests with ``answer``, then
    stores every record; ``answer`` gets the number of records sent and returns the body
    (bytes as they are, anything else as JSON)."""

    def __init__(self) -> None:
        self.answer: Answer = good
        self.bad = 10**9
        self.requests: list[list[bytes]] = []
        self.stored: list[bytes] = []

    async def handle(self, request: web.Request) -> web.Response:
        assert request.headers["X-Amz-Target"] == "Kinesis_20131202.PutRecords"
        body = orjson.loads(await request.read())
        assert body["StreamName"] == STREAM
        data = [base64.b64decode(record["Data"]) for record in body["Records"]]
        self.requests.append(data)
        if len(self.requests) <= self.bad:
            reply = self.answer(len(data))
        else:
            reply = good(len(data))
            self.stored.extend(data)
        content = reply if isinstance(reply, bytes) else orjson.dumps(reply)
        return web.Response(body=content, content_type="application/x-amz-json-1.1")


@pytest.fixture
async def stream() -> AsyncIterator[tuple[FakeStream, str]]:
    fake = FakeStream()
    app = web.Application()
    app.router.add_post("/", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        await close_clients()
        await runner.cleanup()


def kinesis_writer(endpoint: str, max_batch_size: int = 500) -> KinesisWriter:
    return KinesisWriter(
        KinesisOptions(stream_name=STREAM, partition_key_field="i", region="us-east-1",
                       endpoint_url=endpoint, aws_access_key_id="AKIATESTKEYID0000001",
                       aws_secret_access_key="s3cr3t/Value+ForTests"),
        options=SinkOptions(max_batch_size=max_batch_size, max_retries=RETRIES,
                            initial_backoff_ms=1, max_backoff_ms=5),
    )  # fmt: skip


async def deliver(writer: KinesisWriter, count: int = 20) -> KinesisWriter:
    async with writer:
        await writer.write_all([{"i": i, "secret": f"row-data-{i}"} for i in range(count)])
    return writer


def with_result(index: int, result: Any, failed: int = 0) -> Answer:
    def answer(count: int) -> Any:
        records: list[Any] = stored(count)
        records[index] = result
        return {"FailedRecordCount": failed, "Records": records}

    return answer


CANNOT_TELL = "cannot tell which records were stored"

UNTRUSTED: dict[str, tuple[Answer, str]] = {
    "errors false": (lambda n: {"errors": False}, "Records is missing"),
    "count only": (lambda n: {"FailedRecordCount": 0}, "Records is missing"),
    "not json": (lambda n: b"{this is not json", "Records is missing"),
    "truncated": (lambda n: orjson.dumps(good(n))[:-30], "Records is missing"),
    "empty body": (lambda n: b"", "Records is missing"),
    "no results": (lambda n: {"FailedRecordCount": 0, "Records": []},
                   "Records holds 0 results"),
    "too few": (lambda n: {"FailedRecordCount": 0, "Records": stored(n - 1)},
                "Records holds 19 results"),
    "too many": (lambda n: {"FailedRecordCount": 0, "Records": stored(n + 1)},
                 "Records holds 21 results"),
    "empty result": (with_result(7, {}), "result 7 has neither a SequenceNumber nor an ErrorCode"),
    "no shard": (with_result(7, {"SequenceNumber": "1"}),
                 "result 7 has a SequenceNumber without a ShardId"),
    "no sequence": (with_result(7, {"ShardId": "shardId-000000000000"}),
                    "result 7 has a ShardId without a SequenceNumber"),
    "empty sequence": (with_result(7, {"SequenceNumber": "", "ShardId": "s"}),
                       "result 7 has an empty SequenceNumber"),
    "numeric sequence": (with_result(7, {"SequenceNumber": 5, "ShardId": "s"}),
                         "result 7 has SequenceNumber of type int, not text"),
    "both": (with_result(7, {"SequenceNumber": "1", "ShardId": "s", "ErrorCode": "X"}, 1),
             "result 7 has both a SequenceNumber and an ErrorCode"),
    "empty code": (with_result(7, {"ErrorCode": ""}, 1), "result 7 has an empty ErrorCode"),
    "numeric code": (with_result(7, {"ErrorCode": 500}, 1),
                     "result 7 has ErrorCode of type int, not text"),
    "null result": (with_result(7, None), "result 7 is of type NoneType, not an object"),
    "no failed count": (lambda n: {"Records": stored(n)}, "FailedRecordCount is missing"),
    "failed count as text": (lambda n: {"FailedRecordCount": "0", "Records": stored(n)},
                             "FailedRecordCount is of type str, not a number"),
    "failed count as bool": (lambda n: {"FailedRecordCount": False, "Records": stored(n)},
                             "FailedRecordCount is of type bool, not a number"),
    "hidden failure": (with_result(3, {"ErrorCode": "InternalFailure"}, 0),
                       "FailedRecordCount is 0 but 1 results carry an ErrorCode"),
    "invented failure": (lambda n: {"FailedRecordCount": 2, "Records": stored(n)},
                         "FailedRecordCount is 2 but 0 results carry an ErrorCode"),
    "records as text": (lambda n: {"FailedRecordCount": 0, "Records": "all stored"},
                        "Records is of type str, not a list"),
    "records of numbers": (lambda n: {"FailedRecordCount": 0, "Records": list(range(n))},
                           "result 0 is of type int, not an object"),
    "records as object": (lambda n: {"FailedRecordCount": 0, "Records": {"a": 1}},
                          "Records is of type dict, not a list"),
    "records of lists": (lambda n: {"FailedRecordCount": 0, "Records": [[1]] * n},
                         "result 0 is of type list, not an object"),
}  # fmt: skip

# Answers that are not a JSON object: the sink leaves them to botocore's parser, which
# cannot take them.
UNPARSEABLE: dict[str, Answer] = {
    "an array": lambda n: [],
    "null": lambda n: None,
}


async def fails_with_nothing_delivered(stream: FakeStream, endpoint: str) -> str:
    writer = kinesis_writer(endpoint)
    with pytest.raises(DeliveryError) as caught:
        await deliver(writer)
    cause = caught.value.__cause__
    assert type(cause) is RetryableError
    stats = writer.statistics()
    assert (stats.delivered, stats.failed, stats.requests) == (0, 20, RETRIES + 1)
    assert [len(sent) for sent in stream.requests] == [20] * (RETRIES + 1)
    message = str(cause)
    assert "row-data" not in message and "s3cr3t" not in message
    return message


@pytest.mark.parametrize(("answer", "problem"), UNTRUSTED.values(), ids=UNTRUSTED.keys())
async def test_an_answer_that_does_not_say_each_record_was_stored_is_retried(
    stream: tuple[FakeStream, str], answer: Answer, problem: str
) -> None:
    fake, endpoint = stream
    fake.answer = answer
    message = await fails_with_nothing_delivered(fake, endpoint)
    assert message == (
        f"Kinesis stream 'events': PutRecords answered for 20 records, but {problem}; {CANNOT_TELL}"
    )


@pytest.mark.parametrize("answer", UNPARSEABLE.values(), ids=UNPARSEABLE.keys())
async def test_an_answer_the_client_cannot_parse_is_retried(
    stream: tuple[FakeStream, str], answer: Answer
) -> None:
    fake, endpoint = stream
    fake.answer = answer
    message = await fails_with_nothing_delivered(fake, endpoint)
    assert message.startswith("Kinesis stream 'events': the PutRecords answer cannot be parsed (")
    assert message.endswith(CANNOT_TELL)


@pytest.mark.parametrize("bad", [1, RETRIES])
async def test_the_run_succeeds_once_the_stream_answers_well(
    stream: tuple[FakeStream, str], bad: int
) -> None:
    fake, endpoint = stream
    fake.answer = lambda n: {"errors": False}
    fake.bad = bad
    writer = await deliver(kinesis_writer(endpoint))
    stats = writer.statistics()
    assert (stats.delivered, stats.failed, stats.requests) == (20, 0, bad + 1)
    assert len(fake.stored) == 20


async def test_a_thousand_records_answered_errors_false_are_not_delivered(
    stream: tuple[FakeStream, str],
) -> None:
    fake, endpoint = stream
    fake.answer = lambda n: {"errors": False}
    writer = kinesis_writer(endpoint)
    with pytest.raises(DeliveryError) as caught:
        await deliver(writer, 1000)
    assert "PutRecords answered for 500 records, but Records is missing" in str(caught.value)
    stats = writer.statistics()
    assert (stats.delivered, stats.failed) == (0, 1000)


async def test_records_the_answer_says_failed_are_retried_alone(
    stream: tuple[FakeStream, str],
) -> None:
    fake, endpoint = stream
    fake.answer = with_result(4, {"ErrorCode": "ProvisionedThroughputExceededException",
                                  "ErrorMessage": "slow down"}, 1)  # fmt: skip
    fake.bad = 1
    writer = await deliver(kinesis_writer(endpoint))
    assert [len(sent) for sent in fake.requests] == [20, 1]
    assert orjson.loads(fake.requests[1][0])["i"] == 4
    stats = writer.statistics()
    assert (stats.delivered, stats.retried, stats.throttled) == (20, 1, 1)


def test_only_errors_raised_reading_the_answer_are_taken_for_an_unreadable_answer() -> None:
    def bug() -> None:
        raise AttributeError("'NoneType' object has no attribute 'get'")

    try:
        bug()
    except AttributeError as exc:
        assert translate_error(exc, STREAM) is None, "a bug of ours stays a bug"
    code = compile("raise ResponseParserError('bad tag')", "<parser>", "exec")
    try:
        exec(code, {"__name__": "botocore.parsers", "ResponseParserError": ResponseParserError})
    except ResponseParserError as exc:
        error = translate_error(exc, STREAM)
    assert type(error) is RetryableError
    assert str(error) == (
        "Kinesis stream 'events': the PutRecords answer cannot be parsed (ResponseParserError: "
        "bad tag); cannot tell which records were stored"
    )
