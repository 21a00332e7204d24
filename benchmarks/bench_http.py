"""HTTP delivery: the asyncsink HTTP sink vs what a user would otherwise write, same endpoint.

The sides deliver the same JSON entries (~85 bytes each) in requests of 500 to the
fault-injecting endpoint (``FaultServer``, in its own process, no faults) at each of the
server latencies asked for (100, 20 and 0 ms by default):

- asyncsink: the HTTP sink (``asyncsink.sinks.http.create_writer``) with its defaults (requests in
  flight adapted to their latency, up to 128; AIMD rate limiting; an ``Idempotency-Key``
  per request; per-entry results read from each answer), a new writer every run in one
  process, as a Spark worker runs task after task: each writer goes on, from its first
  answer, at the limit the one before it reached;
- asyncsink cold, for information: the same, but every run forgets what earlier writers
  learned, as the first task of a Spark worker does (it starts at 16 in flight);
- aiohttp loop: a hand-written ``aiohttp`` + ``asyncio`` loop with a semaphore keeping 16
  requests in flight, checking each answer: the strongest of the baselines;
- httpx loop: the same with ``httpx`` + ``anyio``;
- requests loop: a ``requests.Session`` posting one batch at a time and checking each
  answer, as a ``foreachPartition`` function typically does;
- asyncsink durable: the same with durable call records (a ``CallLog`` on a SQLite file,
  a fresh scope per run, completed at its end as the Spark driver does), against
  asyncsink without records: what remembering every request costs;
- with ``--fixed N``, for information: asyncsink with ``adaptiveConcurrency=false`` and
  N in flight, which shows what adapting adds;
- with ``--otel``: asyncsink in a process with an OpenTelemetry SDK configured (a meter
  provider with an in-memory reader), against asyncsink without one: what recording
  metrics costs the writer's hot path (target: at most 3% more client CPU per entry at
  0 ms);
- with ``--signed``: asyncsink signing every request with AWS SigV4 (``awsService``,
  static keys; botocore's signer over each body, with its SHA-256), against asyncsink
  without: what signing costs the client (target: at most 15% more client CPU per entry
  at 0 ms);
- with ``--memory-records``, for information: asyncsink with durable call records in an
  in-memory store (``MemoryStore``): the records' own work (a CRC-32 per entry, a record
  per call) without the SQLite writes, which separates the two costs.

The baselines encode each batch with orjson, as the sink encodes its entries, so the
comparison measures the delivery machinery rather than the JSON library.

Every side runs in a process of its own (``sides.SideProcess``), spawned once and kept for
all its runs, which times each run itself and measures its own CPU time (user + system):
the parent only orchestrates, and the endpoint's CPU time is read from its process. After
a warm-up run of each side, the sides run in rotating order for several rounds (A B C,
B C A, ...). The requests loop, one request at a time, keeps a steady rate whatever the
number of entries, so it delivers a slice of them sized to last about a second and a
half (whole runs of it at 100 ms would take a minute). Every run is checked (the endpoint
must hold exactly the entries sent) and the endpoint is reset between runs.

Prints, per latency and with the machine's load average, each side's entries/s and
client CPU per entry as the median with the minimum and maximum of its runs, and the
endpoint's CPU per entry; then the comparisons: the ratio of the medians, and the median
(min-max) of each round's ratio, with their targets:

- at 20 and 100 ms, asyncsink >= 1.5x the aiohttp loop (adaptive concurrency);
- at 0 ms, asyncsink >= 0.8x the aiohttp loop's throughput and <= 1.3x its client CPU
  per entry;
- asyncsink >= 5x the requests loop and >= 0.95x the httpx loop at 20 ms, >= 1.2x the
  requests loop at 0 ms;
- asyncsink durable >= 0.8x asyncsink without records at 0 ms, >= 0.95x at 20 and 100 ms.

Exits 1 when a target is missed, after printing everything. ``--quick`` (60,000 entries,
3 rounds) is a smoke test: at 100 ms its 120 requests end while asyncsink is still
raising its limit, so its ratios there are not figures to quote.

    .venv/bin/python benchmarks/bench_http.py [--entries N] [--rounds R] [--quick]
        [--latencies 100,20,0] [--wide] [--fixed N] [--memory-records] [--otel] [--signed]
        [--profile]
        [--sides durable,aiohttp] [--json PATH]

``--sides`` runs only the sides named (and asyncsink with its defaults, which every
comparison is of): a quicker look at one question, such as what durable records cost.

``--wide`` sends entries of about 160 bytes (two more fields) instead of about 85.

``--profile`` then profiles one aiohttp-loop and one asyncsink run per latency (cProfile,
CPU time, in this process) and prints where asyncsink's client time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx
import orjson
import requests
from sides import (
    SideProcess,
    comparison,
    exit_on_missed,
    load_average,
    machine,
    make_entries,
    make_wide_entries,
    mean_json_size,
    print_comparisons,
    print_profile,
    process_cpu,
    profile_cpu,
    rotating_rounds,
    side_label,
    spread,
    write_summary,
)

from asyncsink import CallLog, Scope
from asyncsink.policies.request_limit import forget_learned
from asyncsink.sinks.http import create_writer
from asyncsink.stores.memory import MemoryStore
from asyncsink.stores.sqlite import SQLiteStore
from asyncsink.testing import Faults, FaultServer

BATCH = 500
IN_FLIGHT = 16
JSON_HEADERS = {"content-type": "application/json"}
REQUESTS_LOOP_S = 1.5  # about how long a run of the requests loop lasts

# (latency in ms, baseline, target ratio asyncsink / baseline) for entries per second
TARGETS: dict[tuple[float, str], float] = {
    (100.0, "aiohttp"): 1.5,
    (20.0, "aiohttp"): 1.5,
    (0.0, "aiohttp"): 0.8,
    (20.0, "requests"): 5.0,
    (20.0, "httpx"): 0.95,
    (0.0, "requests"): 1.2,
}
# latency in ms -> the least entries/s asyncsink durable may reach / asyncsink without records
DURABLE_TARGETS: dict[float, float] = {100.0: 0.95, 20.0: 0.95, 0.0: 0.8}
# latency in ms -> the most client CPU per entry asyncsink may spend / the aiohttp loop's
CPU_TARGETS: dict[float, float] = {0.0: 1.3}
# latency in ms -> the most client CPU per entry asyncsink with an SDK may spend / without
OTEL_CPU_TARGETS: dict[float, float] = {0.0: 1.03}
# latency in ms -> the most client CPU per entry asyncsink signing with SigV4 may spend / without
SIGNED_CPU_TARGETS: dict[float, float] = {0.0: 1.15}
SIGNING = {"awsService": "execute-api", "region": "us-east-1",
           "awsAccessKeyId": "AKIDBENCHMARK", "awsSecretAccessKey": "bench-secret-key"}  # fmt: skip

SIDES = ("asyncsink", "cold", "durable", "aiohttp", "httpx", "requests")
BASELINES = ("aiohttp", "httpx", "requests")
LABELS = {
    "asyncsink": "asyncsink HTTP sink (defaults: adaptive)",
    "cold": "asyncsink, every run its process's first writer",
    "durable": "asyncsink, durable records (SQLite)",
    "memory": "asyncsink, durable records in memory",
    "otel": "asyncsink, OpenTelemetry SDK configured",
    "signed": "asyncsink, every request signed (AWS SigV4)",
    "aiohttp": f"hand-written aiohttp loop ({IN_FLIGHT} in flight)",
    "httpx": f"hand-written httpx+anyio loop ({IN_FLIGHT} in flight)",
    "requests": "requests loop (1 in flight)",
}


def check_answer(status: int, content: bytes) -> None:
    """What a careful loop checks: the status, and the endpoint's per-entry verdict."""
    if not 200 <= status <= 299:
        raise RuntimeError(f"the endpoint answered {status}: {content[:200]!r}")
    if orjson.loads(content).get("errors"):
        raise RuntimeError("the endpoint rejected entries")


