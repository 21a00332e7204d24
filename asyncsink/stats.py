"""Statistics: frozen snapshots shared by the writer, the Spark runner and the driver summary.

A snapshot is cheap to take, safe to pickle (it travels in Spark commit messages) and can
be added to another (``a + b``) to sum partitions into a batch. Request latencies are
kept in a fixed log-scaled histogram so that percentiles survive the sum.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DeadLetterCauses",
    "LatencyHistogram",
    "RequestSizes",
    "Tally",
    "WriterStatistics",
    "batches_html",
    "batches_text",
]

# Bucket upper bounds in milliseconds: 0.25 ms .. ~8.4 min, each 25% above the last.
_BOUNDS: tuple[float, ...] = tuple(0.25 * 1.25**i for i in range(76))


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Counts of request latencies in log-scaled buckets (bucket ``i`` ends at ``_BOUNDS[i]``)."""

    counts: tuple[int, ...] = ()

    @staticmethod
    def bucket(latency_ms: float) -> int:
        return min(bisect.bisect_left(_BOUNDS, latency_ms), len(_BOUNDS) - 1)

    @classmethod
    def of(cls, counts: list[int]) -> LatencyHistogram:
        return cls(tuple(counts))

    @property
    def total(self) -> int:
        return sum(self.counts)

    def percentile(self, p: float) -> float | None:
        """The upper bound (ms) of the bucket holding the ``p``-th percentile, or ``None``."""
        total = self.total
        if not total:
            return None
        rank = p / 100 * total
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if count and seen >= rank:
                return round(_BOUNDS[index], 3)
        return round(_BOUNDS[len(self.counts) - 1], 3)

    def middles(self) -> Iterator[tuple[float, int]]:
        """Each non-empty bucket's middle (ms; the geometric mean of its bounds, half the
        first bucket's bound) with its count: a latency the bucket holds, within 12%."""
        for index, count in enumerate(self.counts):
            if count:
                low = _BOUNDS[index - 1] if index else _BOUNDS[0] / 4
                yield (low * _BOUNDS[index]) ** 0.5, count

    def __add__(self, other: LatencyHistogram) -> LatencyHistogram:
        size = max(len(self.counts), len(other.counts))
        a = self.counts + (0,) * (size - len(self.counts))
        b = other.counts + (0,) * (size - len(other.counts))
        return LatencyHistogram(tuple(x + y for x, y in zip(a, b, strict=True)))


@dataclass(frozen=True, slots=True)
class RequestSizes:
    """How many requests carried each number of entries: ``(entries, requests)`` pairs,
    by entries (a writer's requests come in few sizes: its batch size, and retries)."""

    counts: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, counts: Mapping[int, int]) -> RequestSizes:
        return cls(tuple(sorted(counts.items())))

    def __add__(self, other: RequestSizes) -> RequestSizes:
        merged = dict(self.counts)
        for entries, requests in other.counts:
            merged[entries] = merged.get(entries, 0) + requests
        return RequestSizes.of(merged)


@dataclass(frozen=True, slots=True)
class DeadLetterCauses:
    """How many entries went to the dead letters for each cause: ``(cause, entries)``
    pairs, by cause (``bad_record``, ``rejected``, ``retries_exhausted``, ``ordering``)."""

    counts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> DeadLetterCauses:
        return cls(tuple(sorted((cause, n) for cause, n in counts.items() if n)))

    def __add__(self, other: DeadLetterCauses) -> DeadLetterCauses:
        merged = dict(self.counts)
        for cause, entries in other.counts:
            merged[cause] = merged.get(cause, 0) + entries
        return DeadLetterCauses.of(merged)


def new_latency_counts() -> list[int]:
    """A mutable histogram for a writer to fill; freeze it with ``LatencyHistogram.of``."""
    return [0] * len(_BOUNDS)


_LIMITS = frozenset(("window", "in_flight_limit"))


