"""HTTP delivery: the asyncsink HTTP sink vs what a user would otherwise write, same endpoint.

Three sides deliver the same JSON entries (~85 bytes each) in requests of 500 to the
fault-injecting endpoint (``FaultServer``, in its own process, no faults), first with 20 ms
of server latency, then with none:

- asyncsink: the HTTP sink (``sinks.http.create_writer``) with its defaults (16 requests
  in flight, AIMD rate limiting, an ``Idempotency-Key`` per request, per-entry results
  read from each answer);
- requests loop: a ``requests.Session`` posting one batch at a time and checking each
  answer, as a ``foreachPartition`` function typically does;
- hand-written: an httpx + anyio loop with a semaphore keeping 16 requests in flight,
  checking each answer.

Both baselines encode each batch with orjson, as the sink encodes its entries, so the
comparison measures the delivery machinery rather than the JSON library. The sides run
in one process, in rotating order, for several rounds; every run is checked (the endpoint
must hold exactly the entries sent) and the endpoint is reset between runs. Prints the
median entries/s of each side (wall clock), the CPU time per entry of the client and of
the endpoint (steadier than wall-clock figures on a shared machine), and the ratios with
their targets (asyncsink >= 5x the requests loop and >= 0.95x hand-written at 20 ms;
>= 1.2x the requests loop at 0 ms): the ratio of the medians, and the median of each
round's ratio (its sides ran back to back) as a check on noise.

    .venv/bin/python benchmarks/bench_http.py [--entries N] [--rounds R] [--quick]
        [--latencies 20,0] [--profile] [--json PATH]

``--profile`` then profiles one hand-written and one asyncsink run per latency (cProfile,
CPU time) and prints where asyncsink's client time goes, by file and by function.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import requests
from sides import (
    comparison,
    make_entries,
    mean_json_size,
    print_profile,
    process_cpu,
    profile_cpu,
    rotating_rounds,
)

from asyncsink.testing import Faults, FaultServer
from sinks.http import create_writer

BATCH = 500
IN_FLIGHT = 16
JSON_HEADERS = {"content-type": "application/json"}

# (latency in ms, baseline, target ratio asyncsink / baseline)
TARGETS: dict[tuple[float, str], float] = {
    (20.0, "requests"): 5.0,
    (20.0, "hand"): 0.95,
    (0.0, "requests"): 1.2,
}

SIDES = ("asyncsink", "requests", "hand")
LABELS = {
    "asyncsink": "asyncsink HTTP sink",
    "requests": "requests loop (1 in flight)",
    "hand": f"hand-written httpx+anyio ({IN_FLIGHT} in flight)",
}


def check_answer(status: int, content: bytes) -> None:
    """What a careful loop checks: the status, and the endpoint's per-entry verdict."""
    if not 200 <= status <= 299:
        raise RuntimeError(f"the endpoint answered {status}: {content[:200]!r}")
    if orjson.loads(content).get("errors"):
        raise RuntimeError("the endpoint rejected entries")


# ---------------------------------------------------------------------- the three sides


async def _asyncsink(url: str, entries: list[dict[str, Any]]) -> int:
    writer = create_writer(
        {"url": url, "maxBatchSize": str(BATCH), "maxInFlightRequests": str(IN_FLIGHT)}
    )
    async with writer:
        await writer.write_all(entries)
    return writer.statistics().delivered


def run_asyncsink(url: str, entries: list[dict[str, Any]]) -> int:
    return anyio.run(_asyncsink, url, entries)


def run_requests(url: str, entries: list[dict[str, Any]]) -> int:
    """One batch at a time over a keep-alive session."""
    sent = 0
    with requests.Session() as session:
        for start in range(0, len(entries), BATCH):
            batch = entries[start : start + BATCH]
            response = session.post(url, data=orjson.dumps(batch), headers=JSON_HEADERS)
            check_answer(response.status_code, response.content)
            sent += len(batch)
    return sent


async def _hand(url: str, entries: list[dict[str, Any]]) -> int:
    sent = 0
    limit = anyio.Semaphore(IN_FLIGHT)
    pool = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(limits=pool, timeout=60) as client:

        async def send(batch: list[dict[str, Any]]) -> None:
            nonlocal sent
            try:
                response = await client.post(url, content=orjson.dumps(batch), headers=JSON_HEADERS)
                check_answer(response.status_code, response.content)
                sent += len(batch)
            finally:
                limit.release()

        async with anyio.create_task_group() as tg:
            for start in range(0, len(entries), BATCH):
                await limit.acquire()
                tg.start_soon(send, entries[start : start + BATCH])
    return sent


def run_hand(url: str, entries: list[dict[str, Any]]) -> int:
    return anyio.run(_hand, url, entries)


RUNNERS: dict[str, Callable[[str, list[dict[str, Any]]], int]] = {
    "asyncsink": run_asyncsink,
    "requests": run_requests,
    "hand": run_hand,
}


# ---------------------------------------------------------------------- measuring