# ---------------------------------------------------------------------- the sides


async def _asyncsink(
    url: str, entries: list[dict[str, Any]], call_log: CallLog | None = None, **options: str
) -> int:
    writer = create_writer({"url": url, "maxBatchSize": str(BATCH), **options}, call_log=call_log)
    async with writer:
        await writer.write_all(entries)
    if call_log is not None:
        await call_log.complete()  # what the Spark driver does once the write committed
    return writer.statistics().delivered


def run_asyncsink(url: str, entries: list[dict[str, Any]]) -> int:
    return anyio.run(_asyncsink, url, entries)


def run_cold(url: str, entries: list[dict[str, Any]]) -> int:
    """asyncsink as the first writer of its process: nothing learned of the endpoint."""
    forget_learned()
    return anyio.run(_asyncsink, url, entries)


class _Records:
    """The durable side's SQLite store (a file in a temporary folder of its process) and
    the number of its last scope: every run writes a fresh one."""

    store: SQLiteStore | None = None
    runs = 0


def run_durable(url: str, entries: list[dict[str, Any]]) -> int:
    if _Records.store is None:
        folder = tempfile.mkdtemp(prefix="asyncsink-bench-")
        _Records.store = SQLiteStore(Path(folder) / "records.db")
    _Records.runs += 1
    log = CallLog(_Records.store, Scope("bench-http", _Records.runs, 0))
    return anyio.run(_asyncsink, url, entries, log)


