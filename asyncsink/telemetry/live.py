"""What a running writer records: ``WriterMetrics``, a null object without an SDK.

The writer calls ``request_ended`` once per request and ``update`` when requests start
or end, never per entry. ``update`` reads the writer's counts (through the function it
was given), adds to the counters what they grew by since the last call, and moves the
up-down counters (requests allowed and in flight, entries buffered) to the writer's
current values; ``close`` takes this writer's share of those back out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .attributes import ERROR_TYPE, LIVE, REPORT, Attributes
from .instruments import INSTRUMENTS, Kind
from .meter import Instruments, active_instruments

__all__ = ["LiveMetrics", "NoMetrics", "WriterMetrics", "writer_metrics"]

# Statistics fields the writer's counts are synced from (requests, failures and timeouts
# are recorded per request instead, with their error type).
_PER_REQUEST = frozenset(("requests", "requests_failed", "timeouts", "latency"))
_SYNCED = tuple(
    (spec.field, spec.name)
    for spec in INSTRUMENTS
    if spec.kind is Kind.COUNTER and spec.field and spec.field not in _PER_REQUEST
)
# The writer's counts (``WriterStatistics`` field names), requests allowed, requests in
# flight and entries buffered, as a writer's ``read`` function gives them.
Reading = tuple[Mapping[str, int], int, int, int]

_LEVELS = ("asyncsink.requests.limit", "asyncsink.requests.active", "asyncsink.entries.buffered")


class WriterMetrics(Protocol):
    """Where a writer reports what it does, as it does it."""

    def request_ended(self, seconds: float, entries: int, error_type: str | None) -> None:
        """A request ended after ``seconds``: answered (``error_type`` ``None``), failed
        or timed out."""

    def update(self) -> None:
        """Read the writer's counts and levels, and record what changed."""

    def close(self) -> None:
        """The writer closed: its levels leave the process's sums."""


class NoMetrics:
    """Records nothing: the writer's metrics when no OpenTelemetry SDK is configured."""

    def request_ended(self, seconds: float, entries: int, error_type: str | None) -> None:
        pass

    def update(self) -> None:
        pass

    def close(self) -> None:
        pass


class LiveMetrics:
    """Records a writer's requests and counts on OpenTelemetry instruments."""

    def __init__(
        self, instruments: Instruments, attributes: Attributes, read: Callable[[], Reading]
    ) -> None:
        self._read = read
        self._attributes = {**attributes, REPORT: LIVE}
        self._failed_attributes: dict[str, dict[str, str]] = {}
        self._counters = [(field, instruments[name]) for field, name in _SYNCED]
        self._reported = dict.fromkeys((field for field, _ in _SYNCED), 0)
        self._levels = [instruments[name] for name in _LEVELS]
        self._level_values = [0, 0, 0]
        self._sent = instruments["asyncsink.requests.sent"]
        self._failed = instruments["asyncsink.requests.failed"]
        self._timed_out = instruments["asyncsink.requests.timed_out"]
        self._duration = instruments["asyncsink.request.duration"]
        self._entries = instruments["asyncsink.request.entries"]

    def request_ended(self, seconds: float, entries: int, error_type: str | None) -> None:
        attributes = self._attributes
        self._sent.add(1, attributes)
        self._entries.record(entries, attributes)
        if error_type is not None:
            attributes = self._with_error(error_type)
            self._failed.add(1, attributes)
            if error_type == "timeout":
                self._timed_out.add(1, self._attributes)
        self._duration.record(seconds, attributes)

    def update(self) -> None:
        counts, limit, active, buffered = self._read()
        attributes, reported = self._attributes, self._reported
        for field, counter in self._counters:
            grown = counts[field] - reported[field]
            if grown:
                reported[field] += grown
                counter.add(grown, attributes)
        self._set_levels((limit, active, buffered))

    def close(self) -> None:
        self._set_levels((0, 0, 0))

    def _set_levels(self, values: tuple[int, int, int]) -> None:
        for index, value in enumerate(values):
            moved = value - self._level_values[index]
            if moved:
                self._level_values[index] = value
                self._levels[index].add(moved, self._attributes)

    def _with_error(self, error_type: str) -> dict[str, str]:
        found = self._failed_attributes.get(error_type)
        if found is None:
            found = self._failed_attributes[error_type] = {
                **self._attributes,
                ERROR_TYPE: error_type,
            }
        return found


def writer_metrics(attributes: Attributes, read: Callable[[], Reading]) -> WriterMetrics:
    """``LiveMetrics`` when an OpenTelemetry SDK is configured, else ``NoMetrics``.

    ``read`` gives the writer's counts and levels when ``update`` is called."""
    instruments: Any = active_instruments()
    if instruments is None:
        return NoMetrics()
    return LiveMetrics(instruments, attributes, read)
