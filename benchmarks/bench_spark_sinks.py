"""Spark event rows to each built-in sink: the same path for HTTP, Kinesis and Elasticsearch.

One Spark session (``local[2]``, two partitions) writes the rows of the event table (the
demo's ``event_columns``: timestamp, date, struct, array, map, decimal...; with an ``id``
of ``r<n>``) with ``foreach_partition`` to each sink's local destination, the one the demo
uses: the fault-injecting HTTP endpoint (0 ms, no faults), kinesalite (Kinesis; one
Node.js thread, so its own speed bounds the figure) and the local Elasticsearch-compatible
``_bulk`` endpoint. Each run is checked (every row held once) and each sink runs
``--rounds`` times after a warm-up run; rows/s and the CPU time per row of this process
tree (driver, JVM, Python workers and the destination, which this process starts) are
printed as the median (min-max), with the machine's load average. These
rows are given for information: no peer writes to every destination.

    .venv/bin/python benchmarks/bench_spark_sinks.py [--rows N] [--rounds R] [--quick]
        [--sinks http,kinesis,elasticsearch] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sides import (
    _tree_rusage,
    descendants_cpu,
    load_average,
    machine,
    spark_session,
    spread,
    write_summary,
)

from asyncsink.demo.destinations import destination_for
from asyncsink.demo.events import event_columns
from asyncsink.demo.settings import DemoSettings

ROWS = {"http": 300_000, "kinesis": 40_000, "elasticsearch": 200_000}


def start_spark() -> Any:
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    spark = spark_session("local[2]")
    return spark


def run_sink(spark: Any, sink: str, rows: int, rounds: int) -> dict[str, Any]:
    """Warm-up, then ``rounds`` checked runs of ``rows`` rows to ``sink``'s destination."""
    from asyncsink.spark import foreach_partition

    rates: list[float] = []
    cpu: list[float] = []
    for round_ in range(rounds + 1):
        destination: Any = destination_for(sink)
        with tempfile.TemporaryDirectory(prefix="asyncsink-bench-") as workdir:
            settings = DemoSettings(
                sink=sink, rows=rows, throttle_rate=0, error_rate=0, partial_failure_rate=0,
                latency_ms=0, kill=False,
            )  # fmt: skip
            destination.start(settings, Path(workdir))
            try:
                df = spark.range(0, rows, 1, 2).selectExpr(
                    "concat('r', id) AS id", *event_columns("id")
                )
                before = _tree_rusage() + descendants_cpu(os.getpid())
                started = time.perf_counter()
                stats = foreach_partition(df, sink, destination.sink_options())
                seconds = time.perf_counter() - started
                used = _tree_rusage() + descendants_cpu(os.getpid()) - before
                delivery = destination.check(rows)
            finally:
                destination.stop()
        if stats.delivered != rows or delivery.stored != rows or delivery.duplicates:
            raise RuntimeError(f"{sink}: {stats.delivered} delivered, {delivery}")
        if round_:  # the first run warms the JVM, the workers and the clients
            rates.append(rows / seconds)
            cpu.append(used / rows * 1e6)
    return {"rows": rows, "rows_per_s": rates, "cpu_us_per_row": cpu}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, help="rows a run (default: per sink)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sinks", default="http,kinesis,elasticsearch")
    parser.add_argument("--quick", action="store_true", help="a tenth of the rows, 1 round")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    sinks = args.sinks.split(",")
    print(f"Spark local[2], event rows, foreach_partition to each sink ({load_average()})")
    spark = start_spark()
    results: dict[str, Any] = {}
    try:
        for sink in sinks:
            rows = args.rows or ROWS[sink] // (10 if args.quick else 1)
            results[sink] = run_sink(spark, sink, rows, 1 if args.quick else args.rounds)
    finally:
        spark.stop()
    print(f"\n{'sink':<16}{'rows a run':>12}{'rows/s: median (min-max)':>32}{'CPU us/row':>24}")
    for sink, result in results.items():
        print(
            f"{sink:<16}{result['rows']:>12,}{spread(result['rows_per_s']):>32}"
            f"{spread(result['cpu_us_per_row'], 2):>24}"
        )
    print(f"({load_average()}; CPU: this process, its JVM, Python workers and destination)")
    summary = {
        "benchmark": "spark-sinks",
        "title": "Spark event rows to each sink's local destination",
        "config": {"rounds": args.rounds, **machine()},
        "results": results,
        "comparisons": [
            {
                "name": f"Spark event rows to {sink} (local destination), rows/s",
                "unit": "rows/s",
                "asyncsink": round(statistics.median(result["rows_per_s"])),
                "baseline": None,
                "ratio": None,
                "target": None,
                "met": None,
            }
            for sink, result in results.items()
        ],
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
