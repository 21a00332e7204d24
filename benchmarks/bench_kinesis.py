"""Kinesis delivery: the asyncsink Kinesis sink vs a plain boto3 ``put_records`` loop.

Both sides deliver the same JSON records (~85 bytes each, partition key = the ``id``
field) in PutRecords requests of 500 to a local kinesalite emulator on 127.0.0.1 (started
here with the demo's launcher, stopped at the end; dummy credentials):

- asyncsink: the Kinesis sink (``asyncsink.sinks.kinesis.create_writer``, aiobotocore) with its
  defaults (16 requests in flight, AIMD rate limiting, failed records retried on their
  own); a writer per run, on one event loop in a background thread of the side's process
  kept across runs, as the Spark runner keeps one per Python worker (runs share the
  aiobotocore client, as partitions do);
- boto3 loop: what a ``foreachPartition`` function typically does: a ``boto3`` client with
  its defaults, one request at a time, checking ``FailedRecordCount`` and re-sending the
  records that failed (with a short backoff).

The boto3 loop encodes each record with orjson, as the sink does, so the comparison
measures the delivery machinery rather than the JSON library. Every side runs in a process
of its own (``sides.SideProcess``), spawned once and kept for all its runs, which builds
the records itself, times each run and measures its own CPU time (user + system) and the
part of it spent collecting garbage: the parent only orchestrates, and the emulator's CPU
time is read from its process. After a warm-up run of each side, the sides run in
rotating order for several rounds (A B, B A, ...). Every run writes to a fresh stream,
which the parent reads back afterwards (GetRecords over every shard): it must hold
exactly the records sent, once each; then it is deleted.

Prints, with the machine's load average, each side's records/s (wall clock) and client
CPU time per record as the median with the minimum and maximum of its runs, the part of
it spent collecting garbage and the emulator's CPU per record; then the ratio of the
medians with its target (asyncsink >= 2x the boto3 loop), and the median (min-max) of
each round's ratio as a check on noise. kinesalite runs on one Node.js thread, so its CPU
time per record bounds what any client can reach; that ceiling is printed too. Exits 1
when the target is missed, after printing everything.

    .venv/bin/python benchmarks/bench_kinesis.py [--records N] [--rounds R] [--shards S]
        [--quick] [--profile] [--json PATH]

Needs Node.js and ``npm install --prefix tests/servers/node`` (``scripts/test`` does it).
``--profile`` then profiles one boto3 and one asyncsink run (cProfile, CPU time, in this
process) and prints where asyncsink's client time goes, by file and by function.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import tempfile
import time
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
    exit_on_missed,
    load_average,
    machine,
    make_entries,
    mean_json_size,
    print_comparisons,
    print_profile,
    process_cpu,
    profile_cpu,
    rotating_rounds,
    spread,
    write_summary,
)

from asyncsink.demo.destinations import destination_for
from asyncsink.demo.settings import DemoSettings
from asyncsink.sinks.kinesis import create_writer

BATCH = 500
TARGET = 2.0
REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "AKIAKINESALITE", "aws_secret_access_key": "not-a-secret"}
STREAM_TIMEOUT_S = 30.0  # for a stream to become active, or to be gone
READ_TIMEOUT_S = 120.0  # for reading a stream back
MAX_ATTEMPTS = 10  # of the boto3 loop, per batch

SIDES = ("asyncsink", "boto3")
LABELS = {
    "asyncsink": "asyncsink Kinesis sink",
    "boto3": "boto3 put_records loop (1 in flight)",
}


# ---------------------------------------------------------------------- the emulator


@contextmanager
def kinesalite(shards: int) -> Iterator[Streams]:
    """A kinesalite emulator on 127.0.0.1, started and stopped by the demo's launcher."""
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # never look for instance credentials
    emulator: Any = destination_for("kinesis")
    with tempfile.TemporaryDirectory(prefix="asyncsink-kinesalite-") as workdir:
        try:
            emulator.start(DemoSettings(sink="kinesis"), Path(workdir))
            if not emulator.url.startswith("http://127.0.0.1:"):
                raise RuntimeError(f"kinesalite is not on the loopback address: {emulator.url}")
            yield Streams(emulator.url, emulator.process.pid, emulator.client, shards)
        finally:
            emulator.stop()


