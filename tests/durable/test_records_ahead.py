"""Requests recorded ahead: while the in-flight limit is reached, the writer records the
next full batches, so that when a request ends the next one leaves at once instead of
waiting for a store write; and a crash with such records, never sent, loses nothing."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import pytest

from asyncsink import Scope
from asyncsink.stores.memory import MemoryStore

from .harness import Crash, CrashingStore, Destination, run_attempt

pytestmark = pytest.mark.anyio

ENTRIES = [f"e{i}" for i in range(60)]
STORE_WRITE = 0.05  # seconds each store write takes
REQUEST = 0.1  # seconds each request takes


class SlowStore(CrashingStore):
    """Every store write takes ``STORE_WRITE``; a writer records requests ahead."""

    records_ahead = True

    async def put(
        self, scope: Scope, epoch: int, puts: Mapping[str, bytes], deletes: Iterable[str] = ()
    ) -> None:
        await anyio.sleep(STORE_WRITE)
        await super().put(scope, epoch, puts, deletes)


class TimedDestination(Destination):
    """Notes when each request started and ended."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(latency=REQUEST, **kwargs)
        self.spans: list[tuple[float, float]] = []

    async def receive(self, entries: list[Any]) -> None:
        started = time.monotonic()
        await super().receive(entries)
        self.spans.append((started, time.monotonic()))


async def test_the_next_request_leaves_without_waiting_for_a_store_write() -> None:
    destination = TimedDestination()
    store = SlowStore(MemoryStore(), destination.events)
    await run_attempt(store, destination, ENTRIES, max_in_flight_requests=1)
    spans = destination.spans
    assert len(spans) == len(ENTRIES) // 10
    gaps = [start - end for (_, end), (start, _) in zip(spans, spans[1:], strict=False)]
    # Without records ahead, each gap would hold a whole store write (50 ms).
    assert max(gaps) < STORE_WRITE / 2, gaps
    events = destination.events
    for call_id in {cid for kind, cid in events if kind == "send"}:
        assert events.index(("PENDING", call_id)) < events.index(("send", call_id))


@pytest.mark.parametrize("mode", ["keys", "reconcile", "none"])
async def test_a_crash_with_requests_recorded_but_never_sent_loses_nothing(mode: str) -> None:
    destination = TimedDestination(idempotent=(mode == "keys"))
    store = SlowStore(MemoryStore(), destination.events)
    destination.crash_after_apply_on = 2
    with pytest.raises((Crash, BaseExceptionGroup)):
        await run_attempt(store, destination, ENTRIES, max_in_flight_requests=1)
    recorded = {cid for kind, cid in destination.events if kind == "PENDING"}
    sent = {cid for kind, cid in destination.events if kind == "send"}
    assert recorded - sent, "some requests were recorded ahead and never sent"
    destination.crash_after_apply_on = None
    writer = await run_attempt(
        store, destination, ENTRIES, reconciles=(mode == "reconcile"), max_in_flight_requests=1
    )
    assert set(destination.applied) == set(ENTRIES)
    if mode == "none":
        assert destination.duplicates() <= 10  # only the request that crashed repeats
    else:
        assert destination.duplicates() == 0
        # the first call's outcome was recorded; the second, answered but not recorded,
        # is found by the reconciler, or sent again under its key and not applied twice
        assert writer.statistics().skipped == (20 if mode == "reconcile" else 10)
