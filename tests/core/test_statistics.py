"""Statistics of several writers: counts add up, limits do not."""

from __future__ import annotations

from asyncsink import WriterStatistics
from asyncsink.stats import LatencyHistogram, new_latency_counts


def test_a_sum_of_writers_adds_counts_and_keeps_the_largest_limits() -> None:
    counts = new_latency_counts()
    counts[3] = 2
    first = WriterStatistics(
        written=10, delivered=9, failed=1, requests=3, window=400, in_flight_limit=28,
        latency=LatencyHistogram.of(counts),
    )  # fmt: skip
    second = WriterStatistics(written=5, delivered=5, requests=1, window=900, in_flight_limit=16)
    total = sum([first, second], WriterStatistics())
    assert (total.written, total.delivered, total.failed, total.requests) == (15, 14, 1, 4)
    assert (total.window, total.in_flight_limit) == (900, 28)
    assert sum(total.latency.counts) == 2
