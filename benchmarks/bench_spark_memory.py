"""Bounded memory in Spark: peak RSS of the Python worker writing 1M vs 10M event rows.

Each size runs in a fresh process with its own Spark session (``local[1]``: one task at a
time, one reused Python worker) and its own endpoint (``FaultServer``, 0 ms, in a process
of its own). ``foreach_partition`` writes the rows of the event table (the same
expressions as the demo and ``bench_spark.py``: timestamp, date, struct, array, map,
decimal...) in one partition; then a small job asks the Python worker for its peak
resident set size (``ru_maxrss``). The worker's memory must not grow with the rows it
writes: the goal is 10M peak - 1M peak < 50 MB. The table is printed with the machine's
load average.

    .venv/bin/python benchmarks/bench_spark_memory.py [--sizes 1000000,10000000] [--quick]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from sides import load_average, machine, spark_session, write_summary

GOAL_MB = 50.0


def worker_peak(batches: Any) -> Any:
    """In the Python worker: its peak RSS in KiB and its process id."""
    import resource

    import pyarrow as pa

    for _ in batches:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield pa.RecordBatch.from_arrays([pa.array([peak]), pa.array([os.getpid()])], ["kb", "pid"])


def child(count: int) -> None:
    """Write ``count`` event rows from a fresh session; print the figures as JSON."""
    from asyncsink.demo.events import event_columns
    from asyncsink.spark import foreach_partition
    from asyncsink.testing import Faults, FaultServer

    spark = spark_session("local[1]")
    try:
        with FaultServer(Faults(latency_ms=0)) as server:
            df = spark.range(0, count, 1, 1).selectExpr("id", *event_columns("id"))
            started = time.perf_counter()
            stats = foreach_partition(df, "http", {"url": server.ingest_url})
            seconds = time.perf_counter() - started
            if stats.delivered != count or server.stats().unique_ids != count:
                raise SystemExit(f"delivered {stats.delivered} of {count}")
        peak = spark.range(0, 1, 1, 1).mapInArrow(worker_peak, "kb long, pid long").collect()
    finally:
        spark.stop()
    line = {"rows": count, "worker_peak_kb": peak[0].kb, "worker_pid": peak[0].pid,
            "seconds": round(seconds, 1), "rows_per_s": round(count / seconds)}  # fmt: skip
    print(orjson.dumps(line).decode(), flush=True)


def run_size(count: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(count)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the run of {count:,} rows failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="two row counts")
    parser.add_argument("--quick", action="store_true", help="100,000 vs 1,000,000 rows")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return {}
    sizes = [100_000, 1_000_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    small, large = min(sizes), max(sizes)
    runs = [run_size(count) for count in (small, large)]
    growth_mb = (runs[1]["worker_peak_kb"] - runs[0]["worker_peak_kb"]) / 1024
    print(
        "peak RSS of the Python worker of a local[1] session writing event rows with "
        f"foreach_partition to a 0 ms endpoint, each size in a fresh session ({load_average()})"
    )
    print(f"{'rows':>12}{'worker peak MB':>16}{'seconds':>9}{'rows/s':>10}")
    for run in runs:
        print(
            f"{run['rows']:>12,}{run['worker_peak_kb'] / 1024:>16.1f}{run['seconds']:>9.1f}"
            f"{run['rows_per_s']:>10,}"
        )
    met = growth_mb < GOAL_MB
    print(
        f"growth {small:,} -> {large:,} rows: {growth_mb:+.1f} MB (goal < {GOAL_MB:g} MB): "
        f"{'met' if met else 'NOT met'}"
    )
    summary = {
        "benchmark": "spark-memory",
        "title": "Peak RSS of a Spark Python worker, event rows",
        "config": {"sizes": [small, large], **machine()},
        "results": runs,
        "comparisons": [
            {
                "name": f"Memory: Python worker peak RSS growth {small:,} -> {large:,} rows",
                "unit": "MB",
                "asyncsink": round(growth_mb, 1),
                "baseline": None,
                "ratio": None,
                "target": GOAL_MB,
                "met": met,
            }
        ],
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
