"""What a request's task and deadline cost: the writer's concurrency model, measured.

Each way starts 40,000 requests that only yield, 16 at a time, and reports the CPU time
per request (user + system) of its own process:

- asyncio: a plain asyncio task under ``asyncio.timeout`` (what the writer does);
- asyncio task, anyio scope: a plain task under ``anyio.move_on_after`` (the writer before);
- anyio: a task of an anyio task group under ``anyio.move_on_after`` (anyio throughout).

Every way runs in a process of its own, in rotating order, for several rounds; the
median (min-max) of its rounds is printed with the machine's load average.

    .venv/bin/python benchmarks/bench_concurrency.py [--requests N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import anyio
from sides import load_average, spread

WAYS = {
    "asyncio": "asyncio task, asyncio.timeout",
    "task-anyio-scope": "asyncio task, anyio scope",
    "anyio": "anyio task group, anyio scope",
}
IN_FLIGHT = 16


async def with_asyncio_timeout() -> None:
    async with asyncio.timeout(60):
        await asyncio.sleep(0)


async def with_anyio_scope() -> None:
    with anyio.move_on_after(60):
        await asyncio.sleep(0)


async def run(way: str, requests: int) -> float:
    loop = asyncio.get_running_loop()
    work = with_asyncio_timeout if way == "asyncio" else with_anyio_scope
    started = time.process_time()
    if way == "anyio":
        async with anyio.create_task_group() as group:
            for _ in range(requests // IN_FLIGHT):
                for _ in range(IN_FLIGHT):
                    group.start_soon(work)
                for _ in range(3):
                    await asyncio.sleep(0)
    else:
        tasks: set[asyncio.Task[None]] = set()
        for _ in range(requests // IN_FLIGHT):
            for _ in range(IN_FLIGHT):
                task = loop.create_task(work())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            for _ in range(3):
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
    return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.way:
        print(asyncio.run(run(args.way, args.requests)))
        return
    results: dict[str, list[float]] = {way: [] for way in WAYS}
    ways = list(WAYS)
    for round_ in range(args.rounds):
        for way in ways[round_ % len(ways) :] + ways[: round_ % len(ways)]:
            command = [sys.executable, __file__, "--way", way, "--requests", str(args.requests)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[way].append(float(out))
    print(f"{args.requests:,} requests, {IN_FLIGHT} at a time; {load_average()}")
    print(f"{'way':<36}CPU us/request: median (min-max)")
    for way, label in WAYS.items():
        values = results[way]
        print(f"{label:<36}{spread(values, 1)}")


if __name__ == "__main__":
    main()
