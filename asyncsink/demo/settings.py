"""What the demo is told to do (``DemoSettings``) and what it found (``DemoReport``)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..stats import WriterStatistics

__all__ = ["DemoReport", "DemoSettings", "KillInfo"]

_WIDTH = 96


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """What the demo does.

    Attributes:
        sink: ``http``, ``kinesis`` or ``elasticsearch``.
        rows: rows to deliver before the query stops.
        throttle_rate, error_rate, partial_failure_rate: faults the endpoint injects (a
            fraction of requests throttled, answered 5xx; a fraction of entries failed).
        latency_ms: the endpoint's latency per request.
        kill: kill a task mid-partition once.
        progress: show a progress bar.
        timeout_s: give up (exit 1) when the rows are not delivered by then.
        partitions: partitions of each micro-batch.
        max_batch_size, max_in_flight: the sink's ``maxBatchSize`` and
            ``maxInFlightRequests``. A small in-flight limit makes the killed task record
            some outcomes before it dies: each acknowledgement lets a new request start, and
            a request starts only once the outcomes seen so far are durable.
        chart: where to draw a PNG chart of the run (see ``chart``); none when ``None``.
    """

    sink: str = "http"
    rows: int = 50_000
    throttle_rate: float = 0.02
    error_rate: float = 0.01
    partial_failure_rate: float = 0.01
    latency_ms: float = 5.0
    kill: bool = True
    progress: bool = True
    timeout_s: float = 600.0
    partitions: int = 2
    max_batch_size: int = 100
    max_in_flight: int = 4
    chart: Path | None = None

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError(f"rows must be at least 1, got {self.rows}")
        for name in ("throttle_rate", "error_rate", "partial_failure_rate"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be within [0, 1), got {value}")
        if self.throttle_rate + self.error_rate >= 1.0:
            raise ValueError("throttle_rate and error_rate add up to 1 or more")
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise ValueError(f"latency_ms must be >= 0, got {self.latency_ms}")

    @property
    def rows_per_batch(self) -> int:
        """Rows per micro-batch: about ten batches, at least 1000 rows each."""
        return max(1000, math.ceil(self.rows / 10))

    @property
    def kill_at_request(self) -> int:
        """The request (counting re-sends) whose answer the killed attempt never records:
        the tenth, or the partition's last when it has fewer, but after a first full
        window."""
        per_partition = math.ceil(self.rows_per_batch / self.partitions / self.max_batch_size)
        return max(self.max_in_flight + 1, min(10, per_partition))


@dataclass(frozen=True, slots=True)
class KillInfo:
    """The task the demo killed: where, how many of its requests had been answered before,
    and how many were in flight (sent, not yet answered) when it died, just after one
    more was answered (not yet recorded)."""

    batch_id: int | None
    partition: int
    attempt: int
    acknowledged: int
    in_flight: int


@dataclass(frozen=True, kw_only=True)
class DemoReport:
    """What the demo did and what the destination holds at the end.

    ``writers`` sums the statistics of the task attempts that finished (a killed attempt
    reports nothing); ``stored`` counts what the destination holds, duplicates included.
    """

    sink: str
    rows: int
    batches: int
    writers: WriterStatistics
    stored: int
    duplicates: int
    lost: int
    unexpected: int
    idempotent: bool
    guarantee: str = ""
    settled_by: str = "asking the destination"
    resent_as: str = "unchanged (same idempotency key)"
    kill: KillInfo | None
    kill_requested: bool = False
    destination_lines: tuple[str, ...] = ()
    streaming_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing unexpected, and no duplicate where the sink promises none."""
        return (
            self.error is None
            and self.lost == 0
            and self.unexpected == 0
            and (self.duplicates == 0 or not self.idempotent)
        )

    @property
    def exit_code(self) -> int:
        """0 when ``ok``, else 1."""
        return 0 if self.ok else 1

    @property
    def throughput(self) -> float:
        """Rows per second from the start of the query to the last micro-batch."""
        return self.rows / self.streaming_s if self.streaming_s > 0 else 0.0

    def render(self) -> str:
        """The report, as printed at the end of the demo."""
        w = self.writers
        lines = [
            f"asyncsink demo: {self.rows:,} rows through the {self.sink} sink in "
            f"{self.batches} micro-batches ({self.wall_s:.1f} s in all)",
            _line("rows delivered", f"{self.rows - self.lost:,} of {self.rows:,}"),
            *([_line("guarantee", self.guarantee)] if self.guarantee else []),
            _line(
                "requests",
                f"{w.requests:,} by the task attempts that finished: {w.requests_failed:,} "
                f"failed as a whole, {w.throttled:,} throttled (whole or in part), "
                f"{w.timeouts:,} timed out",
            ),
        ]
        lines.extend(_line("", text) for text in self.destination_lines)
        retried = plural(w.retried, "entry", "entries")
        lines.append(_line("retries", f"{retried} sent again after a failure"))
        if self.kill is not None:
            where = f"batch {self.kill.batch_id}, " if self.kill.batch_id is not None else ""
            lines.append(
                _line(
                    "task killed",
                    f"{where}partition {self.kill.partition}, attempt {self.kill.attempt}, with "
                    f"{plural(self.kill.acknowledged, 'request')} answered before (each "
                    "recorded soon after its answer), one more answered but not yet "
                    f"recorded, and {self.kill.in_flight} in flight; Spark ran the task again",
                )
            )
        elif self.kill_requested:
            lines.append(_line("task killed", "none: no partition sent enough requests"))
        skipped = plural(w.skipped, "entry", "entries")
        lines.append(_line("skipped", f"{skipped} already delivered, not re-sent"))
        lines.append(
            _line(
                "recovered calls",
                f"{plural(w.reconciled + w.resent_calls, 'call')} left pending by a lost attempt: "
                f"{w.reconciled:,} settled by {self.settled_by}, {w.resent_calls:,} re-sent "
                f"{self.resent_as}",
            )
        )
        note = "" if self.idempotent else " (at least once: this sink has no idempotency key)"
        lines.append(_line("duplicates", f"{self.duplicates:,} stored twice{note}"))
        if self.unexpected:
            verb = "was" if self.unexpected == 1 else "were"
            unexpected = f"{plural(self.unexpected, 'row')} that {verb} never written"
            lines.append(_line("unexpected", unexpected))
        lines.append(_line("lost rows", f"{self.lost:,}"))
        latency = ""
        if w.p50_ms is not None and w.p99_ms is not None:
            latency = f"; request latency p50 {_ms(w.p50_ms)}, p99 {_ms(w.p99_ms)}"
        lines.append(
            _line(
                "throughput",
                f"{self.throughput:,.0f} rows/s over {self.streaming_s:.1f} s of streaming "
                f"(Spark's per-batch work included){latency}",
            )
        )
        if self.error is not None:
            lines.append(f"FAILED: {self.error}")
        elif self.ok and self.duplicates:
            lines.append(
                f"OK: every row was delivered; {plural(self.duplicates, 'row')} stored twice, as "
                "at-least-once delivery allows."
            )
        elif self.ok and not self.idempotent:
            lines.append("OK: every row was delivered at least once; none was stored twice.")
        elif self.ok:
            lines.append("OK: every row was delivered, and none was stored twice.")
        else:
            lines.append("FAILED: rows were lost or stored twice (see above).")
        return "\n".join(lines)


def plural(count: int, word: str, words: str = "") -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {words or word + 's'}"


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def _line(label: str, text: str) -> str:
    return textwrap.fill(text, _WIDTH, initial_indent=f"  {label:<16} ", subsequent_indent=" " * 19)
