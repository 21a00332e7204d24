"""Writer overhead: AsyncSinkWriter vs a hand-written anyio batching loop, same destination.

Both sides deliver the same entries (small JSON byte strings) in batches of 500 with at
most 16 requests in flight to a null destination in their own process (optionally with a
simulated latency per request):

- asyncsink: an ``AsyncSinkWriter`` subclass whose ``submit_request_entries`` only counts;
- hand-written loop: what a user writes by hand with anyio: cut batches, a semaphore for
  the in-flight limit, a task per batch that only counts.

Every side runs in a process of its own (``sides.SideProcess``), spawned once and kept for
all its runs, which builds the entries itself, times each run and measures its own CPU
time (user + system). After a warm-up run of each side, the sides run in rotating order
for several rounds (A B, B A, ...); every run must deliver every entry. Prints, with the
machine's load average, each side's entries/s (wall clock) and CPU time per entry as the
median with the minimum and maximum of its runs, then the ratios asyncsink / hand-written
(for information: no target): the ratio of the medians, and the median (min-max) of each
round's ratio as a check on noise.

    .venv/bin/python benchmarks/bench_writer.py [--entries N] [--rounds R] [--latency-ms L]
        [--quick] [--json PATH]

``--quick`` (100,000 entries, 3 rounds) is a smoke test.
"""

from __future__ import annotations

import argparse
import statistics
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
from sides import (
    SideProcess,
    comparison,
    load_average,
    machine,
    print_comparisons,
    rotating_rounds,
    spread,
    write_summary,
)

from asyncsink import AsyncSinkWriter, SinkOptions

BATCH = 500
IN_FLIGHT = 16

SIDES = ("asyncsink", "hand")
LABELS = {
    "asyncsink": "asyncsink AsyncSinkWriter",
    "hand": f"hand-written anyio loop ({IN_FLIGHT} in flight)",
}


class NullWriter(AsyncSinkWriter[bytes, bytes]):
    def __init__(self, latency: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.latency = latency
        self.received = 0

    def convert(self, element: bytes) -> bytes:
        return element

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        if self.latency:
            await anyio.sleep(self.latency)
        self.received += len(entries)


def make_payloads(count: int) -> list[bytes]:
    """The entries of this benchmark and of the durable one: ~25 bytes of JSON each."""
    return [b'{"id": %d, "value": "x"}' % i for i in range(count)]


# ---------------------------------------------------------------------- the sides


async def with_asyncsink(payloads: list[bytes], latency: float) -> int:
    writer = NullWriter(
        latency, options=SinkOptions(max_batch_size=BATCH, max_in_flight_requests=IN_FLIGHT)
    )
    async with writer:
        await writer.write_all(payloads)
    return writer.received


async def hand_written(payloads: list[bytes], latency: float) -> int:
    """What a user writes by hand: cut batches, a semaphore for the in-flight limit."""
    received = 0
    limit = anyio.Semaphore(IN_FLIGHT)

    async def send(batch: list[bytes]) -> None:
        nonlocal received
        try:
            if latency:
                await anyio.sleep(latency)
            received += len(batch)
        finally:
            limit.release()

    async with anyio.create_task_group() as tg:
        batch: list[bytes] = []
        for payload in payloads:
            batch.append(payload)
            if len(batch) == BATCH:
                await limit.acquire()
                tg.start_soon(send, batch)
                batch = []
        if batch:
            await limit.acquire()
            tg.start_soon(send, batch)
    return received


def run_asyncsink(latency: float, payloads: list[bytes]) -> int:
    return anyio.run(with_asyncsink, payloads, latency)


def run_hand(latency: float, payloads: list[bytes]) -> int:
    return anyio.run(hand_written, payloads, latency)


RUNNERS = {"asyncsink": run_asyncsink, "hand": run_hand}


# ---------------------------------------------------------------------- measuring


def timed(side: SideProcess, count: int) -> tuple[float, float]:
    """One checked run: entries/s of wall-clock time and CPU microseconds per entry."""
    run = side.run(count)
    if run.sent != count:
        raise RuntimeError(f"{side.name}: delivered {run.sent} of {count}")
    return count / run.seconds, run.cpu_seconds / count * 1e6


def measure(workers: dict[str, SideProcess], entries: int, rounds: int) -> dict[str, Any]:
    runs = rotating_rounds(
        list(workers),
        rounds,
        run=lambda side: timed(workers[side], entries),
        warm=lambda side: timed(workers[side], min(entries, 10 * BATCH)),
    )
    return {
        side: {
            "entries_per_s": statistics.median(run[0] for run in results),
            "cpu_us_per_entry": statistics.median(run[1] for run in results),
            "runs": [round(run[0]) for run in results],
            "cpu_runs": [round(run[1], 3) for run in results],
        }
        for side, results in runs.items()
    }


def comparisons(results: dict[str, Any], latency_ms: float) -> list[dict[str, Any]]:
    """asyncsink against the hand-written loop, for information: entries/s and CPU."""
    name = f"Writer, null destination {latency_ms:g} ms"
    ours, theirs = results["asyncsink"], results["hand"]
    return [
        comparison(
            f"{name}: asyncsink vs {LABELS['hand']}",
            "entries/s",
            ours["runs"],
            theirs["runs"],
            None,
        ),
        comparison(
            f"{name}: CPU per entry, asyncsink vs hand-written loop",
            "us/entry",
            ours["cpu_runs"],
            theirs["cpu_runs"],
            None,
            lower_is_better=True,
        ),
    ]


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=500_000, help="entries per run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both sides")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="per request")
    parser.add_argument("--quick", action="store_true", help="100,000 entries, 3 rounds")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.entries, args.rounds = 100_000, 3
    print(
        f"{args.entries:,} entries, batches of {BATCH}, {IN_FLIGHT} in flight, latency "
        f"{args.latency_ms:g} ms, every side in a process of its own, median (min-max) of "
        f"{args.rounds} rounds (sides in rotating order); {load_average()}",
        flush=True,
    )
    with ExitStack() as stack:
        workers = {
            side: stack.enter_context(
                SideProcess(side, RUNNERS[side], args.latency_ms / 1000, inputs=make_payloads)
            )
            for side in SIDES
        }
        results = measure(workers, args.entries, args.rounds)
    print(f"\n{load_average()}")
    print(f"{'side':<44}{'entries/s: median (min-max)':>34}{'CPU us/entry':>22}")
    for side in SIDES:
        row = results[side]
        print(f"{LABELS[side]:<44}{spread(row['runs']):>34}{spread(row['cpu_runs'], 3):>22}")
    rows = comparisons(results, args.latency_ms)
    print_comparisons(rows, width=84)
    summary = {
        "benchmark": "writer",
        "title": "AsyncSinkWriter vs a hand-written anyio loop, null destination",
        "config": {
            "entries": args.entries,
            "batch": BATCH,
            "in_flight": IN_FLIGHT,
            "latency_ms": args.latency_ms,
            "rounds": args.rounds,
            **machine(),
        },
        "results": results,
        "comparisons": rows,
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
