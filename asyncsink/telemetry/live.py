"""What a running writer records: ``WriterMetrics``, a null object without an SDK.

The writer calls ``request_ended`` once per request and ``update`` when a request ended,
never per entry. ``request_ended`` only notes the request's duration (and counts a
failure, with its type). ``update`` does nothing until ``SYNC_S`` passed since it last
looked; then it records the noted durations, one observation each, reads the writer's
counts (through the function it was given) and adds to the counters what they grew by;
``close`` does that a last time. An SDK call costs about as much as a request's other
work for 5 to 10 entries, and calls made together cost less each: so a request costs one
call, made later with others, and entries per request are recorded from the committed
statistics only. The levels (requests allowed and in flight, entries buffered)
are observable: the SDK reads them from the running writers when it collects, so a
writer whose requests hang still shows them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .attributes import CAUSE, ERROR_TYPE, LIVE, REPORT, Attributes
from .instruments import INSTRUMENTS, Kind
from .meter import Instruments, active_instruments

__all__ = ["CAUSE_COUNT", "LiveMetrics", "NoMetrics", "WriterMetrics", "writer_metrics"]

SYNC_S = 0.5  # how often a running writer's counts reach the counters, at most

# Statistics fields recorded per request instead, failures with their error type; and
# dead letters, recorded by cause
_PER_REQUEST = frozenset(("requests_failed", "timeouts", "latency", "request_entries"))
_BY_CAUSE = "dead_lettered"
_SYNCED = tuple(
    (spec.field, spec.name)
    for spec in INSTRUMENTS
    if spec.kind is Kind.COUNTER and spec.field and spec.field not in (*_PER_REQUEST, _BY_CAUSE)
)
_DEAD_LETTERED = "asyncsink.entries.dead_lettered"
# The writer's counts (``WriterStatistics`` field names, and its dead letters of each
# cause as ``CAUSE_COUNT + cause``), requests allowed, requests in flight and entries
# buffered, as a writer's ``read`` function gives them.
Reading = tuple[Mapping[str, int], int, int, int]
CAUSE_COUNT = "dead_lettered."


class WriterMetrics(Protocol):
    """Where a writer reports what it does, as it does it."""

    def request_ended(self, seconds: float, error_type: str | None) -> None:
        """A request ended after ``seconds``: answered (``error_type`` ``None``), failed
        or timed out."""

    def update(self) -> None:
        """Read the writer's counts and levels, and record what changed (at most every
        ``SYNC_S``)."""

    def close(self) -> None:
        """The writer closed: its last counts are recorded, its levels leave the sums."""


class NoMetrics:
    """Records nothing: the writer's metrics when no OpenTelemetry SDK is configured."""

    def request_ended(self, seconds: float, error_type: str | None) -> None:
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
        self._next_sync = 0.0
        self._attributes = {**attributes, REPORT: LIVE}
        self._failed_attributes: dict[str, dict[str, str]] = {}
        self._counters = [(field, instruments[name]) for field, name in _SYNCED]
        self._reported = dict.fromkeys((field for field, _ in _SYNCED), 0)
        self._running = instruments.running
        self._running.add(self)
        self._dead_lettered = instruments[_DEAD_LETTERED]
        self._by_cause: dict[str, int] = {}  # dead letters reported, by cause
        self._failed = instruments["asyncsink.requests.failed"]
        self._timed_out = instruments["asyncsink.requests.timed_out"]
        self._duration = instruments["asyncsink.request.duration"]
        self._ended: list[tuple[float, Attributes]] = []  # durations not yet recorded

    def request_ended(self, seconds: float, error_type: str | None) -> None:
        attributes = self._attributes
        if error_type is not None:
            attributes = self._with_error(error_type)
            self._failed.add(1, attributes)
            if error_type == "timeout":
                self._timed_out.add(1, self._attributes)
        self._ended.append((seconds, attributes))

    def update(self) -> None:
        now = time.monotonic()
        if now >= self._next_sync:
            self._next_sync = now + SYNC_S
            self._sync()

    def close(self) -> None:
        self._sync()
        self._running.discard(self)

    @property
    def attributes(self) -> Mapping[str, str]:
        """The attributes of this writer's data points."""
        return self._attributes

    def levels(self) -> tuple[int, ...]:
        """Requests allowed in flight, requests in flight, entries buffered."""
        return self._read()[1:]

    def _sync(self) -> None:
        ended, self._ended = self._ended, []
        record = self._duration.record
        for seconds, attributes_of_request in ended:
            record(seconds, attributes_of_request)
        counts = self._read()[0]
        attributes, reported = self._attributes, self._reported
        for field, counter in self._counters:
            grown = counts[field] - reported[field]
            if grown:
                reported[field] += grown
                counter.add(grown, attributes)
        for key, count in counts.items():
            if key.startswith(CAUSE_COUNT):
                cause = key[len(CAUSE_COUNT) :]
                grown = count - self._by_cause.get(cause, 0)
                if grown:
                    self._by_cause[cause] = count
                    self._dead_lettered.add(grown, {**attributes, CAUSE: cause})

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
