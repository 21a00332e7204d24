"""SQS, DynamoDB and Firehose delivery: each asyncsink sink vs a boto3 loop and an
aiobotocore loop of 16 requests in flight, on one local moto server.

Every side delivers the same ~85-byte JSON entries (``sides.make_entries``) to a fresh
resource per run, in the service's largest batch (SQS 10 messages, DynamoDB 25 puts,
Firehose 500 records), and re-sends what an answer lists as failed:

- asyncsink: the sink (``create_writer``) with its defaults (16 requests in flight, AIMD),
  a writer per run on one event loop kept across runs, as the Spark runner keeps one per
  Python worker;
- boto3 loop: what a ``foreachPartition`` function typically does: a boto3 client, one
  request at a time;
- aiobotocore loop: the aioboto3 style, one aiobotocore client and 16 requests in flight
  (a semaphore), entries encoded with orjson.

moto's server runs in a process of its own on 127.0.0.1, and every side in a process of
its own (``sides.SideProcess``), which times each run and measures its own CPU time.
After a warm-up run, the sides run in rotating order for several rounds. Every run's
resource is read back (queue depth, a Scan count, the S3 objects' lines): it must hold
every entry. Prints the machine's load average with each sink's table and the ratios of
the medians.

    .venv/bin/python benchmarks/bench_aws_sinks.py [--rounds R] [--scale X] [--sinks ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any

import anyio.from_thread
import boto3
import orjson
from anyio.from_thread import BlockingPortal
from sides import (
    SideProcess,
    comparison,
    load_average,
    machine,
    make_entries,
    mean_json_size,
    print_comparisons,
    rotating_rounds,
    spread,
    write_summary,
)

REGION = "us-east-1"
KEYS = {"aws_access_key_id": "AKIABENCHMOTO0000001", "aws_secret_access_key": "bench"}
BATCH = {"sqs": 10, "dynamodb": 25, "firehose": 500}
RECORDS = {"sqs": 4000, "dynamodb": 4000, "firehose": 40000}
IN_FLIGHT = 16
MAX_ATTEMPTS = 10
SIDES = ("asyncsink", "boto3", "aiobotocore16")
LABELS = {
    "asyncsink": "asyncsink sink (16 in flight, AIMD)",
    "boto3": "boto3 loop (1 in flight)",
    "aiobotocore16": "aiobotocore loop (16 in flight)",
}


# ---------------------------------------------------------------------- moto's server


@contextmanager
def moto_server() -> Iterator[tuple[str, int]]:
    """moto's server in a process of its own on 127.0.0.1: its URL and process id."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(10)


def admin(service: str, url: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=url, **KEYS)


def create(sink: str, url: str) -> str:
    """A fresh queue (its URL), table or delivery stream (its name) for one run."""
    name = f"bench-{uuid.uuid4().hex[:10]}"
    if sink == "sqs":
        return str(admin("sqs", url).create_queue(QueueName=name)["QueueUrl"])
    if sink == "dynamodb":
        admin("dynamodb", url).create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return name
    admin("s3", url).create_bucket(Bucket=name)
    admin("firehose", url).create_delivery_stream(
        DeliveryStreamName=name,
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": f"arn:aws:s3:::{name}",
        },
    )
    return name


def held(sink: str, url: str, target: str) -> int:
    """How many entries the resource holds."""
    if sink == "sqs":
        attributes = admin("sqs", url).get_queue_attributes(
            QueueUrl=target, AttributeNames=["ApproximateNumberOfMessages"]
        )
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])
    if sink == "dynamodb":
        client, count, start = admin("dynamodb", url), 0, None
        while True:
            page = client.scan(
                TableName=target, Select="COUNT", **({"ExclusiveStartKey": start} if start else {})
            )
            count += page["Count"]
            start = page.get("LastEvaluatedKey")
            if not start:
                return count
    s3, lines = admin("s3", url), 0
    for item in s3.list_objects_v2(Bucket=target).get("Contents", []):
        lines += len(s3.get_object(Bucket=target, Key=item["Key"])["Body"].read().splitlines())
    return lines


