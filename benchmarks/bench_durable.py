"""Cost of durability: AsyncSinkWriter without a call log vs with a CallLog on SQLite.

The same workload on both sides: entries in batches of 500, at most 16 requests in flight,
to an in-process null destination with a simulated latency (2 ms, then 0 ms), alternating
A B A B in one process. The durable side takes a fresh scope of one SQLite store (a temp
file, as a Python worker keeps it across partitions) per run, and completes it at the end.
Prints the median entries/s of each side and their ratio (the goal is >= 0.85), the same
per second of the process's CPU time (steadier on a busy machine: it leaves out time other
processes took), and how many store writes a durable run made.

    .venv/bin/python benchmarks/bench_durable.py [--entries N] [--rounds R]
        [--latencies-ms 2,0] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import anyio
from bench_writer import NullWriter  # the same null destination as the writer benchmark

from asyncsink import CallLog, Scope, SinkOptions
from asyncsink.stores.sqlite import SQLiteStore

BATCH = 500
IN_FLIGHT = 16


class CountingStore(SQLiteStore):
    """Counts the conditional writes and the records they carry."""

    puts = 0
    records = 0

    async def put(
        self, scope: Scope, epoch: int, puts: Mapping[str, bytes], deletes: Iterable[str] = ()
    ) -> None:
        self.puts += 1
        self.records += len(puts)
        await super().put(scope, epoch, puts, deletes)


class Bench:
    def __init__(self, entries: int, store: CountingStore) -> None:
        self.payloads = [b'{"id": %d, "value": "x"}' % i for i in range(entries)]
        self.store = store
        self.runs = 0

    async def deliver(self, latency: float, durable: bool) -> int:
        log = None
        if durable:
            self.runs += 1
            log = CallLog(self.store, Scope("bench", self.runs, 0))
        options = SinkOptions(max_batch_size=BATCH, max_in_flight_requests=IN_FLIGHT)
        writer = NullWriter(latency, options=options, call_log=log)
        async with writer:
            await writer.write_all(self.payloads)
        if log is not None:
            await log.complete()  # what the driver does once Spark committed
        return writer.received

    def timed(self, latency: float, durable: bool) -> tuple[float, float]:
        """Entries per second of wall-clock time and per second of CPU time."""
        started, cpu = time.perf_counter(), time.process_time()
        received = anyio.run(self.deliver, latency, durable)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert received == len(self.payloads), (durable, received)
        return len(self.payloads) / elapsed, len(self.payloads) / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000, help="entries per run")
    parser.add_argument("--rounds", type=int, default=7, help="A B pairs per latency")
    parser.add_argument(
        "--latencies-ms", default="2,0", help="simulated latencies to run, comma-separated"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile one durable run at 0 ms"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = CountingStore(Path(tmp) / "records.db")
        bench = Bench(args.entries, store)
        bench.timed(0.0, True)  # warm up: open the file, import, fill caches
        print(f"{args.entries} entries, batches of {BATCH}, {IN_FLIGHT} in flight, "
              f"median of {args.rounds} alternating rounds")  # fmt: skip
        print(f"{'latency':>8}{'plain':>12}{'durable':>12}{'ratio':>7}{'plain/cpu':>12}"
              f"{'durable/cpu':>13}{'ratio':>7}{'puts/run':>10}{'records/put':>13}")  # fmt: skip
        for latency_ms in (float(ms) for ms in args.latencies_ms.split(",")):
            plain, durable = [], []
            store.puts = store.records = 0
            for _ in range(args.rounds):
                plain.append(bench.timed(latency_ms / 1000, False))
                durable.append(bench.timed(latency_ms / 1000, True))
            a, b = (statistics.median(rate for rate, _ in runs) for runs in (plain, durable))
            c, d = (statistics.median(cpu for _, cpu in runs) for runs in (plain, durable))
            puts = store.puts / args.rounds
            per_put = store.records / max(store.puts, 1)
            print(f"{latency_ms:>6g}ms{a:>12,.0f}{b:>12,.0f}{b / a:>7.2f}{c:>12,.0f}{d:>13,.0f}"
                  f"{d / c:>7.2f}{puts:>10,.0f}{per_put:>13.1f}")  # fmt: skip
        print("(entries/s of wall-clock time, then of CPU time; ratio = durable / plain)")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(bench.timed, 0.0, True)
            stats = pstats.Stats(profiler).strip_dirs().sort_stats("tottime")
            stats.print_stats(25)
        anyio.run(store.aclose)


if __name__ == "__main__":
    main()