@dataclass(frozen=True, slots=True, kw_only=True)
class WriterStatistics:
    """What a writer (or a sum of writers) did. Counts are of entries unless named requests.

    ``written`` entries were accepted by ``write``; each ends ``delivered`` (acknowledged by
    the destination), ``skipped`` (already delivered by an earlier attempt, per the call
    log), ``dead_lettered``, ``failed`` (out of retries, or in a request that failed
    fatally) or is still ``buffered`` / ``in_flight`` (a request sent, or one without an
    answer being looked up). ``skipped_stale`` counts the delivered entries the
    destination had superseded: a versioned write it refused because it holds a newer
    version (the Elasticsearch sink's ``versionField``); they changed nothing.
    ``diverted`` counts the ``dead_lettered`` entries that went there out of retries
    (``onRetriesExhausted=deadLetter``), not as bad records; ``dead_letter_causes``
    splits ``dead_lettered`` by cause. ``rate_cap_waited_ms`` is
    how long requests were held back by the rate caps (``maxRequestsPerSecond``...).
    ``window`` (the AIMD window, in entries) and ``in_flight_limit`` (the requests
    allowed in flight, adapted to their latency) are the limits when the
    snapshot was taken; a sum of writers (a job's, a batch's) keeps the largest of each,
    since a limit holds per writer and the writers of a job need not run at once.
    ``timeouts`` counts requests the writer gave up on after ``requestTimeoutMs``; one a
    sink's own client gave up on (the HTTP sink's ``readTimeoutMs``) is one of
    ``requests_failed``. ``latency`` counts the requests by duration (ms),
    ``request_entries`` by the entries they carried.
    """

    written: int = 0
    delivered: int = 0
    skipped: int = 0
    skipped_stale: int = 0
    dead_lettered: int = 0
    diverted: int = 0
    rate_cap_waited_ms: int = 0
    failed: int = 0
    retried: int = 0
    buffered: int = 0
    in_flight: int = 0
    bytes_sent: int = 0
    requests: int = 0
    requests_failed: int = 0
    throttled: int = 0
    timeouts: int = 0
    late_responses: int = 0
    resent_calls: int = 0
    reconciled: int = 0
    window: int = 0
    in_flight_limit: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    request_entries: RequestSizes = field(default_factory=RequestSizes)
    dead_letter_causes: DeadLetterCauses = field(default_factory=DeadLetterCauses)

    @property
    def p50_ms(self) -> float | None:
        return self.latency.percentile(50)

    @property
    def p99_ms(self) -> float | None:
        return self.latency.percentile(99)

    def __add__(self, other: WriterStatistics) -> WriterStatistics:
        """The statistics of both writers: counts summed, limits the larger of the two."""
        values = {}
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            values[f.name] = max(mine, theirs) if f.name in _LIMITS else mine + theirs
        return WriterStatistics(**values)

    def summary(self) -> str:
        """One line for logs: the counts a user checks first."""
        p50, p99 = self.p50_ms, self.p99_ms
        latency = f", p50 {p50:g} ms, p99 {p99:g} ms" if p50 is not None and p99 is not None else ""
        lost = ""
        if self.reconciled or self.resent_calls:
            lost = (
                f"; calls left without an answer: {self.reconciled} settled by looking "
                f"them up at the destination, {self.resent_calls} re-sent unsettled"
            )
        stale = f" ({self.skipped_stale} stale)" if self.skipped_stale else ""
        return (
            f"{self.written} written, {self.delivered} delivered{stale}, "
            f"{self.skipped} skipped, "
            f"{self.dead_lettered} dead-lettered, {self.failed} failed, {self.retried} retried, "
            f"{self.requests} requests ({self.requests_failed} failed, {self.throttled} "
            f"throttled, {self.timeouts} timed out), {self.bytes_sent} bytes{latency}{lost}"
        )

    def _repr_html_(self) -> str:  # a notebook shows a table
        return _html(["", "entries"], [[name, value] for name, value in _cells(self)])

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's plain text
        printer.text(_text(["", "entries"], [[name, value] for name, value in _cells(self)]))


# The counts a notebook table shows, by the name it gives them.
_SHOWN = (
    ("written", "written"),
    ("delivered", "delivered"),
    ("skipped", "skipped"),
    ("dead_lettered", "dead-lettered"),
    ("failed", "failed"),
    ("retried", "retried"),
    ("requests", "requests"),
    ("throttled", "throttled"),
)


def _cells(stats: WriterStatistics, stale: bool | None = None) -> list[tuple[str, str]]:
    """The cells of a table row; ``stale``: with a ``stale`` cell (by default, when
    ``stats`` has any), which only versioned writes fill."""
    cells = [(label, f"{getattr(stats, name):,}") for name, label in _SHOWN]
    if stale or (stale is None and stats.skipped_stale):
        cells.insert(2, ("stale", f"{stats.skipped_stale:,}"))
    p99 = stats.p99_ms
    return [*cells, ("p99 latency", "-" if p99 is None else f"{p99:g} ms")]


def _batch_rows(
    totals: WriterStatistics, runs: int, batches: Mapping[int, WriterStatistics], last: int
) -> tuple[list[str], list[list[str]]]:
    stale = totals.skipped_stale > 0
    header = ["batch", *(label for label, _ in _cells(totals, stale))]
    shown = list(batches.items())[-last:]
    rows = [
        [str(batch_id), *(value for _, value in _cells(stats, stale))] for batch_id, stats in shown
    ]
    total = f"all {runs:,} batch" + ("" if runs == 1 else "es")
    rows.append([total, *(value for _, value in _cells(totals, stale))])
    return header, rows


def batches_html(
    totals: WriterStatistics, runs: int, batches: Mapping[int, WriterStatistics], last: int = 10
) -> str:
    """An HTML table of the ``last`` batches of ``batches`` and a row of ``totals``."""
    return _html(*_batch_rows(totals, runs, batches, last))


def batches_text(
    totals: WriterStatistics, runs: int, batches: Mapping[int, WriterStatistics], last: int = 10
) -> str:
    """The same table as ``batches_html``, in plain text."""
    return _text(*_batch_rows(totals, runs, batches, last))


def _html(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _text(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )  # fmt: skip
        for row in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


class Tally:
    """A running writer's counts of entries and requests, for ``WriterStatistics``."""

    __slots__ = ("counts", "latency", "sizes")

    COUNTED = (
        "delivered",
        "skipped_stale",
        "retried",
        "bytes_sent",
        "requests",
        "requests_failed",
        "throttled",
        "timeouts",
        "late_responses",
    )

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.COUNTED, 0)
        self.latency = new_latency_counts()
        self.sizes: dict[int, int] = {}  # requests by the entries they carried

    def request_ended(self, entries: int, seconds: float) -> None:
        self.counts["requests"] += 1
        self.latency[LatencyHistogram.bucket(seconds * 1000)] += 1
        self.sizes[entries] = self.sizes.get(entries, 0) + 1

    def snapshot(self, **more: Any) -> WriterStatistics:
        """The statistics: these counts, and ``more`` (the writer's other counts and
        levels)."""
        values: dict[str, Any] = {**self.counts, **more}
        return WriterStatistics(
            **values,
            latency=LatencyHistogram.of(self.latency),
            request_entries=RequestSizes.of(self.sizes),
        )
