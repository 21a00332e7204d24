"""Entries a destination refused as older than what it holds (``SubmitResult.stale``):
delivered, never retried, counted as ``skipped_stale`` in the statistics, their sum, the
live metrics and the notebook table; indexes checked like the others."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from asyncsink import SinkOptions, SubmitResult, WriterStatistics
from asyncsink.request import as_result
from asyncsink.stats import batches_text
from tests.core.fakes import Destination, FakeWriter
from tests.metrics import data_points, total


def stale_writer() -> FakeWriter:
    def handle(entries: list[Any], call: Any) -> SubmitResult:
        return SubmitResult(stale=[0, 1])  # the first two of every request

    options = SinkOptions(max_batch_size=10, initial_backoff_ms=1, max_backoff_ms=2)
    return FakeWriter(Destination(handle), options=options)


async def deliver(writer: FakeWriter, n: int) -> None:
    async with writer:
        await writer.write_all(range(n))


def test_stale_entries_are_delivered_not_retried_and_counted(metric_reader: Any) -> None:
    writer = stale_writer()
    anyio.run(deliver, writer, 100)
    stats = writer.statistics()
    assert (stats.delivered, stats.skipped_stale, stats.retried, stats.failed) == (100, 20, 0, 0)
    assert stats.requests == 10
    assert (stats + stats).skipped_stale == 40
    assert "100 delivered (20 stale)" in stats.summary()
    points = data_points(metric_reader)
    assert total(points, "asyncsink.entries.skipped_stale") == 20


def test_the_table_shows_stale_only_when_there_are_any() -> None:
    plain = WriterStatistics(written=5, delivered=5)
    stale = WriterStatistics(written=5, delivered=5, skipped_stale=2)
    assert "stale" not in batches_text(plain, 1, {1: plain})
    table = batches_text(plain + stale, 2, {1: plain, 2: stale}).splitlines()
    assert table[0].split()[:4] == ["batch", "written", "delivered", "stale"]
    assert [line.split()[3] for line in table[1:3]] == ["0", "2"]
    assert "stale" in stale._repr_html_() and "stale" not in plain._repr_html_()


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        (SubmitResult(stale=[3]), "holds index 3"),
        (SubmitResult(stale=[0], retry=[0]), "as stale and to retry"),
        (SubmitResult(stale=[1], rejected={1: "bad"}), "as stale and to retry or as rejected"),
    ],
)
def test_stale_indexes_are_checked(result: SubmitResult, problem: str) -> None:
    with pytest.raises(TypeError, match=problem):
        as_result(result, ["a", "b", "c"])
