"""Cost of ordered delivery: the writer with ``orderingKey`` against the same writer
without it, at 20 ms a request.

Both sides send the same change events (``make_entries`` with a ``key`` field drawn at
random from ``--keys`` keys) in batches of 500, at most 16 requests in flight, to a null
destination in the side's own process that answers each request after the latency:

- unordered: ``SinkOptions`` without ``orderingKey``;
- ordered: ``orderingKey="key"``: at most one entry of a key out at a time.

With many keys (10,000) a batch rarely holds a key twice, and ordering should cost
little (target: at least 0.8x the unordered rows/s). With few keys (10), every key has
one entry out at a time, so a request carries at most 10 entries: rows/s falls to about
``keys / latency`` and the figure is there to show it, not to meet a target.

Every side runs in a process of its own (``sides.SideProcess``), after a warm-up run, in
rotating order for several rounds; the machine's load is printed with the table.

    .venv/bin/python benchmarks/bench_ordering.py [--entries N] [--rounds R]
        [--keys 10000,10] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import random
from functools import partial
from typing import Any

import anyio
from sides import (
    SideProcess,
    comparison,
    load_average,
    make_entries,
    print_comparisons,
    rotating_rounds,
    spread,
)

from asyncsink import AsyncSinkWriter, SinkOptions

BATCH, IN_FLIGHT = 500, 16


class NullWriter(AsyncSinkWriter[dict[str, Any], dict[str, Any]]):
    def __init__(self, latency: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.latency = latency
        self.received = 0

    def convert(self, element: dict[str, Any]) -> dict[str, Any]:
        return element

    def entry_size(self, entry: dict[str, Any]) -> int:
        return 85

    async def submit_request_entries(self, entries: list[dict[str, Any]]) -> None:
        await anyio.sleep(self.latency)
        self.received += len(entries)


def make_changes(keys: int, count: int) -> list[dict[str, Any]]:
    """``make_entries`` with a ``key`` drawn at random (seeded) from ``keys`` keys."""
    rng = random.Random(keys)
    rows = make_entries(count)
    for row in rows:
        row["key"] = f"k{rng.randrange(keys)}"
    return rows


def run(ordered: bool, latency: float, rows: list[dict[str, Any]]) -> int:
    options = SinkOptions(
        max_batch_size=BATCH,
        max_in_flight_requests=IN_FLIGHT,
        ordering_key="key" if ordered else "",
    )

    async def deliver() -> int:
        writer = NullWriter(latency, options=options)
        async with writer:
            await writer.write_all(rows)
        return writer.received

    return anyio.run(deliver)


def rate(sides: dict[str, SideProcess], count: int, side: str) -> float:
    done = sides[side].run(count)
    assert done.sent == count, f"{side} delivered {done.sent} of {count}"
    return done.sent / done.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", default="10000,10")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    rows_out: list[dict[str, Any]] = []
    print(f"load average before: {load_average()}")
    for keys in (int(k) for k in args.keys.split(",")):
        count = args.entries if keys >= 1000 else min(args.entries, 20 * keys * 50)
        inputs = partial(make_changes, keys)
        sides = {
            "unordered": SideProcess("unordered", run, False, latency, inputs=inputs),
            "ordered": SideProcess("ordered", run, True, latency, inputs=inputs),
        }
        try:
            rates = rotating_rounds(list(sides), args.rounds, partial(rate, sides, count),
                                    partial(rate, sides, count))  # fmt: skip
        finally:
            for side in sides.values():
                side.close()
        for side, values in rates.items():
            print(f"{keys:>6} keys  {side:<10} {spread(values)} rows/s ({count:,} rows)")
        target = 0.8 if keys >= 1000 else None
        rows_out.append(
            comparison(
                f"ordered / unordered, {keys} keys, {args.latency_ms:g} ms",
                "rows/s",
                rates["ordered"],
                rates["unordered"],
                target,
            )  # fmt: skip
        )
    print_comparisons(rows_out)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
