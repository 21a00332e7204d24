"""Snapshots read the live state; memory stays bounded under a slow destination."""

from __future__ import annotations

import resource
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from asyncsink import CallInfo, SinkOptions
from asyncsink.writer import WriterSnapshot

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio


async def test_restoring_any_snapshot_delivers_every_entry() -> None:
    """Snapshot at every 10th write; each restored writer finishes the job: together with
    what the first destination acknowledged before the snapshot, every entry arrives."""
    total = 300
    failed_once: set[int] = set()

    def flaky(entries: list[int], call: CallInfo) -> list[int]:
        fail = [e for e in entries if e % 11 == 0 and e not in failed_once]
        failed_once.update(fail)
        return fail

    first = Destination(flaky, latency=0.002)
    options = SinkOptions(
        max_batch_size=7,
        max_in_flight_requests=4,
        initial_backoff_ms=1,
        max_backoff_ms=5,
        max_time_in_buffer_ms=5,
    )
    snapshots: list[tuple[int, WriterSnapshot[int]]] = []
    writer = FakeWriter(first, options=options)
    async with writer:
        for i in range(total):
            if i % 10 == 0:
                snapshots.append((len(first.accepted), writer.snapshot()))
            await writer.write(i)
            if i % 3 == 0:
                await anyio.lowlevel.checkpoint()
    assert sorted(first.accepted) == list(range(total))
    assert len(snapshots) == total // 10
    assert any(snap.entries for _, snap in snapshots)  # snapshots did see buffered entries

    for acknowledged, snap in snapshots:
        second = Destination()
        restored = FakeWriter(second, options=options)
        restored.restore(snap)
        async with restored:
            for i in range(snap.next_seq, total):
                await restored.write(i)
        landed = set(first.accepted[:acknowledged]) | set(second.accepted)
        assert landed == set(range(total)), f"snapshot at seq {snap.next_seq} lost entries"


async def test_snapshot_counts_in_flight_entries_as_unsent() -> None:
    release = anyio.Event()

    async def hold(entries: list[int], call: CallInfo) -> None:
        await release.wait()

    writer = FakeWriter(Destination(hold), options=SinkOptions(max_batch_size=2))
    async with writer:
        for i in range(5):
            await writer.write(i)
        await anyio.sleep(0.01)
        snap = writer.snapshot()
        release.set()
    assert [seq for seq, _ in snap.entries] == [0, 1, 2, 3, 4]
    assert snap.next_seq == 5


async def test_memory_stays_bounded_writing_a_million_entries_to_a_slow_destination() -> None:
    options = SinkOptions(max_batch_size=500, max_in_flight_requests=8, max_buffered_requests=5000)
    dest = Destination(latency=0.002)
    dest.accepted = _Counter()  # type: ignore[assignment]
    writer = FakeWriter(dest, options=options)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_held = 0
    async with writer:
        for i in range(1_000_000):
            await writer.write(i)
            if i % 1000 == 0:
                stats = writer.statistics()
                peak_held = max(peak_held, stats.buffered + stats.in_flight)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert writer.statistics().delivered == 1_000_000
    assert dest.accepted.count == 1_000_000  # type: ignore[attr-defined]
    assert peak_held <= 5000 + 500 * 8
    assert grown_mb < 50, f"RSS grew {grown_mb:.1f} MB"


class _Counter(list[Any]):
    """Counts accepted entries without keeping them."""

    count = 0  # type: ignore[assignment]

    def extend(self, items: Any) -> None:
        self.count += sum(1 for _ in items)  # type: ignore[operator]
