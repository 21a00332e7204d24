"""Elasticsearch delivery: the asyncsink Elasticsearch sink vs the official client's bulk helper.

The sides index the same documents (~85 bytes of JSON each, ``make_entries`` of the HTTP
benchmark) in ``_bulk`` requests of 500 into the Elasticsearch-compatible test endpoint
(``ElasticsearchServer`` of ``tests/servers/elasticsearch``, in its own process, on
127.0.0.1, no faults), first with 20 ms of server latency per request, then with none:

- asyncsink: the Elasticsearch sink (``asyncsink.sinks.elasticsearch.create_writer``) with its
  defaults (16 requests in flight, AIMD rate limiting, per-item results read from each
  answer) and ``maxBatchSize`` 500;
- bulk helper: ``elasticsearch.helpers.async_streaming_bulk`` on an ``AsyncElasticsearch``
  client, as its documentation shows it: client defaults (aiohttp, the stdlib JSON
  serializer), ``chunk_size=500`` and ``raise_on_error`` (an item that failed raises),
  one ``{"_index", "_id", "_source"}`` action per document. The helper sends one chunk at
  a time and waits for its answer before the next: it has no setting for more in flight;
- with ``--orjson-helper``, for information (no target): the same helper on a client
  given ``serializer=OrjsonSerializer()``, the faster JSON library the sink uses too, which
  shows how much of the difference at 0 ms is the JSON library rather than delivery.

Every side takes each document's ``_id`` from its ``id`` field (``idField`` for the sink),
so that both must leave the same index behind. Every side runs in a process of its own
(``sides.SideProcess``), spawned once and kept for all its runs, which builds the
documents itself, times each run and measures its own CPU time (user + system): the
parent only orchestrates, and the endpoint reports its own CPU time. After a warm-up run
of each side, the sides run in rotating order for several rounds (A B, B A, ...); before
each run the endpoint is reset (no index at all), and after it the run is checked: the
index must hold exactly the documents sent, each once, every item answered 201.

Prints, per latency and with the machine's load average, each side's documents/s (wall
clock) and CPU time per document of the client (steadier than wall-clock figures on a
shared machine) as the median with the minimum and maximum of its runs, and the
endpoint's CPU per document; then the ratios with their target (asyncsink >= 1.0x the
helper at every latency): the ratio of the medians, and the median (min-max) of each
round's ratio (its sides ran back to back) as a check on noise.

Exits 1 when a target is missed, after printing everything.

    .venv/bin/python benchmarks/bench_elasticsearch.py [--docs N] [--rounds R] [--quick]
        [--latencies 20,0] [--orjson-helper] [--profile] [--json PATH]

``--profile`` then profiles one helper and one asyncsink run per latency (cProfile, CPU
time, in this process) and prints where asyncsink's client time goes, by file and by
function.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
from elasticsearch import AsyncElasticsearch, helpers
from elasticsearch.serializer import OrjsonSerializer
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
    profile_cpu,
    rotating_rounds,
    spread,
    write_summary,
)

from asyncsink.sinks.elasticsearch import create_writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the emulator lives in tests/
from tests.servers.elasticsearch import ElasticsearchServer, EsFaults

BATCH = 500
INDEX = "bench"
RUN_TIMEOUT_S = 600.0  # the longest one run may take before it counts as failed
TARGET = 1.0  # asyncsink / helper, documents per second, at every latency

SIDES = ("asyncsink", "helper")
LABELS = {
    "asyncsink": "asyncsink Elasticsearch sink (16 in flight)",
    "helper": "async_streaming_bulk (1 chunk in flight)",
    "helper_orjson": "async_streaming_bulk + OrjsonSerializer",
}
BASELINES = {"helper": "async_streaming_bulk", "helper_orjson": "async_streaming_bulk + orjson"}


# ---------------------------------------------------------------------- the sides


async def _asyncsink(url: str, docs: list[dict[str, Any]]) -> int:
    writer = create_writer(
        {"hosts": url, "index": INDEX, "idField": "id", "maxBatchSize": str(BATCH)}
    )
    with anyio.fail_after(RUN_TIMEOUT_S):
        async with writer:
            await writer.write_all(docs)
    return writer.statistics().delivered


def run_asyncsink(url: str, docs: list[dict[str, Any]]) -> int:
    return anyio.run(_asyncsink, url, docs)


def actions(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        yield {"_index": INDEX, "_id": doc["id"], "_source": doc}


async def _helper(url: str, docs: list[dict[str, Any]], serializer: Any = None) -> int:
    indexed = 0
    with anyio.fail_after(RUN_TIMEOUT_S):
        async with AsyncElasticsearch(url, serializer=serializer) as client:
            async for ok, _item in helpers.async_streaming_bulk(
                client, actions(docs), chunk_size=BATCH, raise_on_error=True
            ):
                indexed += ok
    return indexed


def run_helper(url: str, docs: list[dict[str, Any]]) -> int:
    return anyio.run(_helper, url, docs)


def run_helper_orjson(url: str, docs: list[dict[str, Any]]) -> int:
    return anyio.run(_helper, url, docs, OrjsonSerializer())


RUNNERS: dict[str, Callable[[str, list[dict[str, Any]]], int]] = {
    "asyncsink": run_asyncsink,
    "helper": run_helper,
    "helper_orjson": run_helper_orjson,
}


# ---------------------------------------------------------------------- measuring


def check(server: ElasticsearchServer, side: str, sent: int, docs: list[dict[str, Any]]) -> None:
    """The endpoint must hold exactly ``docs``, each indexed once, every item a 201."""
    n = len(docs)
    stats = server.stats()
    problems = []
    if sent != n:
        problems.append(f"the side reports {sent:,} documents indexed")
    if dict(stats.docs_by_index) != {INDEX: n}:
        problems.append(f"the endpoint holds {dict(stats.docs_by_index)}")
    if dict(stats.items_by_status) != {201: n}:
        problems.append(f"items answered {dict(stats.items_by_status)}")
    if stats.duplicate_applications or stats.internal_errors:
        problems.append(
            f"{stats.duplicate_applications} duplicates, {stats.internal_errors} server errors"
        )
    if not problems:
        held = server.documents(INDEX)
        if held != {doc["id"]: doc for doc in docs}:
            problems.append("the documents held differ from those sent")
    if problems:
        raise RuntimeError(f"{side}, {n:,} documents: " + "; ".join(problems))


def timed(
    server: ElasticsearchServer, side: SideProcess, docs: list[dict[str, Any]]
) -> tuple[float, float, float]:
    """One checked run on an empty endpoint: documents/s of wall-clock time, then the
    client's and the endpoint's CPU microseconds per document."""
    server.reset()
    run = side.run(len(docs))  # the side's process builds the same documents
    server_cpu = server.stats().cpu_seconds
    check(server, side.name, run.sent, docs)
    n = len(docs)
    return n / run.seconds, run.cpu_seconds / n * 1e6, server_cpu / n * 1e6


def measure(
    server: ElasticsearchServer,
    workers: dict[str, SideProcess],
    docs: list[dict[str, Any]],
    latency_ms: float,
    rounds: int,
) -> dict[str, dict[str, Any]]:
    server.set_faults(EsFaults(latency_ms=latency_ms))
    first = docs[: min(len(docs), 10 * BATCH)]  # imports, connection pools, caches
    runs = rotating_rounds(
        list(workers),
        rounds,
        run=lambda side: timed(server, workers[side], docs),
        warm=lambda side: timed(server, workers[side], first),
    )
    return {
        side: {
            "docs_per_s": statistics.median(run[0] for run in results),
            "cpu_us_per_doc": statistics.median(run[1] for run in results),
            "server_cpu_us_per_doc": statistics.median(run[2] for run in results),
            "runs": [round(run[0]) for run in results],
            "cpu_runs": [round(run[1], 2) for run in results],
        }
        for side, results in runs.items()
    }


def compare(
    results: dict[float, dict[str, dict[str, Any]]], baseline: str = "helper"
) -> list[dict[str, Any]]:
    """asyncsink vs ``baseline`` at each latency, against ``TARGET``."""
    return [
        comparison(
            f"Elasticsearch {latency_ms:g} ms: asyncsink vs {BASELINES[baseline]}",
            "docs/s",
            by_side["asyncsink"]["runs"],
            by_side[baseline]["runs"],
            TARGET,
        )
        for latency_ms, by_side in results.items()
    ]


def print_latency_table(latency_ms: float, sides: dict[str, dict[str, Any]]) -> None:
    print(f"\nserver latency {latency_ms:g} ms ({load_average()})")
    print(f"{'side':<46}{'docs/s: median (min-max)':>30}{'client CPU us/doc':>24}{'endpoint':>10}")
    for side, row in sides.items():
        print(
            f"{LABELS[side]:<46}{spread(row['runs']):>30}"
            f"{spread(row['cpu_runs'], 2):>24}{row['server_cpu_us_per_doc']:>10.2f}"
        )


# ---------------------------------------------------------------------- profiling


def profile_run(server: ElasticsearchServer, docs: list[dict[str, Any]], latency_ms: float) -> None:
    """Profile one helper and one asyncsink run and print where asyncsink's client time
    goes."""
    server.set_faults(EsFaults(latency_ms=latency_ms))
    totals = {}
    for side in ("helper", "asyncsink"):
        server.reset()
        raw, totals[side] = profile_cpu(RUNNERS[side], server.url, docs)
    total = totals["asyncsink"]
    print(
        f"\nprofile (CPU time) of one run of {len(docs):,} documents at {latency_ms:g} ms: "
        f"asyncsink {total:.2f} s, bulk helper {totals['helper']:.2f} s "
        f"({total / totals['helper']:.2f}x); asyncsink's time:"
    )
    print_profile(raw, total)


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000, help="documents per run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every side")
    parser.add_argument("--latencies", default="20,0", help="server latencies in ms")
    parser.add_argument("--quick", action="store_true", help="20,000 documents, 3 rounds")
    parser.add_argument(
        "--orjson-helper",
        action="store_true",
        help="also run the helper with OrjsonSerializer (for information, no target)",
    )
    parser.add_argument("--profile", action="store_true", help="profile asyncsink runs")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.docs, args.rounds = 20_000, 3
    latencies = [float(text) for text in args.latencies.split(",") if text]
    sides = SIDES + ("helper_orjson",) if args.orjson_helper else SIDES
    docs = make_entries(args.docs)
    size = mean_json_size(docs)
    results: dict[float, dict[str, dict[str, Any]]] = {}
    print(
        f"{args.docs:,} documents of ~{size:.0f} B JSON, {BATCH} per _bulk request, "
        f"ElasticsearchServer and every side in a process of its own, median (min-max) of "
        f"{args.rounds} rounds (sides in rotating order); {load_average()}",
        flush=True,
    )
    with ElasticsearchServer(host="127.0.0.1") as server, ExitStack() as stack:
        workers = {
            side: stack.enter_context(SideProcess(side, RUNNERS[side], server.url))
            for side in sides
        }
        for latency_ms in latencies:
            results[latency_ms] = measure(server, workers, docs, latency_ms, args.rounds)
            print_latency_table(latency_ms, results[latency_ms])
            sys.stdout.flush()
        rows = compare(results)
        extra = [
            {**row, "target": None, "met": None}  # for information: no target
            for row in (compare(results, "helper_orjson") if args.orjson_helper else [])
        ]
        print_comparisons(rows + extra, width=82)
        if args.profile:
            for latency_ms in latencies:
                profile_run(server, docs, latency_ms)
    summary = {
        "benchmark": "elasticsearch",
        "title": "Elasticsearch sink vs elasticsearch.helpers.async_streaming_bulk",
        "config": {
            "docs": args.docs,
            "doc_bytes": round(size),
            "batch": BATCH,
            "rounds": args.rounds,
            "latencies_ms": latencies,
            "sides": list(sides),
            **machine(),
        },
        "results": {f"{latency:g}ms": by_side for latency, by_side in results.items()},
        "comparisons": rows,
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    exit_on_missed(main())
