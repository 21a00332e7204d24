"""The instruments asyncsink reports, in one table: names, kinds, units and meaning.

Names follow OpenTelemetry's naming guidelines (a ``asyncsink.`` namespace, dots between
words, UCUM units with ``{annotations}`` for counts; the Prometheus exporter turns
``asyncsink.entries.delivered`` into ``asyncsink_entries_delivered_total``). The request
duration is in seconds, as the semantic conventions' ``http.client.request.duration``.

Every data point carries the attributes of ``attributes`` (see there): which sink, which
``sinkId``, which destination, and ``asyncsink.report``, which says where it was counted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["INSTRUMENTS", "Instrument", "Kind"]


class Kind(enum.Enum):
    """An OpenTelemetry instrument kind."""

    COUNTER = "Counter"
    HISTOGRAM = "Histogram"
    OBSERVABLE_UP_DOWN_COUNTER = "ObservableUpDownCounter"


@dataclass(frozen=True, slots=True, kw_only=True)
class Instrument:
    """One instrument: its name, kind and unit, what it counts, which statistics field
    the driver reads it from (``""``: reported live only) and, for a histogram, the
    bucket boundaries advised to the SDK."""

    name: str
    kind: Kind
    unit: str
    description: str
    field: str = ""
    buckets: tuple[float, ...] = ()


def _counter(name: str, unit: str, field: str, description: str) -> Instrument:
    return Instrument(name=name, kind=Kind.COUNTER, unit=unit, field=field, description=description)


def _level(name: str, unit: str, description: str) -> Instrument:
    kind = Kind.OBSERVABLE_UP_DOWN_COUNTER
    return Instrument(name=name, kind=kind, unit=unit, description=description)


# Seconds: from half a millisecond (a loopback endpoint) to a minute (requestTimeoutMs).
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                    0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0, 60.0)  # fmt: skip
ENTRIES_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 5000, 10000)

INSTRUMENTS: tuple[Instrument, ...] = (
    _counter("asyncsink.entries.written", "{entry}", "written",
             "Entries accepted by write."),
    _counter("asyncsink.entries.delivered", "{entry}", "delivered",
             "Entries the destination acknowledged."),
    _counter("asyncsink.entries.retried", "{entry}", "retried",
             "Entries put back for another attempt (one per attempt)."),
    _counter("asyncsink.entries.skipped", "{entry}", "skipped",
             "Entries not sent, as an earlier attempt or run delivered them."),
    _counter("asyncsink.entries.skipped_stale", "{entry}", "skipped_stale",
             "Delivered entries the destination already held a newer version of."),
    _counter("asyncsink.entries.dead_lettered", "{entry}", "dead_lettered",
             "Entries handed to the dead-letter target, by asyncsink.dead_letter.cause."),
    _counter("asyncsink.entries.diverted", "{entry}", "diverted",
             "Dead-lettered entries that went there out of retries (onRetriesExhausted), "
             "not as bad records."),
    _counter("asyncsink.rate_cap.waited", "ms", "rate_cap_waited_ms",
             "Time requests were held back by the rate caps (maxRequestsPerSecond...)."),
    _counter("asyncsink.entries.failed", "{entry}", "failed",
             "Entries out of retries, or in a request that failed fatally."),
    _counter("asyncsink.requests.sent", "{request}", "requests",
             "Requests that got an answer, failed or timed out."),
    _counter("asyncsink.requests.throttled", "{request}", "throttled",
             "Requests the destination pushed back on (429, 503, a throttled entry)."),
    _counter("asyncsink.requests.timed_out", "{request}", "timeouts",
             "Requests given up after requestTimeoutMs."),
    _counter("asyncsink.requests.failed", "{request}", "requests_failed",
             "Requests that failed as a whole (error.type says how, when reported live)."),
    _counter("asyncsink.bytes.sent", "By", "bytes_sent",
             "Bytes of the entries of the requests that got an answer."),
    _counter("asyncsink.calls.reconciled", "{call}", "reconciled",
             "Calls left without an answer, settled by looking them up at the destination."),
    _counter("asyncsink.calls.resent", "{call}", "resent_calls",
             "Calls left without an answer, re-sent unsettled with the same key."),
    Instrument(name="asyncsink.request.duration", kind=Kind.HISTOGRAM, unit="s",
               field="latency", buckets=DURATION_BUCKETS,
               description="Time from a request's start to its answer, failure or timeout."),
    Instrument(name="asyncsink.request.entries", kind=Kind.HISTOGRAM, unit="{entry}",
               field="request_entries", buckets=ENTRIES_BUCKETS,
               description="Entries per request (committed only)."),
    _level("asyncsink.requests.limit", "{request}",
           "Requests allowed in flight, summed over the running writers (live only)."),
    _level("asyncsink.requests.active", "{request}", "Requests in flight (live only)."),
    _level("asyncsink.entries.buffered", "{entry}",
           "Entries waiting in the writers' buffers (live only)."),
)  # fmt: skip