def timed(server: FaultServer, side: str, entries: list[dict[str, Any]]) -> tuple[float, ...]:
    """One checked run: entries/s of wall-clock time, then the client's and the endpoint's
    CPU microseconds per entry."""
    server.reset()
    server_cpu = process_cpu(server.pid)
    started, cpu = time.perf_counter(), time.process_time()
    sent = RUNNERS[side](server.ingest_url, entries)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    server_cpu = process_cpu(server.pid) - server_cpu
    stats = server.stats()
    if sent != len(entries) or stats.entries_received != len(entries) or stats.duplicates:
        raise RuntimeError(
            f"{side}: sent {sent}, the endpoint holds {stats.entries_received} "
            f"({stats.duplicates} duplicates) of {len(entries)}"
        )
    n = len(entries)
    return n / elapsed, cpu / n * 1e6, server_cpu / n * 1e6


def measure(
    server: FaultServer, entries: list[dict[str, Any]], latency_ms: float, rounds: int
) -> dict[str, dict[str, Any]]:
    server.set_faults(Faults(latency_ms=latency_ms))
    first = entries[: min(len(entries), 10 * BATCH)]  # imports, connection pools, caches
    runs = rotating_rounds(
        SIDES,
        rounds,
        run=lambda side: timed(server, side, entries),
        warm=lambda side: timed(server, side, first),
    )
    return {
        side: {
            "entries_per_s": statistics.median(run[0] for run in results),
            "cpu_us_per_entry": statistics.median(run[1] for run in results),
            "server_cpu_us_per_entry": statistics.median(run[2] for run in results),
            "runs": [round(run[0]) for run in results],
            "cpu_runs": [round(run[1], 2) for run in results],
        }
        for side, results in runs.items()
    }


def comparisons(results: dict[float, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        comparison(
            f"HTTP {latency_ms:g} ms: asyncsink vs {LABELS[baseline]}",
            "entries/s",
            results[latency_ms]["asyncsink"]["runs"],
            results[latency_ms][baseline]["runs"],
            target,
        )
        for (latency_ms, baseline), target in TARGETS.items()
        if latency_ms in results
    ]


# ---------------------------------------------------------------------- profiling


def profile_run(server: FaultServer, entries: list[dict[str, Any]], latency_ms: float) -> None:
    """Profile one hand-written and one asyncsink run and print where asyncsink's client
    time goes."""
    server.set_faults(Faults(latency_ms=latency_ms))
    totals = {}
    for side in ("hand", "asyncsink"):
        server.reset()
        raw, totals[side] = profile_cpu(RUNNERS[side], server.ingest_url, entries)
    total = totals["asyncsink"]
    print(
        f"\nprofile (CPU time) of one run of {len(entries):,} entries at {latency_ms:g} ms: "
        f"asyncsink {total:.2f} s, hand-written {totals['hand']:.2f} s "
        f"({total / totals['hand']:.2f}x); asyncsink's time:"
    )
    print_profile(raw, total)


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000, help="entries per run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of all three sides")
    parser.add_argument("--latencies", default="20,0", help="server latencies in ms")
    parser.add_argument("--quick", action="store_true", help="20,000 entries, 3 rounds")
    parser.add_argument("--profile", action="store_true", help="profile asyncsink runs")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.entries, args.rounds = 20_000, 3
    latencies = [float(text) for text in args.latencies.split(",") if text]
    entries = make_entries(args.entries)
    size = mean_json_size(entries)
    results: dict[float, dict[str, dict[str, Any]]] = {}
    with FaultServer() as server:
        print(
            f"{args.entries:,} entries of ~{size:.0f} B JSON, {BATCH} per request, "
            f"FaultServer in its own process, median of {args.rounds} rounds "
            f"(sides in rotating order), {os.cpu_count()} CPUs"
        )
        for latency_ms in latencies:
            results[latency_ms] = measure(server, entries, latency_ms, args.rounds)
            print(f"\nserver latency {latency_ms:g} ms")
            print(f"{'side':<42}{'entries/s':>12}{'CPU us/entry: client':>22}{'endpoint':>10}")
            for side in SIDES:
                row = results[latency_ms][side]
                print(
                    f"{LABELS[side]:<42}{row['entries_per_s']:>12,.0f}"
                    f"{row['cpu_us_per_entry']:>22.2f}{row['server_cpu_us_per_entry']:>10.2f}"
                )
        rows = comparisons(results)
        print(f"\n{'comparison':<70}{'ratio':>8}{'paired':>8}{'target':>8}  met")
        for row in rows:
            print(
                f"{row['name']:<70}{row['ratio']:>7.2f}x{row['paired_ratio']:>7.2f}x"
                f"{row['target']:>7.2f}x  {'yes' if row['met'] else 'NO'}"
            )
        if args.profile:
            for latency_ms in latencies:
                profile_run(server, entries, latency_ms)
    summary = {
        "benchmark": "http",
        "title": "HTTP sink vs requests loop and hand-written httpx+anyio",
        "config": {
            "entries": args.entries,
            "entry_bytes": round(size),
            "batch": BATCH,
            "in_flight": IN_FLIGHT,
            "rounds": args.rounds,
            "latencies_ms": latencies,
        },
        "results": {f"{latency:g}ms": sides for latency, sides in results.items()},
        "comparisons": rows,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return summary


if __name__ == "__main__":
    main()
