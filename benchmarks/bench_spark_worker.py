"""Where a Spark worker's CPU goes on event rows: asyncsink's path against the peer's.

One partition of event rows (``asyncsink.demo.events``) is read from a local Spark
session into this process as the record batches ``mapInArrow`` hands a worker: every
column through Arrow, the JSON text ``foreach_partition`` asks for
(``asyncsink.spark.json_columns``), and the peer's ``to_json(struct(*))``. Each side
then runs here, timed by this process's CPU (``getrusage``): encoding alone, and the
whole worker to a 0 ms endpoint (``FaultServer``). The JVM's share is not counted;
``bench_spark.py`` measures the sides whole.

    .venv/bin/python benchmarks/bench_spark_worker.py [--rows N] [--rounds R]
"""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable
from typing import Any

import bench_spark
from sides import load_average, spark_session


def cpu_of(run: Callable[[], Any]) -> float:
    before = resource.getrusage(resource.RUSAGE_SELF)
    run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    from asyncsink.demo.events import event_columns
    from asyncsink.encoding import JsonContract, encode_batch
    from asyncsink.entries.arrow_rows import ArrowRows
    from asyncsink.spark import SinkSpec
    from asyncsink.spark.json_columns import json_plan, mark_json_fields
    from asyncsink.spark.runner import run_chunks
    from asyncsink.testing import Faults, FaultServer

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = args.rows
    spark = spark_session("local[1]")
    df = spark.range(0, rows, 1, 1).selectExpr("id", *event_columns("id"))
    names = [f"_{i}" for i in range(len(df.columns))]
    plan = json_plan(df.schema, JsonContract())
    text = df.toDF(*names).selectExpr(*plan.projection(names)).toArrow().to_batches(10_000)
    columns = df.toArrow().to_batches(10_000)
    peer = df.selectExpr("to_json(struct(*)) AS json").toArrow().to_batches(10_000)
    contract, fields = JsonContract(), list(df.columns)
    results: dict[str, list[float]] = {}
    with FaultServer(Faults(latency_ms=0)) as server:
        spec = SinkSpec("http", {"url": server.ingest_url})
        sides: dict[str, Callable[[], Any]] = {
            "asyncsink: mark and encode the JSON text": lambda: [
                encode_batch(mark_json_fields(b, plan), contract) for b in text
            ],
            "asyncsink: encode every column": lambda: [
                encode_batch(b, contract, fields) for b in columns
            ],
            "asyncsink: whole worker, JSON text": lambda: run_chunks(
                spec, (ArrowRows(mark_json_fields(b, plan)) for b in text), "w", 0
            ),
            "asyncsink: whole worker, every column": lambda: run_chunks(
                spec, (ArrowRows(b, fields) for b in columns), "w", 0
            ),
            "peer: bodies built": lambda: list(bench_spark.peer_null_batches(iter(peer))),
            "peer: whole worker": lambda: list(
                bench_spark.peer_batches(server.ingest_url, iter(peer))
            ),
        }
        for round_ in range(args.rounds + 1):  # the first warms up
            for name, run in sides.items():
                seconds = cpu_of(run)
                server.reset()
                if round_:
                    results.setdefault(name, []).append(seconds / rows * 1e6)
    print(f"Python worker CPU, {rows:,} event rows, µs a row ({load_average()}):")
    for name, values in results.items():
        values.sort()
        print(f"  {name:<42} {values[len(values) // 2]:.2f} ({values[0]:.2f}-{values[-1]:.2f})")


if __name__ == "__main__":
    main()