# ---------------------------------------------------------------------- requests


def request(sink: str, target: str, entries: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The hand-written sides' call for a batch: operation and parameters."""
    if sink == "sqs":
        batch = [
            {"Id": str(i), "MessageBody": orjson.dumps(e).decode()} for i, e in enumerate(entries)
        ]
        return "send_message_batch", {"QueueUrl": target, "Entries": batch}
    if sink == "dynamodb":
        items = [
            {
                "PutRequest": {
                    "Item": {
                        "id": {"S": e["id"]},
                        "seq": {"N": str(e["seq"])},
                        "customer": {"S": e["customer"]},
                        "amount": {"N": str(e["amount"])},
                        "ok": {"BOOL": e["ok"]},
                    }
                }
            }
            for e in entries
        ]
        return "batch_write_item", {"RequestItems": {target: items}}
    records = [{"Data": orjson.dumps(e) + b"\n"} for e in entries]
    return "put_record_batch", {"DeliveryStreamName": target, "Records": records}


def failed(
    sink: str, answer: dict[str, Any], entries: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The entries of a batch the answer says failed."""
    if sink == "sqs":
        return [entries[int(f["Id"])] for f in answer.get("Failed", [])]
    if sink == "dynamodb":
        left = {
            r["PutRequest"]["Item"]["id"]["S"]
            for r in next(iter(answer.get("UnprocessedItems", {}).values()), [])
        }
        return [e for e in entries if e["id"] in left]
    results = answer.get("RequestResponses", [])
    return [e for e, r in zip(entries, results, strict=True) if "ErrorCode" in r]


def batches(sink: str, entries: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    size = BATCH[sink]
    for start in range(0, len(entries), size):
        yield entries[start : start + size]


# ---------------------------------------------------------------------- the three sides


def run_boto3(sink: str, url: str, target: str, entries: list[dict[str, Any]]) -> int:
    client = admin(sink, url)
    try:
        for batch in batches(sink, entries):
            for attempt in range(MAX_ATTEMPTS):
                operation, params = request(sink, target, batch)
                batch = failed(sink, getattr(client, operation)(**params), batch)
                if not batch:
                    break
                time.sleep(min(1.0, 0.05 * 2**attempt))
            else:
                raise RuntimeError(f"{len(batch)} entries still failing")
    finally:
        client.close()
    return len(entries)


async def _aiobotocore(sink: str, url: str, target: str, entries: list[dict[str, Any]]) -> int:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    config = AioConfig(max_pool_connections=IN_FLIGHT)
    async with get_session().create_client(
        sink, region_name=REGION, endpoint_url=url, config=config, **KEYS
    ) as client:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def send(batch: list[dict[str, Any]]) -> None:
            async with gate:
                for attempt in range(MAX_ATTEMPTS):
                    operation, params = request(sink, target, batch)
                    batch = failed(sink, await getattr(client, operation)(**params), batch)
                    if not batch:
                        return
                    await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
                raise RuntimeError(f"{len(batch)} entries still failing")

        await asyncio.gather(*(send(batch) for batch in batches(sink, entries)))
    return len(entries)


def run_aiobotocore(sink: str, url: str, target: str, entries: list[dict[str, Any]]) -> int:
    return asyncio.run(_aiobotocore(sink, url, target, entries))


async def _asyncsink(sink: str, url: str, target: str, entries: list[dict[str, Any]]) -> int:
    from asyncsink.sinks import sink_factory

    own = {
        "sqs": {"queueUrl": target},
        "dynamodb": {"tableName": target, "keyFields": "id"},
        "firehose": {"deliveryStreamName": target},
    }[sink]
    writer = sink_factory(sink)(
        {
            **own,
            "endpointUrl": url,
            "region": REGION,
            "awsAccessKeyId": KEYS["aws_access_key_id"],
            "awsSecretAccessKey": KEYS["aws_secret_access_key"],
        }
    )
    async with writer:
        await writer.write_all(entries)
    return int(writer.statistics().delivered)


class AsyncsinkSide:
    """The sink on one event loop in a thread, kept from run to run (a Python worker's)."""

    def __init__(self) -> None:
        self._exit = ExitStack()
        self._portal: BlockingPortal | None = None

    def __call__(self, sink: str, url: str, target: str, entries: list[dict[str, Any]]) -> int:
        if self._portal is None:
            self._portal = self._exit.enter_context(anyio.from_thread.start_blocking_portal())
        sent: int = self._portal.call(_asyncsink, sink, url, target, entries)
        return sent

    def close(self) -> None:
        self._exit.close()


ASYNCSINK = AsyncsinkSide()
RUNNERS: dict[str, Callable[..., int]] = {
    "asyncsink": ASYNCSINK,
    "boto3": run_boto3,
    "aiobotocore16": run_aiobotocore,
}


def run_side(side: str, sink: str, url: str, target: str, entries: list[dict[str, Any]]) -> int:
    return RUNNERS[side](sink, url, target, entries)


# ---------------------------------------------------------------------- measuring


def timed(sink: str, url: str, side: SideProcess, count: int) -> tuple[float, float]:
    """One checked run on a fresh resource: entries/s and client CPU us per entry."""
    target = create(sink, url)
    run = side.run(count, sink, url, target)
    found = held(sink, url, target)
    if run.sent != count or found < count:
        raise RuntimeError(f"{side.name} {sink}: sent {run.sent} of {count}; {found} held")
    return count / run.seconds, run.cpu_seconds / count * 1e6


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every side")
    parser.add_argument("--scale", type=float, default=1.0, help="entries per run, scaled")
    parser.add_argument("--sinks", nargs="+", default=list(BATCH), choices=list(BATCH))
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    results: dict[str, Any] = {}
    rows = []
    with moto_server() as (url, _pid), ExitStack() as stack, closing(ASYNCSINK):
        workers = {side: stack.enter_context(SideProcess(side, run_side, side)) for side in SIDES}
        size = mean_json_size(make_entries(1000))
        for sink in args.sinks:
            count = max(BATCH[sink], int(RECORDS[sink] * args.scale))
            print(
                f"\n{sink}: {count:,} entries of ~{size:.0f} B JSON, {BATCH[sink]} per "
                f"request, moto's server, median (min-max) of {args.rounds} rounds; "
                f"{load_average()}",
                flush=True,
            )
            runs = rotating_rounds(
                list(SIDES),
                args.rounds,
                run=lambda side, sink=sink, count=count: timed(sink, url, workers[side], count),
                warm=lambda side, sink=sink: timed(sink, url, workers[side], BATCH[sink] * 20),
            )
            print(f"{'side':<40}{'entries/s: median (min-max)':>32}{'client CPU us/entry':>22}")
            for side in SIDES:
                rates, cpus = [r[0] for r in runs[side]], [r[1] for r in runs[side]]
                print(f"{LABELS[side]:<40}{spread(rates):>32}{spread(cpus, 1):>22}")
            results[sink] = {
                side: {
                    "runs": [round(r[0]) for r in runs[side]],
                    "cpu_us": statistics.median(r[1] for r in runs[side]),
                }
                for side in SIDES
            }
            for base in ("boto3", "aiobotocore16"):
                rows.append(
                    comparison(
                        f"{sink}: asyncsink vs {LABELS[base]}",
                        "entries/s",
                        [r[0] for r in runs["asyncsink"]],
                        [r[0] for r in runs[base]],
                        None,
                    )
                )
        print(f"\n{load_average()}")
        print_comparisons(rows, width=64)
    summary = {
        "benchmark": "aws_sinks",
        "config": {"rounds": args.rounds, "scale": args.scale, **machine()},
        "results": results,
        "comparisons": rows,
    }
    write_summary(None if args.json is None else Path(args.json), summary)
    return summary


if __name__ == "__main__":
    main()
