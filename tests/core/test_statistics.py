"""Statistics of several writers: counts add up, limits do not."""

from __future__ import annotations

from asyncsink import RequestSizes, WriterStatistics
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


def test_a_sum_of_writers_counts_requests_by_their_entries() -> None:
    first = WriterStatistics(request_entries=RequestSizes.of({500: 3, 17: 1}))
    second = WriterStatistics(request_entries=RequestSizes.of({500: 2, 4: 1}))
    total = sum([first, second], WriterStatistics())
    assert total.request_entries.counts == ((4, 1), (17, 1), (500, 5))


def test_the_middle_of_a_latency_bucket_is_within_it() -> None:
    counts = new_latency_counts()
    for latency_ms in (0.1, 3.0, 40.0, 900.0):
        counts[LatencyHistogram.bucket(latency_ms)] += 1
    middles = [middle for middle, _ in LatencyHistogram.of(counts).middles()]
    for latency_ms, middle in zip((0.1, 3.0, 40.0, 900.0), middles, strict=True):
        assert LatencyHistogram.bucket(middle) == LatencyHistogram.bucket(latency_ms)
        if latency_ms > 0.25:
            assert abs(middle - latency_ms) / latency_ms < 0.13
