"""Bounded memory: peak RSS of one writer delivering 1M entries vs 10M entries.

Each size runs in a fresh Python process (so that one run's peak cannot hide the other's)
that writes rows (dicts of ~85 bytes of JSON, made one at a time by a generator, never
held in a list), encoded by the HTTP sink's ``JsonEntryEncoder``, through an
``AsyncSinkWriter`` with its default limits (500 entries a request, from 16 up to
128 in flight as the latency allows, 10,000 buffered) to a slow in-process destination
(each request takes 100 ms, so the writer outruns it and ``write`` waits: backpressure;
the most entries seen buffered and in flight are printed to show it). The process reads
its own peak resident set size (``ru_maxrss``) at the end. The writer's memory must not grow
with the number of entries: the goal is 10M peak - 1M peak < 50 MB. The table is printed
with the machine's load average (the sizes run one after the other; only their times
depend on it).

    .venv/bin/python benchmarks/bench_memory.py [--sizes 1000000,10000000]
        [--latency-ms 100] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
from sides import load_average, machine, write_summary

from asyncsink import AsyncSinkWriter, SinkOptions
from asyncsink.encoding import JsonEntryEncoder

GOAL_MB = 50.0


class SlowDestination(AsyncSinkWriter[dict[str, Any], bytes]):
    """JSON entries to a destination that takes ``latency`` seconds per request."""

    def __init__(self, latency: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.latency = latency
        self.received = 0
        self.encode = JsonEntryEncoder()

    def convert(self, element: dict[str, Any]) -> bytes:
        return self.encode(element)

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        await anyio.sleep(self.latency)
        self.received += len(entries)


def entries(count: int) -> Iterator[dict[str, Any]]:
    for i in range(count):
        yield {
            "id": f"e-{i:09d}",
            "seq": i,
            "customer": f"customer-{i % 9973:04d}",
            "amount": round((i * 37) % 100_000 / 100, 2),
            "ok": i % 7 != 0,
        }


def peak_rss_kb() -> int:
    """This process's peak resident set size in KiB (``ru_maxrss`` is KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


async def deliver(count: int, latency: float) -> tuple[SlowDestination, int, int]:
    """Deliver ``count`` entries; also the most entries seen buffered and in flight."""
    writer = SlowDestination(latency, options=SinkOptions())
    most_buffered = most_in_flight = 0

    async def watch() -> None:
        nonlocal most_buffered, most_in_flight
        while True:
            stats = writer.statistics()
            most_buffered = max(most_buffered, stats.buffered)
            most_in_flight = max(most_in_flight, stats.in_flight)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        async with writer:
            await writer.write_all(entries(count))
        tg.cancel_scope.cancel()
    return writer, most_buffered, most_in_flight


def child(count: int, latency_ms: float) -> None:
    """Run one size in this process and print its figures as one JSON line."""
    before = peak_rss_kb()
    started = time.perf_counter()
    writer, most_buffered, most_in_flight = anyio.run(deliver, count, latency_ms / 1000)
    elapsed = time.perf_counter() - started
    if writer.received != count:
        raise SystemExit(f"delivered {writer.received} of {count}")
    stats = writer.statistics()
    line = {
        "entries": count,
        "peak_rss_kb": peak_rss_kb(),
        "rss_before_kb": before,
        "seconds": round(elapsed, 2),
        "entries_per_s": round(count / elapsed),
        "requests": stats.requests,
        "most_buffered": most_buffered,
        "most_in_flight": most_in_flight,
    }
    print(orjson.dumps(line).decode(), flush=True)


def run_size(count: int, latency_ms: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(count), "--latency-ms", str(latency_ms)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the run of {count:,} entries failed:\n{done.stderr}")
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="two entry counts")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="per request")
    parser.add_argument("--quick", action="store_true", help="100,000 vs 1,000,000 entries")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.latency_ms)
        return {}
    sizes = [100_000, 1_000_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    small, large = sorted(sizes)[:1] + sorted(sizes)[-1:]
    runs = [run_size(count, args.latency_ms) for count in (small, large)]
    growth_mb = (runs[1]["peak_rss_kb"] - runs[0]["peak_rss_kb"]) / 1024
    print(
        f"peak RSS of one writer (default limits) to a destination taking "
        f"{args.latency_ms:g} ms per request, each size in a fresh process ({load_average()})"
    )
    print(
        f"{'entries':>12}{'peak RSS MB':>13}{'at start MB':>13}{'seconds':>9}{'entries/s':>11}"
        f"{'most buffered':>15}{'most in flight':>16}"
    )
    for run in runs:
        print(
            f"{run['entries']:>12,}{run['peak_rss_kb'] / 1024:>13.1f}"
            f"{run['rss_before_kb'] / 1024:>13.1f}{run['seconds']:>9.1f}"
            f"{run['entries_per_s']:>11,}{run['most_buffered']:>15,}{run['most_in_flight']:>16,}"
        )
    met = growth_mb < GOAL_MB
    print(
        f"growth {small:,} -> {large:,} entries: {growth_mb:+.1f} MB "
        f"(goal < {GOAL_MB:g} MB): {'met' if met else 'NOT met'}"
    )
    summary = {
        "benchmark": "memory",
        "title": "Peak RSS, one writer, slow destination",
        "config": {
            "sizes": [small, large],
            "latency_ms": args.latency_ms,
            **machine(),
        },
        "results": runs,
        "comparisons": [
            {
                "name": f"Memory: peak RSS growth {small:,} -> {large:,} entries",
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
