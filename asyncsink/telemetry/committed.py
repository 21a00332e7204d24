"""What the Spark driver records once Spark committed a micro-batch or a job.

The tasks bring their statistics back (``foreach_*`` as partition results, the data
sources in commit messages), each with its writer's attributes. The driver adds every
counter of ``INSTRUMENTS`` that a statistics field feeds, and one request-duration
observation per request, at the middle of the latency bucket the writer counted it in
(within 12% of the measured time). Nothing is recorded without an SDK.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..stats import WriterStatistics
from .attributes import COMMITTED, REPORT, Attributes
from .instruments import INSTRUMENTS, Kind
from .meter import Instruments, active_instruments

__all__ = ["record_committed"]

_COUNTERS = tuple(
    (spec.field, spec.name) for spec in INSTRUMENTS if spec.kind is Kind.COUNTER and spec.field
)
_DURATION = "asyncsink.request.duration"


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
    duration = instruments[_DURATION]
    for middle_ms, count in statistics.latency.middles():
        for _ in range(count):
            duration.record(middle_ms / 1000, attributes)
