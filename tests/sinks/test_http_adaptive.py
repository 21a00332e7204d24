"""Adaptive concurrency end to end: the HTTP sink, with its defaults, against an endpoint
that serves a fixed number of requests at once and queues the rest (``Faults.capacity``).

A fixed number of requests in flight above that capacity only makes every request wait
longer; the adaptive limit must find the capacity from the latency it measures and hold
the requests in flight near it: p99 latency within twice the unloaded latency, no
timeouts, and the endpoint kept busy.

Each service takes 50 to 60 ms: with a fixed time, requests started together finish
together, the line moves in waves, and a request that waits at all waits a whole service.

The p99 is the endpoint's, once settled (after the first quarter of the requests; the
limit starts at 16, above this endpoint's capacity): the time requests waited in line for
a slot, which is what the number in flight decides, is under the unloaded latency at the
99th percentile, so that requests are answered within about twice it. The client sees
that plus its own delays; on a machine shared with other work a process can lose the CPU
for tens of milliseconds at a time whatever it does, so the client's latencies are
compared with those of a fixed 64 in flight measured alongside, not with a bound.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import httpx
import pytest

from asyncsink import SubmitResult
from asyncsink.sinks.http import HttpWriter, create_writer
from asyncsink.testing import Faults, FaultServer, FaultServerStats

pytestmark = pytest.mark.anyio

CAPACITY = 8
SERVICE_MS = 50.0
JITTER_MS = 10.0
BATCH = 20
REQUESTS = 600  # ~4 s at the endpoint's capacity of 160 requests a second


@pytest.fixture(scope="module")
def queueing() -> Iterator[FaultServer]:
    with FaultServer(
        Faults(latency_ms=SERVICE_MS, latency_jitter_ms=JITTER_MS, capacity=CAPACITY)
    ) as server:
        yield server


class TimedWriter(HttpWriter):
    """The HTTP sink, noting each request's latency and how many were in flight."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.latencies: list[float] = []
        self.in_flight_at_start: list[int] = []
        self._in_flight = 0

    async def submit_request_entries(
        self, entries: list[dict[str, Any]]
    ) -> Sequence[dict[str, Any]] | SubmitResult | None:
        self._in_flight += 1
        self.in_flight_at_start.append(self._in_flight)
        started = time.perf_counter()
        try:
            return await super().submit_request_entries(entries)
        finally:
            self.latencies.append(time.perf_counter() - started)
            self._in_flight -= 1


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "v": i} for i in range(count)]


async def unloaded_latency(server: FaultServer) -> float:
    """The median latency of one batch at a time: the endpoint's floor."""
    async with httpx.AsyncClient(timeout=10) as client:
        latencies = []
        for i in range(15):
            started = time.perf_counter()
            response = await client.post(server.ingest_url, json=rows(f"u{i}", BATCH))
            latencies.append(time.perf_counter() - started)
            assert response.status_code == 200
    return statistics.median(latencies)


async def deliver(
    server: FaultServer, prefix: str, **options: str
) -> tuple[TimedWriter, float, FaultServerStats]:
    server.reset()
    writer = create_writer(
        {"url": server.ingest_url, "maxBatchSize": str(BATCH), "requestTimeoutMs": "2s", **options}
    )
    timed = TimedWriter(writer.http, options=writer.options)
    started = time.perf_counter()
    with anyio.fail_after(20):
        async with timed:
            await timed.write_all(rows(prefix, REQUESTS * BATCH))
    elapsed = time.perf_counter() - started
    stats = server.stats()
    assert stats.entries_received == REQUESTS * BATCH
    return timed, elapsed, stats


def settled(values: Sequence[float]) -> list[float]:
    """What a run measured once settled: after its first quarter."""
    return list(values[len(values) // 4 :])


def p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


async def test_the_default_limit_settles_near_a_queueing_endpoints_capacity(
    queueing: FaultServer,
) -> None:
    floor = await unloaded_latency(queueing)
    assert SERVICE_MS / 1000 <= floor < 2 * SERVICE_MS / 1000

    adaptive, elapsed, endpoint = await deliver(queueing, "adaptive")
    stats = adaptive.statistics()
    assert stats.timeouts == 0 and stats.requests_failed == 0
    waits = settled(endpoint.queue_waits_ms)
    assert p99(waits) < floor * 1000  # at the endpoint: p99 latency ~ twice the unloaded
    assert (
        CAPACITY - 2
        <= statistics.median(settled(adaptive.in_flight_at_start))
        <= (
            CAPACITY + 8  # and a few queued
        )
    )
    assert REQUESTS / elapsed > 0.75 * CAPACITY / floor  # the endpoint is kept busy

    # What the limit keeps away: a fixed 64 in flight, three in four of them waiting in
    # line, takes no less time and makes every request wait about four times as long.
    fixed, fixed_elapsed, crowded = await deliver(
        queueing, "fixed", maxInFlightRequests="64", adaptiveConcurrency="false"
    )
    assert p99(settled(crowded.queue_waits_ms)) > 2.5 * SERVICE_MS
    assert crowded.max_waiting >= 64 - CAPACITY - 2
    assert statistics.median(fixed.latencies) > 3 * floor
    assert statistics.median(adaptive.latencies) < statistics.median(fixed.latencies) / 2
    assert fixed_elapsed > 0.8 * elapsed