class Streams:
    """Fresh streams on the emulator, one per run, read back and deleted after it.

    Args:
        url: the emulator's endpoint.
        pid: its process, whose CPU time is measured.
        admin: a botocore Kinesis client for it, to create, read and delete streams.
        shards: shards per stream.
    """

    def __init__(self, url: str, pid: int, admin: Any, shards: int) -> None:
        self.url = url
        self.pid = pid
        self.admin = admin
        self.shards = shards
        self.created = 0

    def create(self, side: str) -> str:
        """The name of a new stream, once it is active."""
        self.created += 1
        name = f"bench-{side}-{self.created}"
        self.admin.create_stream(StreamName=name, ShardCount=self.shards)
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        while self._status(name) != "ACTIVE":
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream {name} did not become active in {STREAM_TIMEOUT_S} s")
            time.sleep(0.05)
        return name

    def read_ids(self, name: str) -> list[str]:
        """The ``id`` of every record the stream holds, over all its shards."""
        ids: list[str] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        for shard in self.admin.list_shards(StreamName=name)["Shards"]:
            iterator = self.admin.get_shard_iterator(
                StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"reading stream {name} back took over {READ_TIMEOUT_S} s")
                answer = self.admin.get_records(ShardIterator=iterator, Limit=10_000)
                ids.extend(orjson.loads(record["Data"])["id"] for record in answer["Records"])
                if not answer["Records"] and not answer.get("MillisBehindLatest"):
                    break
                iterator = answer.get("NextShardIterator")
        return ids

    def delete(self, name: str) -> None:
        """Delete the stream and wait until it is gone, so that the emulator does no
        cleanup during the next run and its shard limit is never reached."""
        self.admin.delete_stream(StreamName=name)
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        while self._status(name) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream {name} was not deleted in {STREAM_TIMEOUT_S} s")
            time.sleep(0.05)

    def _status(self, name: str) -> str | None:
        try:
            summary = self.admin.describe_stream_summary(StreamName=name)
        except self.admin.exceptions.ResourceNotFoundException:
            return None
        status: str = summary["StreamDescriptionSummary"]["StreamStatus"]
        return status


# ---------------------------------------------------------------------- the two sides


async def _asyncsink(url: str, stream: str, entries: list[dict[str, Any]]) -> tuple[int, int]:
    writer = create_writer(
        {
            "streamName": stream,
            "endpointUrl": url,
            "region": REGION,
            "awsAccessKeyId": CREDENTIALS["aws_access_key_id"],
            "awsSecretAccessKey": CREDENTIALS["aws_secret_access_key"],
            "partitionKeyField": "id",
        }
    )
    async with writer:
        await writer.write_all(entries)
    done = writer.statistics()
    return done.delivered, done.retried


class AsyncsinkSide:
    """Runs the sink on one event loop in a thread of its own, kept from run to run, as the
    Spark runner keeps one per Python worker (``asyncsink.spark.runner``): each run has its
    own writer, and runs share the loop's Kinesis client as a worker's partitions do (boto3's
    default session likewise keeps its service model from run to run)."""

    def __init__(self) -> None:
        self._exit = ExitStack()
        self._portal: BlockingPortal | None = None

    def __call__(self, url: str, stream: str, entries: list[dict[str, Any]]) -> tuple[int, int]:
        """Records delivered and records re-sent."""
        done: tuple[int, int] = self._loop().call(_asyncsink, url, stream, entries)
        return done

    def profile(
        self, url: str, stream: str, entries: list[dict[str, Any]]
    ) -> tuple[dict[Any, Any], float]:
        """A run under cProfile, timed by CPU time, in the loop's thread: the raw
        statistics and the total CPU seconds (as ``sides.profile_cpu``)."""
        portal = self._loop()
        profiler = cProfile.Profile(time.process_time)
        portal.call(profiler.enable)
        try:
            self(url, stream, entries)
        finally:
            portal.call(profiler.disable)
        raw: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        return raw, sum(entry[2] for entry in raw.values()) or 1e-9

    def close(self) -> None:
        """Stop the loop, which closes its Kinesis client."""
        self._exit.close()
        self._portal = None

    def _loop(self) -> BlockingPortal:
        if self._portal is None:
            self._portal = self._exit.enter_context(anyio.from_thread.start_blocking_portal())
        return self._portal


