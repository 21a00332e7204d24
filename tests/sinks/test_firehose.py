"""The Firehose sink against moto's server behind the fault proxy: through throttles,
records failed with their ErrorCode, lost answers, a killed writer and a replay, the S3
objects of the stream hold every row at least once, and nothing is lost."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from asyncsink import OptionError
from asyncsink.sinks.firehose import FirehoseOptions, create_writer, read_answer
from tests.servers.aws_faults import AwsFaultProxy

from .aws_helpers import boto, killed_run, options, run_writer

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(180)]


def rows(count: int) -> list[dict[str, Any]]:
    return [{"id": f"r{i:04d}", "n": i, "price": "1.10"} for i in range(count)]


def make_stream(endpoint: str) -> tuple[str, str]:
    """A delivery stream into a new bucket: (stream, bucket)."""
    name, bucket = f"fh-{uuid.uuid4().hex[:8]}", f"fh-{uuid.uuid4().hex[:8]}"
    boto("s3", endpoint).create_bucket(Bucket=bucket)
    boto("firehose", endpoint).create_delivery_stream(
        DeliveryStreamName=name,
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": f"arn:aws:s3:::{bucket}",
        },
    )
    return name, bucket


def stored(endpoint: str, bucket: str) -> Counter[str]:
    s3, lines = boto("s3", endpoint), Counter[str]()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            lines.update(orjson.loads(line)["id"] for line in body.splitlines())
    return lines


def test_options_need_a_stream_and_keep_to_the_batch_limits() -> None:
    with pytest.raises(OptionError, match="deliveryStreamName"):
        create_writer({})
    with pytest.raises(OptionError, match="maxBatchSizeInBytes"):
        create_writer({"deliveryStreamName": "s", "maxBatchSizeInBytes": "5mb"})
    writer = create_writer({"deliveryStreamName": "s"})
    assert (writer.options.max_batch_size, writer.options.max_record_size_in_bytes) == (
        500,
        1000 * 1024,
    )
    assert not FirehoseOptions(delivery_stream_name="s", append_newline=False).append_newline


def test_an_answer_retries_records_with_an_error_code_and_all_when_it_cannot_tell() -> None:
    answer = {
        "FailedPutCount": 1,
        "RequestResponses": [
            {"RecordId": "a"},
            {"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "slow down"},
        ],
    }
    result = read_answer(answer, 2)
    assert list(result.retry) == [1] and result.throttled
    assert list(read_answer({"RequestResponses": [{"RecordId": "a"}]}, 3).retry) == [0, 1, 2]


@pytest.mark.anyio
async def test_every_row_reaches_s3_at_least_once_through_faults_a_kill_and_a_replay(
    proxy: AwsFaultProxy, moto_endpoint: str, tmp_path: Path
) -> None:
    name, bucket = make_stream(moto_endpoint)
    settings = options(proxy.url, deliveryStreamName=name, maxBatchSize="40",
                       maxInFlightRequests="4")  # fmt: skip
    store, data = str(tmp_path / "records.db"), rows(1000)
    killed_run("firehose", settings, data, store, kill_after=6)
    first = await run_writer("firehose", settings, data, store)
    again = await run_writer("firehose", settings, data, store)  # the batch replayed
    held = stored(moto_endpoint, bucket)
    assert set(held) == {row["id"] for row in data}, "a row was lost"
    assert first.skipped >= 100 and again.delivered == 0
    assert min(proxy.counts[f] for f in ("throttle", "partial", "lost")) >= 1, proxy.counts
    # the lost answers (and only they, with the killed writer's unanswered calls) repeat
    assert sum(held.values()) - len(held) <= 40 * (proxy.counts["lost"] + 4)
