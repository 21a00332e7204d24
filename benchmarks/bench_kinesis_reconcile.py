"""Kinesis with durable call records: what reading the shards costs, on the normal path and
in one reconcile scan.

Runs against a local kinesalite emulator on 127.0.0.1 (started with the demo's launcher,
stopped at the end; a fresh stream of ``--shards`` shards per run):

1. **Normal path.** The Kinesis sink delivers ``--records`` JSON records (~85 B each,
   partition key = ``id``) with a durable SQLite call log, ``reconcileByReading`` on (each
   answer's detail keeps the highest sequence number per shard) and off, in alternating
   rounds: median records/s, client CPU per record, and bytes of call records per call.
2. **One scan.** A writer loses the answer of its ``--lose-at``-th request (the stream
   stored it; the process stops as if killed, with the other requests in flight left
   pending), then the same scope is written again: the retry waits until the lost
   requests can no longer land and settles them by reading the shards. Prints what the
   scan cost (from ``KinesisWriter.stream_scan.reports``): calls, records looked for and
   found, shards read, GetRecords calls, bytes read, seconds spent reading (the wait,
   requestTimeoutMs plus reconcileClockSkewMs, is printed apart), and checks that the
   stream holds every record once.

    .venv/bin/python benchmarks/bench_kinesis_reconcile.py [--records N] [--rounds R]
        [--shards S] [--lose-at K]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import orjson
from bench_kinesis import CREDENTIALS, REGION, Streams, kinesalite
from sides import make_entries

from asyncsink import CallLog, Scope
from asyncsink.sinks.kinesis import KinesisWriter, create_writer
from asyncsink.stores.sqlite import SQLiteStore

TIMEOUT = "2s"  # requestTimeoutMs: how long the retry waits before it reads
SKEW = "200ms"  # reconcileClockSkewMs


class Lost(BaseException):
    """Stands for the process dying: nothing in the writer catches it."""


class LosingClient:
    """Forwards to a real client; the ``lose_at``-th PutRecords is stored by the stream,
    and its answer never arrives (the writer stops there)."""

    def __init__(self, client: Any, lose_at: int) -> None:
        self.client = client
        self.lose_at = lose_at
        self.started = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def put_records(self, **params: Any) -> Any:
        self.started += 1
        number = self.started
        answer = await self.client.put_records(**params)
        if number == self.lose_at:
            raise Lost(f"lost the answer of request {number}")
        return answer


def options(url: str, stream: str, reading: bool) -> dict[str, str]:
    return {
        "streamName": stream, "endpointUrl": url, "region": REGION,
        "awsAccessKeyId": CREDENTIALS["aws_access_key_id"],
        "awsSecretAccessKey": CREDENTIALS["aws_secret_access_key"],
        "partitionKeyField": "id", "requestTimeoutMs": TIMEOUT, "reconcileClockSkewMs": SKEW,
        "reconcileByReading": "true" if reading else "false",
    }  # fmt: skip


async def deliver(
    url: str, stream: str, entries: list[dict[str, Any]], store: SQLiteStore, reading: bool,
    client: Any = None,
) -> KinesisWriter:  # fmt: skip
    log = CallLog(store, Scope("bench", 0, 0))
    writer = create_writer(options(url, stream, reading), call_log=log, client=client)
    async with writer:
        await writer.write_all(entries)
    return writer


def normal_path(
    streams: Streams, entries: list[dict[str, Any]], rounds: int
) -> dict[str, list[tuple[float, float, float]]]:
    """Per side: (records/s, client CPU us/record, call-record bytes per call) per run."""
    runs: dict[str, list[tuple[float, float, float]]] = {"on": [], "off": []}
    order = ["on", "off"]
    with tempfile.TemporaryDirectory(prefix="asyncsink-bench-") as folder:
        for index in range(rounds + 1):  # the first round warms up
            for side in order if index % 2 else order[::-1]:
                stream = streams.create(side)
                store = SQLiteStore(Path(folder) / f"{side}-{index}.db")
                started, cpu = time.perf_counter(), time.process_time()
                writer = anyio.run(deliver, streams.url, stream, entries, store, side == "on")
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                assert writer.statistics().delivered == len(entries)
                sizes = [len(orjson.dumps(d)) for d in writer.recorded_results()]
                streams.delete(stream)
                if index:
                    n = len(entries)
                    per_call = statistics.mean(sizes) if sizes else 0.0
                    runs[side].append((n / elapsed, cpu / n * 1e6, per_call))
    return runs


async def lose_then_replay(
    url: str, stream: str, entries: list[dict[str, Any]], folder: str, lose_at: int
) -> KinesisWriter:
    from asyncsink.sinks.kinesis.clients import ClientSettings, get_client

    store = SQLiteStore(Path(folder) / "scan.db")
    client = await get_client(ClientSettings(region=REGION, endpoint_url=url, **CREDENTIALS))
    try:
        await deliver(url, stream, entries, store, True, LosingClient(client, lose_at))
    except (Lost, BaseExceptionGroup):
        pass
    else:
        raise RuntimeError("the first attempt did not lose its answer")
    return await deliver(url, stream, entries, store, True)


def one_scan(streams: Streams, entries: list[dict[str, Any]], lose_at: int) -> None:
    stream = streams.create("scan")
    with tempfile.TemporaryDirectory(prefix="asyncsink-bench-") as folder:
        writer = anyio.run(lose_then_replay, streams.url, stream, entries, folder, lose_at)
    ids = streams.read_ids(stream)
    streams.delete(stream)
    held = Counter(ids)
    lost, twice = len(entries) - len(held), sum(held.values()) - len(held)
    stats = writer.statistics()
    assert writer.stream_scan is not None
    for report in writer.stream_scan.reports:
        cost = report.cost
        print(
            f"scan: {report.calls} calls ({report.records} records looked for, "
            f"{report.found} found), {report.shards_read} of {report.shards_listed} shards "
            f"read, {cost.list_shards} ListShards + {cost.get_shard_iterator} "
            f"GetShardIterator + {cost.get_records} GetRecords calls ({cost.throttled} "
            f"throttled, {cost.retried} tried again after a failure), {cost.records:,} "
            f"records / {cost.bytes:,} bytes read, {report.seconds * 1000:.0f} ms reading "
            f"after a {report.waited_s:.2f} s wait (requestTimeoutMs {TIMEOUT} + "
            f"reconcileClockSkewMs {SKEW}); settled {report.settled}, unsettled "
            f"{report.unsettled}"
        )
    print(
        f"retry: {stats.reconciled} calls settled by reading, {stats.resent_calls} re-sent "
        f"unsettled; the stream holds {len(ids):,} records: {lost} lost, {twice} duplicates"
    )
    if lost or twice:
        raise RuntimeError("the stream does not hold every record once")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3, help="of the normal path (0: skip it)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--lose-at", type=int, default=40, help="the request whose answer is lost")
    args = parser.parse_args()
    entries = make_entries(args.records)
    with kinesalite(args.shards) as streams:
        print(
            f"{args.records:,} records, {args.shards} shards, kinesalite, {os.cpu_count()} CPUs, "
            f"load {os.getloadavg()[0]:.2f}"
        )
        runs = normal_path(streams, entries, args.rounds) if args.rounds else {}
        for side, label in (("on", "reconcileByReading=true"), ("off", "reconcileByReading=false")):
            rows = runs.get(side)
            if not rows:
                continue
            print(
                f"normal path, {label:<25} {statistics.median(r[0] for r in rows):>9,.0f} "
                f"records/s (runs {', '.join(f'{r[0]:,.0f}' for r in rows)}), "
                f"CPU {statistics.median(r[1] for r in rows):.2f} us/record, result detail "
                f"{statistics.median(r[2] for r in rows):.0f} B per call"
            )
        one_scan(streams, entries, args.lose_at)


if __name__ == "__main__":
    main()