def run_memory(url: str, entries: list[dict[str, Any]]) -> int:
    _Records.runs += 1
    log = CallLog(MemoryStore(), Scope("bench-http", _Records.runs, 0))
    return anyio.run(_asyncsink, url, entries, log)


def run_otel(url: str, entries: list[dict[str, Any]]) -> int:
    """asyncsink in a process whose application configured an OpenTelemetry SDK."""
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return anyio.run(_asyncsink, url, entries)


def run_signed(url: str, entries: list[dict[str, Any]]) -> int:
    """asyncsink signing every request with AWS SigV4 (the endpoint does not check)."""
    return anyio.run(lambda: _asyncsink(url, entries, **SIGNING))


def run_fixed(url: str, entries: list[dict[str, Any]], in_flight: int) -> int:
    options = {"adaptiveConcurrency": "false", "maxInFlightRequests": str(in_flight)}
    return anyio.run(lambda: _asyncsink(url, entries, **options))


async def _aiohttp(url: str, entries: list[dict[str, Any]]) -> int:
    sent = 0
    limit = asyncio.Semaphore(IN_FLIGHT)
    connector = aiohttp.TCPConnector(limit=IN_FLIGHT)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send(batch: list[dict[str, Any]]) -> None:
            nonlocal sent
            try:
                body = orjson.dumps(batch)
                async with session.post(url, data=body, headers=JSON_HEADERS) as response:
                    check_answer(response.status, await response.read())
                sent += len(batch)
            finally:
                limit.release()

        async with asyncio.TaskGroup() as tg:
            for start in range(0, len(entries), BATCH):
                await limit.acquire()
                tg.create_task(send(entries[start : start + BATCH]))
    return sent


def run_aiohttp(url: str, entries: list[dict[str, Any]]) -> int:
    return asyncio.run(_aiohttp(url, entries))


async def _httpx(url: str, entries: list[dict[str, Any]]) -> int:
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


def run_httpx(url: str, entries: list[dict[str, Any]]) -> int:
    return anyio.run(_httpx, url, entries)


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


RUNNERS: dict[str, Callable[[str, list[dict[str, Any]]], int]] = {
    "asyncsink": run_asyncsink,
    "cold": run_cold,
    "durable": run_durable,
    "memory": run_memory,
    "otel": run_otel,
    "aiohttp": run_aiohttp,
    "httpx": run_httpx,
    "requests": run_requests,
    "signed": run_signed,
}


def runner(side: str) -> Callable[[str, list[dict[str, Any]]], int]:
    """The function that runs ``side``: one of ``RUNNERS``, or ``fixedN``."""
    if side.startswith("fixed"):
        return functools.partial(run_fixed, in_flight=int(side[5:]))
    return RUNNERS[side]


def label(side: str) -> str:
    return side_label(side, LABELS)


# ---------------------------------------------------------------------- measuring


def entries_for(side: str, entries: int, latency_ms: float) -> int:
    """How many entries a run of ``side`` delivers: all of them, except for the requests
    loop, whose steady rate a slice of about ``REQUESTS_LOOP_S`` measures as well."""
    if side != "requests":
        return entries
    batches = int(REQUESTS_LOOP_S / (latency_ms / 1000 + 0.004))
    return min(entries, max(10, batches) * BATCH)


def timed(server: FaultServer, side: SideProcess, count: int) -> tuple[float, float, float]:
    """One checked run: entries/s of wall-clock time, then the client's and the endpoint's
    CPU microseconds per entry."""
    server.reset()
    server_cpu = process_cpu(server.pid)
    run = side.run(count)
    server_cpu = process_cpu(server.pid) - server_cpu
    stats = server.stats()
    if run.sent != count or stats.entries_received != count or stats.duplicates:
        raise RuntimeError(
            f"{side.name}: sent {run.sent}, the endpoint holds {stats.entries_received} "
            f"({stats.duplicates} duplicates) of {count}"
        )
    return count / run.seconds, run.cpu_seconds / count * 1e6, server_cpu / count * 1e6


