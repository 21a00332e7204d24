"""What the Spark driver records once Spark committed a micro-batch or a job.

The tasks bring their statistics back (``foreach_*`` as partition results, the data
sources in commit messages), each with its writer's attributes. The driver adds every
counter of ``INSTRUMENTS`` that a statistics field feeds (dead letters once per cause,
with its attribute), and for each request one
entries-per-request observation and one request-duration observation, at the middle of
the latency bucket the writer counted it in (within 12% of the measured time). Nothing is
recorded without an SDK.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..stats import WriterStatistics
from .attributes import CAUSE, COMMITTED, REPORT, Attributes
from .instruments import INSTRUMENTS, Kind
from .meter import Instruments, active_instruments

__all__ = ["record_committed"]

_DEAD_LETTERED = "asyncsink.entries.dead_lettered"  # recorded by cause
_COUNTERS = tuple(
    (spec.field, spec.name)
    for spec in INSTRUMENTS
    if spec.kind is Kind.COUNTER and spec.field and spec.name != _DEAD_LETTERED
)
_DURATION = "asyncsink.request.duration"
_ENTRIES = "asyncsink.request.entries"


def record_committed(reports: Iterable[tuple[WriterStatistics, Attributes]]) -> None:
    """Record the statistics of each committed task with its writer's attributes."""
    instruments = active_instruments()
    if instruments is None:
        return
    for statistics, attributes in reports:
        _record(instruments, statistics, {**attributes, REPORT: COMMITTED})


def _record(instruments: Instruments, statistics: WriterStatistics, attributes: Attributes) -> None:
    for field, name in _COUNTERS:
        value = getattr(statistics, field)
        if value:
            instruments[name].add(value, attributes)
    for cause, entries in statistics.dead_letter_causes.counts:
        instruments[_DEAD_LETTERED].add(entries, {**attributes, CAUSE: cause})
    _replay(instruments[_DURATION], statistics.latency.middles(), attributes, scale=1 / 1000)
    _replay(instruments[_ENTRIES], statistics.request_entries.counts, attributes)


def _replay(
    histogram: Any, values: Iterable[tuple[float, int]], attributes: Attributes, scale: float = 1
) -> None:
    """Record each ``(value, count)``: ``count`` observations of ``value * scale``."""
    for value, count in values:
        for _ in range(count):
            histogram.record(value * scale, attributes)
