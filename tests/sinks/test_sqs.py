"""The SQS sink against moto's server behind the fault proxy: a FIFO queue holds every row
once through throttles, partial failures, lost answers, a killed writer and a replay; a
standard queue holds every row at least once."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from asyncsink import OptionError
from asyncsink.sinks.sqs import SqsOptions, create_writer
from asyncsink.sinks.sqs.writer import read_answer
from tests.servers.aws_faults import AwsFaultProxy

from .aws_helpers import boto, killed_run, options, run_writer

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(180)]


def rows(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"r{i:04d}", "user": f"u{i % 7}", "n": i, "price": "12.50"} for i in range(count)
    ]


def make_queue(endpoint: str, fifo: bool) -> tuple[str, str]:
    sqs = boto("sqs", endpoint)
    name = f"q-{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    attributes = {"FifoQueue": "true"} if fifo else {}
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    return name, url


def received(endpoint: str, url: str) -> list[dict[str, Any]]:
    """Every message of the queue, each deleted once read (bounded)."""
    sqs, messages, empty = boto("sqs", endpoint), [], 0
    for _ in range(2000):
        page = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=300,
        )
        batch = page.get("Messages", [])
        if not batch:
            empty += 1
            if empty >= 3:
                return messages
            continue
        empty = 0
        messages += batch
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
            ],
        )
    raise AssertionError("the queue did not run dry")


def ids(messages: list[dict[str, Any]]) -> Counter[str]:
    return Counter(orjson.loads(m["Body"])["id"] for m in messages)


def test_options_name_one_queue_and_a_fifo_queue_needs_a_group_field() -> None:
    with pytest.raises(OptionError, match="queueUrl' or 'queueName' \\(neither"):
        SqsOptions()
    with pytest.raises(OptionError, match="messageGroupIdField"):
        SqsOptions(queue_name="orders.fifo")
    with pytest.raises(OptionError, match="maxBatchSize"):
        create_writer({"queueName": "q", "maxBatchSize": "11"})
    writer = create_writer(
        {"queueUrl": "https://sqs.eu-west-1.amazonaws.com/1/o.fifo", "messageGroupIdField": "user"}
    )
    assert writer.sqs.fifo and writer.options.max_batch_size == 10
    assert writer.options.max_batch_size_in_bytes == 1024 * 1024


def test_an_answer_retries_what_failed_rejects_sender_faults_and_retries_the_unnamed() -> None:
    answer = {
        "Successful": [{"Id": "0"}],
        "Failed": [
            {"Id": "1", "SenderFault": True, "Code": "InvalidParameterValue"},
            {"Id": "2", "SenderFault": False, "Code": "RequestThrottled"},
        ],
    }
    result = read_answer(answer, 4)
    assert list(result.retry) == [2, 3] and list(result.rejected) == [1]
    assert result.throttled


@pytest.mark.anyio
async def test_a_fifo_queue_holds_every_row_once_through_faults_a_kill_and_a_replay(
    proxy: AwsFaultProxy,
    moto_endpoint: str,
    tmp_path: Path,
) -> None:
    name, url = make_queue(moto_endpoint, fifo=True)
    settings = options(
        proxy.url,
        queueName=name,
        messageGroupIdField="user",
        messageAttributesFields="user,n",
        maxInFlightRequests="4",
    )
    store, data = str(tmp_path / "records.db"), rows(400)
    killed_run("sqs", settings, data, store, kill_after=12)
    first = await run_writer("sqs", settings, data, store)
    again = await run_writer("sqs", settings, data, store)  # the batch replayed
    messages = received(moto_endpoint, url)
    held = ids(messages)
    assert set(held) == {row["id"] for row in data}
    assert max(held.values()) == 1, f"duplicates: {[k for k, v in held.items() if v > 1]}"
    assert first.skipped >= 50 and again.delivered == 0  # the dead writer's acknowledged
    assert min(proxy.counts[f] for f in ("throttle", "partial", "lost")) >= 1, proxy.counts
    one = next(m for m in messages if orjson.loads(m["Body"])["id"] == "r0003")
    assert one["MessageAttributes"]["n"] == {"StringValue": "3", "DataType": "Number"}
    assert one["MessageAttributes"]["user"]["StringValue"] == "u3"


@pytest.mark.anyio
async def test_a_standard_queue_holds_every_row_at_least_once_through_faults(
    proxy: AwsFaultProxy,
    moto_endpoint: str,
    tmp_path: Path,
) -> None:
    _, url = make_queue(moto_endpoint, fifo=False)
    settings = options(proxy.url, queueUrl=url, bodyField="id")
    data = rows(300)
    stats = await run_writer("sqs", settings, data, str(tmp_path / "r.db"))
    held = Counter(m["Body"] for m in received(moto_endpoint, url))
    assert set(held) == {row["id"] for row in data}  # nothing lost; the lost answers repeat
    assert stats.delivered == 300 and proxy.counts["lost"] >= 1