def run_boto3(url: str, stream: str, entries: list[dict[str, Any]]) -> tuple[int, int]:
    """One batch at a time; the records that failed in a request are sent again."""
    client = boto3.client("kinesis", region_name=REGION, endpoint_url=url, **CREDENTIALS)
    sent = resent = 0
    try:
        for start in range(0, len(entries), BATCH):
            records = [
                {"Data": orjson.dumps(entry), "PartitionKey": entry["id"]}
                for entry in entries[start : start + BATCH]
            ]
            count = len(records)
            for attempt in range(MAX_ATTEMPTS):
                answer = client.put_records(StreamName=stream, Records=records)
                if not answer["FailedRecordCount"]:
                    break
                results = answer["Records"]
                records = [r for r, res in zip(records, results, strict=True) if "ErrorCode" in res]
                resent += len(records)
                time.sleep(min(1.0, 0.05 * 2**attempt))
            else:
                raise RuntimeError(f"{len(records)} records still failing after {MAX_ATTEMPTS}")
            sent += count
    finally:
        client.close()
    return sent, resent


ASYNCSINK = AsyncsinkSide()  # in each process that runs the sink: its own loop
RUNNERS: dict[str, Callable[[str, str, list[dict[str, Any]]], tuple[int, int]]] = {
    "asyncsink": ASYNCSINK,
    "boto3": run_boto3,
}


def run_side(
    side: str, url: str, stream: str, entries: list[dict[str, Any]]
) -> tuple[int, dict[str, float]]:
    """A run of ``side`` in its process (``SideProcess``): records delivered, then records
    re-sent and CPU seconds spent collecting garbage."""
    with GcClock() as gc_clock:
        sent, resent = RUNNERS[side](url, stream, entries)
    return sent, {"resent": resent, "gc_seconds": gc_clock.seconds}


# ---------------------------------------------------------------------- measuring