def measure(
    server: FaultServer,
    workers: dict[str, SideProcess],
    entries: int,
    latency_ms: float,
    rounds: int,
) -> dict[str, dict[str, Any]]:
    server.set_faults(Faults(latency_ms=latency_ms))
    counts = {side: entries_for(side, entries, latency_ms) for side in workers}
    runs = rotating_rounds(
        list(workers),
        rounds,
        run=lambda side: timed(server, workers[side], counts[side]),
        warm=lambda side: timed(server, workers[side], min(counts[side], 10 * BATCH)),
    )
    return {
        side: {
            "entries": counts[side],
            "entries_per_s": statistics.median(run[0] for run in results),
            "cpu_us_per_entry": statistics.median(run[1] for run in results),
            "server_cpu_us_per_entry": statistics.median(run[2] for run in results),
            "runs": [round(run[0]) for run in results],
            "cpu_runs": [round(run[1], 3) for run in results],
        }
        for side, results in runs.items()
    }


def _rate_row(
    latency_ms: float,
    sides: dict[str, dict[str, Any]],
    name: str,
    side: str,
    baseline: str,
    target: float | None = None,
) -> dict[str, Any]:
    """``side``'s entries/s against ``baseline``'s at one latency."""
    return comparison(
        f"HTTP {latency_ms:g} ms: {name}",
        "entries/s",
        sides[side]["runs"],
        sides[baseline]["runs"],
        target,
    )


