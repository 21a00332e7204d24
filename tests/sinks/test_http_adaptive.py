"""Adaptive concurrency end to end: the HTTP sink, with its defaults, against an endpoint
that serves a fixed number of requests at once and queues the rest (``Faults.capacity``).

A fixed number of requests in flight above that capacity only makes every request wait
longer; the adaptive limit must find the capacity from the latency it measures and hold
the requests in flight near it: p99 latency within twice the unloaded latency, no
timeouts, and the endpoint kept busy.
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
from asyncsink.testing import Faults, FaultServer
from sinks.http import HttpWriter, create_writer

pytestmark = pytest.mark.anyio

CAPACITY = 16
SERVICE_MS = 20.0
BATCH = 50
REQUESTS = 1500  # ~2 s at the endpoint's capacity of 800 requests a second


@pytest.fixture(scope="module")
def queueing() -> Iterator[FaultServer]:
    with FaultServer(Faults(latency_ms=SERVICE_MS, capacity=CAPACITY)) as server:
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


async def deliver(server: FaultServer, prefix: str, **options: str) -> tuple[TimedWriter, float]:
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
    assert server.stats().entries_received == REQUESTS * BATCH
    return timed, elapsed


def p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


async def test_the_default_limit_settles_near_a_queueing_endpoints_capacity(
    queueing: FaultServer,
) -> None:
    floor = await unloaded_latency(queueing)
    assert SERVICE_MS / 1000 <= floor < 2 * SERVICE_MS / 1000

    adaptive, elapsed = await deliver(queueing, "adaptive")
    stats = adaptive.statistics()
    assert stats.timeouts == 0 and stats.requests_failed == 0
    assert p99(adaptive.latencies) < 2 * floor
    settled = adaptive.in_flight_at_start[len(adaptive.in_flight_at_start) // 4 :]
    assert CAPACITY - 2 <= statistics.median(settled) <= 1.5 * CAPACITY
    assert REQUESTS / elapsed > 0.75 * CAPACITY / floor  # the endpoint is kept busy

    # What the limit keeps away: a fixed 64 in flight, three in four of them waiting in
    # line, takes no less time and makes every request wait about four times as long.
    fixed, fixed_elapsed = await deliver(
        queueing, "fixed", maxInFlightRequests="64", adaptiveConcurrency="false"
    )
    assert statistics.median(fixed.latencies) > 3 * floor
    assert fixed_elapsed > 0.8 * elapsed