class GcClock:
    """CPU seconds spent in the garbage collector while in use (cProfile leaves them out,
    charging them to whichever function happened to allocate)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started


def check(
    streams: Streams, stream: str, side: str, sent: int, entries: list[dict[str, Any]]
) -> None:
    """The stream must hold every record sent, once each, and nothing else."""
    ids = streams.read_ids(stream)
    held = set(ids)
    expected = {entry["id"] for entry in entries}
    if sent != len(entries) or len(ids) != len(entries) or held != expected:
        raise RuntimeError(
            f"{side}: sent {sent} of {len(entries)}; the stream holds {len(ids)} records "
            f"({len(ids) - len(held)} duplicates, {len(expected - held)} missing, "
            f"{len(held - expected)} unexpected)"
        )


def timed(streams: Streams, side: SideProcess, entries: list[dict[str, Any]]) -> tuple[float, ...]:
    """One checked run on a fresh stream: records/s of wall-clock time, the client's CPU
    microseconds per record, the emulator's, the client's in garbage collection, and the
    records re-sent."""
    stream = streams.create(side.name)
    emulator_cpu = process_cpu(streams.pid)
    run = side.run(len(entries), stream)  # the side's process builds the same records
    emulator_cpu = process_cpu(streams.pid) - emulator_cpu
    check(streams, stream, side.name, run.sent, entries)
    streams.delete(stream)
    n = len(entries)
    gc_us = run.details["gc_seconds"] / n * 1e6
    return (
        n / run.seconds,
        run.cpu_seconds / n * 1e6,
        emulator_cpu / n * 1e6,
        gc_us,
        run.details["resent"],
    )


def measure(
    streams: Streams, workers: dict[str, SideProcess], entries: list[dict[str, Any]], rounds: int
) -> dict[str, dict[str, Any]]:
    first = entries[: min(len(entries), 10 * BATCH)]  # imports, service models, the JIT
    runs = rotating_rounds(
        list(workers),
        rounds,
        run=lambda side: timed(streams, workers[side], entries),
        warm=lambda side: timed(streams, workers[side], first),
    )
    return {
        side: {
            "records_per_s": statistics.median(run[0] for run in results),
            "cpu_us_per_record": statistics.median(run[1] for run in results),
            "emulator_cpu_us_per_record": statistics.median(run[2] for run in results),
            "gc_us_per_record": statistics.median(run[3] for run in results),
            "resent": sum(int(run[4]) for run in results),
            "runs": [round(run[0]) for run in results],
            "cpu_runs": [round(run[1], 2) for run in results],
        }
        for side, results in runs.items()
    }


def comparisons(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return comparison(
        f"Kinesis (kinesalite): asyncsink vs {LABELS['boto3']}",
        "records/s",
        results["asyncsink"]["runs"],
        results["boto3"]["runs"],
        TARGET,
    )


def profile_run(streams: Streams, entries: list[dict[str, Any]]) -> None:
    """Profile one boto3 and one asyncsink run (each checked) and print where asyncsink's
    client time goes."""
    totals, collecting = {}, {}
    for side in ("boto3", "asyncsink"):
        stream = streams.create(side)
        with GcClock() as gc_clock:
            if side == "asyncsink":
                raw, totals[side] = ASYNCSINK.profile(streams.url, stream, entries)
            else:
                raw, totals[side] = profile_cpu(RUNNERS[side], streams.url, stream, entries)
        collecting[side] = gc_clock.seconds
        check(streams, stream, side, len(entries), entries)
        streams.delete(stream)
    total = totals["asyncsink"]
    print(
        f"\nprofile (CPU time) of one run of {len(entries):,} records: asyncsink "
        f"{total:.2f} s, boto3 loop {totals['boto3']:.2f} s "
        f"({total / totals['boto3']:.2f}x); garbage collection, charged to the functions "
        f"below: asyncsink {collecting['asyncsink']:.2f} s, boto3 loop "
        f"{collecting['boto3']:.2f} s; asyncsink's time:"
    )
    print_profile(raw, total)


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both sides")
    parser.add_argument("--shards", type=int, default=2, help="shards per stream (1 to 4)")
    parser.add_argument("--quick", action="store_true", help="15,000 records, 3 rounds")
    parser.add_argument("--profile", action="store_true", help="then profile a run of each side")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.rounds = 15_000, 3
    if not 1 <= args.shards <= 4:  # kinesalite allows 10 shards, the demo's stream holds 2
        parser.error("--shards must be 1 to 4")
    entries = make_entries(args.records)
    size = mean_json_size(entries)
    with kinesalite(args.shards) as streams, ExitStack() as stack, closing(ASYNCSINK):
        print(
            f"{args.records:,} records of ~{size:.0f} B JSON, {BATCH} per request, kinesalite "
            f"({args.shards} shards, a fresh stream per run) and every side in a process of "
            f"its own, median (min-max) of {args.rounds} rounds (sides in rotating order); "
            f"{load_average()}",
            flush=True,
        )
        workers = {
            side: stack.enter_context(SideProcess(side, run_side, side, streams.url))
            for side in SIDES
        }
        results = measure(streams, workers, entries, args.rounds)
        print(f"\n{load_average()}")
        print(
            f"{'side':<42}{'records/s: median (min-max)':>30}{'client CPU us/record':>24}"
            f"{'(in GC)':>9}{'emulator':>10}"
        )
        for side in SIDES:
            row = results[side]
            print(
                f"{LABELS[side]:<42}{spread(row['runs']):>30}{spread(row['cpu_runs'], 2):>24}"
                f"{row['gc_us_per_record']:>9.2f}{row['emulator_cpu_us_per_record']:>10.2f}"
            )
        emulator_us = statistics.median(
            results[side]["emulator_cpu_us_per_record"] for side in SIDES
        )
        ceiling = 1e6 / emulator_us if emulator_us else float("inf")
        print(
            f"the emulator's CPU time bounds any client to ~{ceiling:,.0f} records/s "
            f"(~{ceiling / results['boto3']['records_per_s']:.2f}x the boto3 loop); "
            f"records re-sent: asyncsink {results['asyncsink']['resent']}, "
            f"boto3 {results['boto3']['resent']}"
        )
        row = comparisons(results)
        print_comparisons([row], width=70)
        if args.profile:
            profile_run(streams, entries)
    summary = {
        "benchmark": "kinesis",
        "title": "Kinesis sink vs a boto3 put_records loop (kinesalite)",
        "config": {
            "records": args.records,
            "record_bytes": round(size),
            "batch": BATCH,
            "shards": args.shards,
            "rounds": args.rounds,
            **machine(),
        },
        "results": {**results, "emulator_ceiling_records_per_s": round(ceiling)},
        "comparisons": [row],
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    exit_on_missed(main())