def comparisons(results: dict[float, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every baseline at every latency (rows without a target are for information), and
    client CPU per entry against the aiohttp loop where a target sets a ceiling."""
    rows = []
    for latency_ms, sides in results.items():
        for baseline in [side for side in BASELINES if side in sides]:
            name = f"asyncsink vs {LABELS[baseline]}"
            target = TARGETS.get((latency_ms, baseline))
            rows.append(_rate_row(latency_ms, sides, name, "asyncsink", baseline, target))
        for durable in [side for side in ("durable", "memory") if side in sides]:
            name = f"{LABELS[durable]} vs without records"
            target = DURABLE_TARGETS.get(latency_ms) if durable == "durable" else None
            rows.append(_rate_row(latency_ms, sides, name, durable, "asyncsink", target))
        if "otel" in sides:
            rows.append(_rate_row(latency_ms, sides, LABELS["otel"] + " vs without",
                                  "otel", "asyncsink"))  # fmt: skip
            rows.append(
                comparison(
                    f"HTTP {latency_ms:g} ms: client CPU per entry, with an OpenTelemetry "
                    "SDK vs without",
                    "us/entry",
                    sides["otel"]["cpu_runs"],
                    sides["asyncsink"]["cpu_runs"],
                    OTEL_CPU_TARGETS.get(latency_ms),
                    lower_is_better=True,
                )
            )
        if "signed" in sides:
            rows.append(_rate_row(latency_ms, sides, LABELS["signed"] + " vs unsigned",
                                  "signed", "asyncsink"))  # fmt: skip
            rows.append(
                comparison(
                    f"HTTP {latency_ms:g} ms: client CPU per entry, signed (SigV4) vs unsigned",
                    "us/entry",
                    sides["signed"]["cpu_runs"],
                    sides["asyncsink"]["cpu_runs"],
                    SIGNED_CPU_TARGETS.get(latency_ms),
                    lower_is_better=True,
                )
            )
        if "cold" in sides and "aiohttp" in sides:
            name = f"{LABELS['cold']} vs {LABELS['aiohttp']}"
            rows.append(_rate_row(latency_ms, sides, name, "cold", "aiohttp"))
        for fixed in [side for side in sides if side.startswith("fixed")]:
            name = f"asyncsink adaptive vs {label(fixed)}"
            rows.append(_rate_row(latency_ms, sides, name, "asyncsink", fixed))
        if "aiohttp" in sides:
            rows.append(
                comparison(
                    f"HTTP {latency_ms:g} ms: client CPU per entry, asyncsink vs aiohttp loop",
                    "us/entry",
                    sides["asyncsink"]["cpu_runs"],
                    sides["aiohttp"]["cpu_runs"],
                    CPU_TARGETS.get(latency_ms),
                    lower_is_better=True,
                )
            )
    return rows


def print_latency_table(latency_ms: float, sides: dict[str, dict[str, Any]]) -> None:
    print(f"\nserver latency {latency_ms:g} ms ({load_average()})")
    print(
        f"{'side':<44}{'entries':>9}{'entries/s: median (min-max)':>32}"
        f"{'client CPU us/entry':>26}{'endpoint':>10}"
    )
    for side, row in sides.items():
        print(
            f"{label(side):<44}{row['entries']:>9,}{spread(row['runs']):>32}"
            f"{spread(row['cpu_runs'], 2):>26}{row['server_cpu_us_per_entry']:>10.2f}"
        )


# ---------------------------------------------------------------------- profiling


def profile_run(server: FaultServer, entries: list[dict[str, Any]], latency_ms: float) -> None:
    """Profile one aiohttp-loop and one asyncsink run and print where asyncsink's client
    time goes."""
    server.set_faults(Faults(latency_ms=latency_ms))
    totals = {}
    for side in ("aiohttp", "asyncsink"):
        server.reset()
        runner(side)(server.ingest_url, entries)  # imports and first-use costs: not profiled
        server.reset()
        raw, totals[side] = profile_cpu(runner(side), server.ingest_url, entries)
    total = totals["asyncsink"]
    print(
        f"\nprofile (CPU time) of one run of {len(entries):,} entries at {latency_ms:g} ms: "
        f"asyncsink {total:.2f} s, aiohttp loop {totals['aiohttp']:.2f} s "
        f"({total / totals['aiohttp']:.2f}x); asyncsink's time:"
    )
    print_profile(raw, total)


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000, help="entries per run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every side")
    parser.add_argument("--latencies", default="100,20,0", help="server latencies in ms")
    parser.add_argument("--quick", action="store_true", help="60,000 entries, 3 rounds")
    parser.add_argument("--fixed", type=int, help="add asyncsink at this many in flight")
    parser.add_argument("--wide", action="store_true", help="entries of ~160 B, not ~85 B")
    parser.add_argument(
        "--memory-records", action="store_true", help="add durable records in memory"
    )
    parser.add_argument(
        "--otel", action="store_true", help="add asyncsink with an OpenTelemetry SDK"
    )
    parser.add_argument(
        "--signed", action="store_true", help="add asyncsink signing with AWS SigV4"
    )
    parser.add_argument("--profile", action="store_true", help="profile asyncsink runs")
    parser.add_argument(
        "--sides",
        help=f"only these sides, comma-separated (asyncsink always runs): "
        f"{', '.join(SIDES)}, memory, otel, signed",
    )
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.entries, args.rounds = 60_000, 3
    latencies = [float(text) for text in args.latencies.split(",") if text]
    sides = [*SIDES[:1], *([f"fixed{args.fixed}"] if args.fixed else []), *SIDES[1:]]
    chosen = {"asyncsink", *args.sides.split(",")} if args.sides else None
    if args.memory_records or (chosen and "memory" in chosen):
        sides.insert(sides.index("durable") + 1, "memory")
    if args.otel or (chosen and "otel" in chosen):
        sides.insert(1, "otel")
    if args.signed or (chosen and "signed" in chosen):
        sides.insert(1, "signed")
    if chosen is not None:
        if unknown := chosen - set(SIDES) - {"memory", "otel", "signed"}:
            parser.error(f"--sides: no side {', '.join(sorted(unknown))}")
        sides = [side for side in sides if side in chosen or side.startswith("fixed")]
    inputs = make_wide_entries if args.wide else make_entries
    size = mean_json_size(inputs(1000))
    results: dict[float, dict[str, dict[str, Any]]] = {}
    print(
        f"{args.entries:,} entries of ~{size:.0f} B JSON, {BATCH} per request, FaultServer "
        f"and every side in a process of its own, median (min-max) of {args.rounds} rounds "
        f"(sides in rotating order); {load_average()}",
        flush=True,
    )
    with FaultServer(keep_ids=False) as server, ExitStack() as stack:
        workers = {
            side: stack.enter_context(
                SideProcess(side, runner(side), server.ingest_url, inputs=inputs)
            )
            for side in sides
        }
        for latency_ms in latencies:
            results[latency_ms] = measure(server, workers, args.entries, latency_ms, args.rounds)
            print_latency_table(latency_ms, results[latency_ms])
            sys.stdout.flush()
        rows = comparisons(results)
        print_comparisons(rows)
        if args.profile:
            for latency_ms in latencies:
                profile_run(server, inputs(args.entries), latency_ms)
    summary = {
        "benchmark": "http",
        "title": "HTTP sink vs hand-written aiohttp and httpx loops and a requests loop",
        "config": {
            "entries": args.entries,
            "entry_bytes": round(size),
            "batch": BATCH,
            "baseline_in_flight": IN_FLIGHT,
            "rounds": args.rounds,
            "latencies_ms": latencies,
            **machine(),
        },
        "results": {f"{latency:g}ms": by_side for latency, by_side in results.items()},
        "comparisons": rows,
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    exit_on_missed(main())
