"""Spark to HTTP: asyncsink vs what Python REST writers in Spark do today, same endpoint.

Each side writes the rows of ``spark.range`` (two partitions, about 85 bytes of JSON a
row) from a local Spark session (``local[2]``) to the fault-injecting endpoint
(``FaultServer``, in its own process, 20 ms latency, no faults):

- asyncsink: ``asyncsink.spark.foreach_partition(df, "http", {"url": ...})`` with its
  defaults (500 rows a request, requests in flight adapted to their latency, up to
  128 per partition, each partition's writer going on, from its first answer, at the
  limit the previous writer of its Python worker reached); and the same with durable
  call records (``sink_id``, SQLite in a temp dir, a fresh batch id per run), as the
  README recommends;
- one request per row: what existing Python REST data sources and most ``foreach``
  examples do (a ``requests.Session`` per partition, one POST per row);
- batched requests: 500 rows a request, sent one at a time, per partition;
- two null-sink ceilings that send nothing: every row read through ``df.rdd`` and encoded
  (``orjson.dumps(row.asDict(recursive=True))``), and every row read through
  ``mapInArrow`` and encoded (``orjson.dumps`` of each of ``batch.to_pylist()``): what
  reading and encoding alone cost, so the ratio to them is the share of a worker's time
  asyncsink leaves to Spark (flat rows only);
- for event rows, the hand-written peer (``to_json(struct(*))`` -> ``mapInArrow`` ->
  aiohttp, 500 rows a request, 16 in flight) and its null ceiling (bodies built, nothing
  sent);
- the Python data source, ``df.write.format("asyncsink-http")``, which reads every column
  through Arrow (``foreach_partition`` lets Spark write runs of columns around a nested
  one as JSON text; a data source is handed the DataFrame as it is);
- with ``--fixed N``, for information: asyncsink with ``adaptiveConcurrency=false`` and
  ``N`` requests in flight per partition, which shows what adapting does in Spark.

Every side runs in a process of its own (``sides.SideProcess``), spawned once and kept
for all its runs; its process starts its own Spark session on its first run, keeps it for
all its runs and stops it when it ends, so the Python workers of each session (reused
between jobs, Spark's default) are that side's alone; the side's process times each of
its runs, and the parent only orchestrates. asyncsink writes ``--rows`` (default
1,000,000); a request per row cannot get through a million rows in reasonable time, so
each baseline writes a smaller slice of the same rows (``--per-row-rows``,
``--batched-rows``) and all sides are compared by rows per second, which a steady loop
keeps whatever the slice. Every run is checked (the endpoint must hold exactly the rows
sent, once each; the null sinks nothing) and the endpoint is reset between runs. A whole
warm-up run of each side in turn starts the sessions one at a time and warms each JVM and
its Python workers; then the sides run in rotating order for several rounds (A B C,
B C A, ...).

Prints, with the machine's load average, each side's rows/s as the median with the
minimum and maximum of its runs; then the comparisons: the ratio of the medians, and the
median (min-max) of each round's ratio (its sides ran back to back) as a check on noise,
with the targets: asyncsink >= 10x a request per row, >= 3x batched, >= 0.7x either null
sink; with durable records, >= 0.95x the rate without, as for the HTTP sink alone at
20 ms. Exits 1 when a target is missed, after printing everything.

    .venv/bin/python benchmarks/bench_spark.py [--rows N] [--rounds R] [--quick]
        [--per-row-rows N] [--batched-rows N] [--latency-ms L] [--fixed N] [--json PATH]
        [--profile]

``--profile`` then profiles, by CPU time, what a Python worker does for one partition of
100,000 rows, in this process: the path the Arrow-readable rows take (record batches as
``ArrowRows`` chunks through ``run_chunks``: the task thread hands them to the event loop
thread, whose writer encodes whole batches and sends them), each thread on its own, and
times the batched baseline; it prints where asyncsink's time goes.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from sides import (
    SideProcess,
    comparison,
    exit_on_missed,
    load_average,
    machine,
    rotating_rounds,
    side_label,
    spark_session,
    spread,
    write_summary,
)

from asyncsink.demo.events import event_columns
from asyncsink.testing import Faults, FaultServer

BATCH = 500
PEER_IN_FLIGHT = 16
PARTITIONS = 2
JSON_HEADERS = {"content-type": "application/json"}

SIDES = (
    "asyncsink", "source", "durable", "peer", "peer_null", "per_row", "batched", "rows_null",
    "arrow_null",
)  # fmt: skip
LABELS = {
    "asyncsink": "asyncsink foreach_partition",
    "source": "asyncsink data source (format asyncsink-http)",
    "durable": "asyncsink, durable records (SQLite)",
    "peer": f"to_json + mapInArrow + aiohttp, {BATCH} a request, {PEER_IN_FLIGHT} in flight",
    "peer_null": "null sink: to_json + mapInArrow, bodies built, nothing sent",
    "per_row": "requests, one request per row",
    "batched": f"requests, batches of {BATCH}, one at a time",
    "rows_null": "null sink: df.rdd rows encoded, nothing sent",
    "arrow_null": "null sink: mapInArrow batches encoded, nothing sent",
}
# baseline -> target ratio asyncsink / baseline, by schema and endpoint latency
TARGETS: dict[str, dict[str, float]] = {
    "flat": {"per_row": 10.0, "batched": 3.0, "arrow_null": 0.7, "rows_null": 0.7},
    "events": {"per_row": 10.0, "batched": 3.0},
}
PEER_TARGET = {0.0: 1.1, 20.0: 1.0}  # asyncsink / the hand-written peer, rows/s
SOURCE_TARGET = 1.0  # the data source / the hand-written peer, rows/s
PEER_CPU_TARGET = 1.0  # asyncsink / the peer, CPU per row (0 ms)
DURABLE_TARGET = 0.95  # durable records / none, rows per second (20 ms)
DURABLE_CPU_TARGET = 1.10  # durable records / none, CPU per row


def start_spark() -> Any:
    session = spark_session(f"local[{PARTITIONS}]")
    from asyncsink.spark import register_data_sources

    register_data_sources(session)
    return session


def rows(spark: Any, count: int, schema: str = "events") -> Any:
    """``count`` rows in two partitions with a unique ``id``: the event table
    (``asyncsink.demo.events``), or flat columns (~85 bytes of JSON a row)."""
    if schema == "events":
        return spark.range(0, count, 1, PARTITIONS).selectExpr("id", *event_columns("id"))
    return spark.range(0, count, 1, PARTITIONS).selectExpr(
        "concat('r-', lpad(cast(id AS string), 9, '0')) AS id",
        "id AS seq",
        "concat('customer-', lpad(cast(id % 9973 AS string), 4, '0')) AS customer",
        "round((id * 37) % 100000 / 100, 2) AS amount",
        "id % 7 != 0 AS ok",
    )


def check_answer(status: int, content: bytes) -> None:
    if not 200 <= status <= 299:
        raise RuntimeError(f"the endpoint answered {status}: {content[:200]!r}")
    if orjson.loads(content).get("errors"):
        raise RuntimeError("the endpoint rejected entries")


# ---------------------------------------------------------------------- baselines
# Partition functions, shipped to the Python workers.


def post_per_row(url: str, partition: Iterator[Any]) -> None:
    import requests

    with requests.Session() as session:
        for row in partition:
            body = orjson.dumps([row.asDict(recursive=True)], default=str)
            response = session.post(url, data=body, headers=JSON_HEADERS)
            check_answer(response.status_code, response.content)


def post_batched(url: str, partition: Iterator[Any]) -> None:
    import requests

    def send(batch: list[dict[str, Any]]) -> None:
        response = session.post(url, data=orjson.dumps(batch, default=str), headers=JSON_HEADERS)
        check_answer(response.status_code, response.content)

    with requests.Session() as session:
        batch: list[dict[str, Any]] = []
        for row in partition:
            batch.append(row.asDict(recursive=True))
            if len(batch) == BATCH:
                send(batch)
                batch = []
        if batch:
            send(batch)


def encode_rows(partition: Iterator[Any]) -> None:
    for row in partition:
        orjson.dumps(row.asDict(recursive=True), default=str)


def encode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    count = 0
    for batch in batches:
        for row in batch.to_pylist():
            orjson.dumps(row)
            count += 1
    yield pa.RecordBatch.from_arrays([pa.array([count], pa.int64())], names=["n"])


def peer_batches(url: str, batches: Iterator[Any]) -> Iterator[Any]:
    """The hand-written peer: JSON rows made by Spark (``to_json(struct(*))``), read
    through ``mapInArrow``, sent as JSON arrays of 500 with aiohttp, 16 in flight."""
    import asyncio

    import aiohttp
    import pyarrow as pa

    async def send_all() -> int:
        sent = 0
        slots = asyncio.Semaphore(PEER_IN_FLIGHT)
        pending: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession() as session:

            async def post(body: bytes) -> None:
                try:
                    async with session.post(url, data=body, headers=JSON_HEADERS) as answer:
                        check_answer(answer.status, await answer.read())
                finally:
                    slots.release()

            for batch in batches:
                values = batch.column(0).to_pylist()
                for start in range(0, len(values), BATCH):
                    part = values[start : start + BATCH]
                    body = ("[" + ",".join(part) + "]").encode()
                    await slots.acquire()
                    task = asyncio.create_task(post(body))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    sent += len(part)
            await asyncio.gather(*pending)
        return sent

    count = asyncio.run(send_all())
    yield pa.RecordBatch.from_arrays([pa.array([count], pa.int64())], names=["n"])


def peer_null_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """The peer without sending: the request bodies built, nothing else."""
    import pyarrow as pa

    count = 0
    for batch in batches:
        values = batch.column(0).to_pylist()
        for start in range(0, len(values), BATCH):
            part = values[start : start + BATCH]
            ("[" + ",".join(part) + "]").encode()
            count += len(part)
    yield pa.RecordBatch.from_arrays([pa.array([count], pa.int64())], names=["n"])


# ---------------------------------------------------------------------- the sides
# Each runs in a process of its own (``SideProcess``), with a Spark session of its own.


class _Side:
    """What a side's process keeps between its runs: its Spark session (started on the
    first run, stopped when the process ends), and for the durable side the temporary
    folder of its SQLite store and the number of its last batch (every run writes a
    fresh one)."""

    spark: Any = None
    folder: str | None = None
    batches = 0


def _session() -> Any:
    if _Side.spark is None:
        from pyspark import cloudpickle

        # In a spawned process this module is ``__mp_main__``, which Spark's workers
        # cannot import: ship its partition functions by value, as those of ``__main__``.
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        _Side.spark = start_spark()
        atexit.register(_end_session)  # runs before pyspark's own handler kills the JVM
    return _Side.spark


def _end_session() -> None:
    _Side.spark.stop()
    if _Side.folder is not None:
        shutil.rmtree(_Side.folder, ignore_errors=True)


def _store() -> str:
    if _Side.folder is None:
        _Side.folder = tempfile.mkdtemp(prefix="asyncsink-bench-")
    return f"sqlite:///{Path(_Side.folder) / 'records.db'}"


def run_side(side: str, url: str, schema: str, rows_in: range) -> int:
    """A run of ``side`` in its process (``SideProcess``, which passes ``range(count)``
    and times the run): writes ``count`` rows of ``schema``; how many were written, or
    read and encoded by a null sink."""
    from asyncsink.spark import foreach_partition

    count = len(rows_in)
    df = rows(_session(), count, schema)
    if side == "asyncsink":
        return foreach_partition(df, "http", {"url": url}).delivered
    if side.startswith("fixed"):
        options = {"url": url, "adaptiveConcurrency": "false", "maxInFlightRequests": side[5:]}
        return foreach_partition(df, "http", options).delivered
    if side == "durable":
        _Side.batches += 1
        options = {"url": url, "recordStore": _store()}
        stats = foreach_partition(df, "http", options, sink_id="bench", batch_id=_Side.batches)
        return stats.delivered
    if side == "source":
        df.write.format("asyncsink-http").option("url", url).mode("append").save()
    elif side == "per_row":
        df.foreachPartition(partial(post_per_row, url))
    elif side == "batched":
        df.foreachPartition(partial(post_batched, url))
    elif side == "rows_null":
        df.foreachPartition(encode_rows)
    elif side in ("peer", "peer_null"):
        as_json = df.selectExpr("to_json(struct(*)) AS json")
        task = partial(peer_batches, url) if side == "peer" else peer_null_batches
        return sum(row.n for row in as_json.mapInArrow(task, "n long").collect())
    else:
        encoded = df.mapInArrow(encode_batches, "n long").collect()
        return sum(row.n for row in encoded)
    return count


def timed(server: FaultServer, side: SideProcess, count: int) -> tuple[float, float]:
    """One checked run: rows per second, as the side's process timed it, and its CPU time
    per row in microseconds (the side's process, its JVM and its Python workers)."""
    server.reset()
    run = side.run(count)
    stats = server.stats()
    held = 0 if side.name.endswith("_null") else count  # a null sink sends nothing
    if run.sent != count or stats.entries_received != held or stats.unique_ids != held:
        raise RuntimeError(
            f"{side.name}: {run.sent} rows written of {count}; the endpoint holds "
            f"{stats.entries_received} ({stats.unique_ids} distinct) of {held}"
        )
    return count / run.seconds, run.cpu_seconds / count * 1e6


def measure(
    server: FaultServer, sides: list[str], counts: dict[str, int], rounds: int, schema: str
) -> tuple[dict[str, list[int]], dict[str, list[float]]]:
    """Each side's rows/s and CPU microseconds per row in every round, after a warm-up run
    of each: a whole run, which starts the side's Spark session (one at a time) and warms
    its JVM and Python workers, as the runs of all sides warmed the one session they once
    shared."""
    with ExitStack() as stack:
        workers = {
            side: stack.enter_context(
                SideProcess(side, run_side, side, server.ingest_url, schema, inputs=range)
            )
            for side in sides
        }
        runs = rotating_rounds(
            sides,
            rounds,
            run=lambda side: timed(server, workers[side], counts[side]),
            warm=lambda side: timed(server, workers[side], counts[side]),
        )
    rates = {side: [round(rate) for rate, _ in results] for side, results in runs.items()}
    cpu = {side: [round(us, 2) for _, us in results] for side, results in runs.items()}
    return rates, cpu


def comparisons(
    runs: dict[str, list[int]], cpu: dict[str, list[float]], latency_ms: float, schema: str
) -> list[dict[str, Any]]:
    """asyncsink's three ways against every baseline that ran, durable records against
    none, and CPU per row against the peer and without records."""
    title = f"Spark {schema} {latency_ms:g} ms"
    rows_out = []
    targets: dict[str, float | None] = dict(TARGETS[schema])
    if "peer" in runs:
        targets["peer"] = PEER_TARGET.get(latency_ms)
    targets.update({side: None for side in ("peer_null", "arrow_null") if side in runs})
    for ours in ("asyncsink", "source", "durable"):
        for baseline, target in targets.items():
            if ours not in runs or baseline not in runs:
                continue
            if ours == "source" and baseline == "peer":
                target = SOURCE_TARGET
            elif ours != "asyncsink" and baseline.startswith("peer"):
                target = None
            name = f"{title}: {LABELS[ours]} vs {LABELS[baseline]}"
            rows_out.append(comparison(name, "rows/s", runs[ours], runs[baseline], target))
    if "peer" in runs and "asyncsink" in runs:
        rows_out.append(
            comparison(
                f"{title}: {LABELS['asyncsink']} vs {LABELS['peer']}",
                "CPU us/row",
                cpu["asyncsink"],
                cpu["peer"],
                PEER_CPU_TARGET if latency_ms == 0 else None,
                lower_is_better=True,
            )
        )
    if "durable" in runs and "asyncsink" in runs:
        rows_out.append(
            comparison(
                f"{title}: {LABELS['durable']} vs without records",
                "rows/s",
                runs["durable"],
                runs["asyncsink"],
                DURABLE_TARGET if latency_ms >= 20 else None,
            )
        )
        rows_out.append(
            comparison(
                f"{title}: {LABELS['durable']} vs without records",
                "CPU us/row",
                cpu["durable"],
                cpu["asyncsink"],
                DURABLE_CPU_TARGET,
                lower_is_better=True,
            )
        )
    rows_out.extend(
        comparison(
            f"{title}: {LABELS['asyncsink']} (adaptive) vs {label(side)}",
            "rows/s",
            runs["asyncsink"],
            runs[side],
            None,
        )
        for side in runs
        if side.startswith("fixed")
    )
    return rows_out


def label(side: str) -> str:
    return side_label(side, LABELS)


def print_comparisons(rows_out: list[dict[str, Any]]) -> None:
    """``sides.print_comparisons`` with room for ratios in the thousands (a request per
    row)."""
    width = max(len(row["name"]) for row in rows_out) + 2
    print(
        f"\n{'comparison':<{width}}{'ratio':>10}{'paired: median (min-max)':>32}{'target':>9}  met"
    )
    for row in rows_out:
        paired = f"{row['paired_ratio']:.2f}x ({row['paired_min']:.2f}-{row['paired_max']:.2f})"
        if row["target"] is None:
            target, verdict = "-", "(for information)"
        else:
            target, verdict = f">={row['target']:g}x", "yes" if row["met"] else "NO"
        print(f"{row['name']:<{width}}{row['ratio']:>9.2f}x{paired:>32}{target:>9}  {verdict}")


# ---------------------------------------------------------------------- profiling


def partition_batches(count: int, batch_rows: int = 10_000) -> list[Any]:
    """The rows ``rows`` gives, as the Arrow record batches a Python worker reads through
    ``mapInArrow`` (Spark's default of 10,000 rows a batch)."""
    import pyarrow as pa

    batches = []
    for start in range(0, count, batch_rows):
        ids = range(start, min(count, start + batch_rows))
        columns = [
            pa.array([f"r-{i:09d}" for i in ids], pa.string()),
            pa.array(ids, pa.int64()),
            pa.array([f"customer-{i % 9973:04d}" for i in ids], pa.string()),
            pa.array([round((i * 37) % 100_000 / 100, 2) for i in ids], pa.float64()),
            pa.array([i % 7 != 0 for i in ids], pa.bool_()),
        ]
        names = ["id", "seq", "customer", "amount", "ok"]
        batches.append(pa.RecordBatch.from_arrays(columns, names=names))
    return batches


def profile_partition(url: str, count: int) -> None:
    """Profile one partition's Python side in this process, as a Spark worker runs it:
    Arrow record batches read as ``ArrowRows`` chunks (``batch_chunks``) and handed by the
    task thread to the worker's event loop thread (``run_chunks``), where the writer
    encodes and sends them. Each thread is profiled by its own CPU time; the batched
    baseline (``post_batched`` over the same rows) is timed alongside."""
    import cProfile

    from pyspark.sql import Row
    from pyspark.sql.types import _parse_datatype_string
    from sides import print_profile, profile_cpu

    from asyncsink.spark import SinkSpec
    from asyncsink.spark.arrow import batch_chunks
    from asyncsink.spark.runner import _worker_portal, run_chunks

    batches = partition_batches(count)
    names = list(batches[0].schema.names)
    schema = _parse_datatype_string(
        "id string, seq long, customer string, amount double, ok boolean"
    )
    spec = SinkSpec("http", {"url": url})

    def deliver() -> None:
        chunks = batch_chunks(iter(batches), schema, as_dicts=spec.reads_mappings)
        run_chunks(spec, chunks, "profile", 0)

    deliver()  # warm up: the loop thread, the client, its connections
    portal = _worker_portal()
    task_profile = cProfile.Profile(time.thread_time)
    loop_profile = cProfile.Profile(time.thread_time)
    portal.call(loop_profile.enable)
    task_profile.runcall(deliver)
    portal.call(loop_profile.disable)
    task_raw, task_total = _thread_profile(task_profile)
    loop_raw, loop_total = _thread_profile(loop_profile)

    make = Row(*names)
    partition = [make(*row.values()) for batch in batches for row in batch.to_pylist()]
    _, batched = profile_cpu(post_batched, url, iter(partition))
    print(
        f"\nprofile (CPU time) of one partition's Python side, {count:,} rows in "
        f"{len(batches)} Arrow batches: task thread {task_total:.2f} s, event loop thread "
        f"{loop_total:.2f} s; batched requests {batched:.2f} s. The event loop thread's time:"
    )
    print_profile(loop_raw, loop_total)
    print("\nThe task thread's time (reading batches, handing chunks over):")
    print_profile(task_raw, task_total)


def _thread_profile(profile: Any) -> tuple[dict[Any, Any], float]:
    """The raw statistics of a profile of one thread and its total CPU seconds."""
    import pstats

    raw: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return raw, sum(entry[2] for entry in raw.values()) or 1e-9


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows asyncsink writes")
    parser.add_argument("--per-row-rows", type=int, default=2_000, help="slice, per-row side")
    parser.add_argument("--batched-rows", type=int, default=200_000, help="slice, batched side")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all sides")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency")
    parser.add_argument("--quick", action="store_true", help="100k / 500 / 50k rows, 2 rounds")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--fixed", type=int, help="add asyncsink at this many in flight")
    parser.add_argument("--profile", action="store_true", help="profile one partition")
    parser.add_argument(
        "--schema",
        choices=("events", "flat"),
        default="events",
        help="the event table (timestamp, date, struct, array, map, decimal...) or flat rows",
    )
    parser.add_argument("--sides", help="comma-separated sides to run (default: all)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.per_row_rows, args.batched_rows, args.rounds = 100_000, 500, 50_000, 2
    sides = [*SIDES[:1], *([f"fixed{args.fixed}"] if args.fixed else []), *SIDES[1:]]
    if args.schema == "flat":
        sides = [side for side in sides if not side.startswith("peer")]
    else:
        sides = [side for side in sides if side not in ("rows_null", "arrow_null")]
    if args.sides:
        wanted = args.sides.split(",")
        unknown = set(wanted) - set(sides)
        if unknown:
            parser.error(f"--sides: unknown {sorted(unknown)}; choose from {sides}")
        sides = [side for side in sides if side in wanted]
    counts = {side: args.rows for side in sides}
    counts.update(per_row=args.per_row_rows, batched=args.batched_rows)
    shape = "event rows of ~250 B JSON" if args.schema == "events" else "rows of ~85 B JSON"
    print(
        f"Spark local[{PARTITIONS}] and {PARTITIONS} partitions per side, {shape}, "
        f"endpoint latency {args.latency_ms:g} ms; FaultServer and every side in a process "
        f"of its own, median (min-max) of {args.rounds} rounds (sides in rotating order); "
        f"{load_average()}",
        flush=True,
    )
    started = time.monotonic()
    with FaultServer(Faults(latency_ms=args.latency_ms)) as server:
        runs, cpu = measure(server, sides, counts, args.rounds, args.schema)
        print(f"\n{time.monotonic() - started:.0f} s in all ({load_average()})")
        print(
            f"{'side':<52}{'rows per run':>14}{'rows/s: median (min-max)':>34}"
            f"{'CPU us/row: median (min-max)':>34}"
        )
        for side in sides:
            print(
                f"{label(side):<52}{counts[side]:>14,}{spread(runs[side]):>34}"
                f"{spread(cpu[side], 2):>34}"
            )
        print(
            "(CPU: the side's process, its JVM and its Python workers; the endpoint, in a "
            "process of its own, is not counted)"
        )
        print(
            "(a request per row cannot write a million rows in reasonable time: each "
            "baseline writes a slice of the same rows, and the sides are compared by rows/s)"
        )
        rows_out = comparisons(runs, cpu, args.latency_ms, args.schema)
        print_comparisons(rows_out)
        sys.stdout.flush()
        if args.profile:
            server.reset()
            profile_partition(server.ingest_url, 100_000)
    summary = {
        "benchmark": "spark",
        "title": f"Spark ({args.schema} rows) to a {args.latency_ms:g} ms HTTP endpoint",
        "config": {
            "schema": args.schema,
            "rows": counts,
            "partitions": PARTITIONS,
            "batch": BATCH,
            "rounds": args.rounds,
            "latency_ms": args.latency_ms,
            **machine(),
        },
        "results": {
            side: {
                "rows": counts[side],
                "rows_per_s": statistics.median(runs[side]),
                "runs": runs[side],
                "cpu_us_per_row": statistics.median(cpu[side]),
                "cpu_runs": cpu[side],
            }
            for side in sides
        },
        "comparisons": rows_out,
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    exit_on_missed(main())
