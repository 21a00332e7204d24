"""Writer overhead: AsyncSinkWriter vs a hand-written anyio batching loop, same destination.

Both sides deliver the same entries in batches of 500 with at most 16 requests in flight
to an in-process null destination (optionally with a simulated latency), alternating
A B A B in one process. Prints entries/s for each and the ratio.

    .venv/bin/python benchmarks/bench_writer.py [--entries N] [--rounds R] [--latency-ms L]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from asyncsink import AsyncSinkWriter, SinkOptions

BATCH = 500
IN_FLIGHT = 16


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


def timed(
    fn: Callable[[list[bytes], float], Coroutine[Any, Any, int]],
    payloads: list[bytes],
    latency: float,
) -> float:
    started = time.perf_counter()
    received = anyio.run(fn, payloads, latency)
    elapsed = time.perf_counter() - started
    assert received == len(payloads), (fn.__name__, received)
    return len(payloads) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    payloads = [b'{"id": %d, "value": "x"}' % i for i in range(args.entries)]
    latency = args.latency_ms / 1000
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(timed(with_asyncsink, payloads, latency))
        theirs.append(timed(hand_written, payloads, latency))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(
        f"{args.entries} entries, batches of {BATCH}, {IN_FLIGHT} in flight, "
        f"latency {args.latency_ms:g} ms, median of {args.rounds} alternating rounds"
    )
    print(f"{'side':<28}{'entries/s':>14}")
    print(f"{'asyncsink AsyncSinkWriter':<28}{a:>14,.0f}")
    print(f"{'hand-written anyio loop':<28}{b:>14,.0f}")
    print(f"{'ratio (asyncsink / hand)':<28}{a / b:>14.2f}")


if __name__ == "__main__":
    main()
