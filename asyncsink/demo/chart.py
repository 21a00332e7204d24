"""A PNG chart of the demo's run, one point per micro-batch: entries delivered per
second, throttled requests and retried entries counted on an axis of their own, request
latency p50 and p99, and the limit of requests in flight; a line marks the batch whose
task was killed. Drawn with matplotlib, which only the chart needs: without it, the demo
says so and goes on."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..stats import WriterStatistics

__all__ = ["BatchPoint", "write_chart"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPoint:
    """One micro-batch: when it ended (seconds from the start of the stream), how long
    it ran, and what its writers did."""

    end_s: float
    seconds: float
    delivered: int
    p50_ms: float | None
    p99_ms: float | None
    limit: int
    throttled: int
    retried: int
    killed: bool = False  # a task of this batch was killed (and run again)

    @classmethod
    def of(
        cls, stats: WriterStatistics, *, end_s: float, seconds: float, killed: bool = False
    ) -> BatchPoint:
        return cls(end_s=end_s, seconds=seconds, delivered=stats.delivered,
                   p50_ms=stats.p50_ms, p99_ms=stats.p99_ms, limit=stats.in_flight_limit,
                   throttled=stats.throttled, retried=stats.retried, killed=killed)  # fmt: skip

    @property
    def rate(self) -> float:
        """Entries delivered per second during the batch."""
        return self.delivered / self.seconds if self.seconds > 0 else 0.0


def write_chart(points: Sequence[BatchPoint], path: Path) -> str:
    """Draw ``points`` into the PNG file ``path``; what the report says about it."""
    if importlib.util.find_spec("matplotlib") is None:
        return "chart: not drawn (it needs matplotlib: pip install matplotlib)"
    if not points:
        return "chart: not drawn (no micro-batch delivered anything)"
    _draw(points, path)
    return f"chart: {path}"


def _draw(points: Sequence[BatchPoint], path: Path) -> None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(9, 10), layout="constrained")
    rate, events, latency, limit = figure.subplots(4, 1, sharex=True)
    starts = [point.end_s - point.seconds for point in points]
    ends = [point.end_s for point in points]
    middles = [(start + end) / 2 for start, end in zip(starts, ends, strict=True)]
    rate.hlines([point.rate for point in points], starts, ends, label="delivered", lw=2)
    rate.set_ylabel("entries / s")
    rate.set_ylim(bottom=0)
    _events(events, points, starts)
    for label, values in (("p50", [p.p50_ms for p in points]), ("p99", [p.p99_ms for p in points])):
        latency.plot(middles, [value if value is not None else float("nan") for value in values],
                     marker="o", label=label)  # fmt: skip
    latency.set_ylabel("request latency (ms)")
    latency.set_ylim(bottom=0)
    latency.legend(loc="upper right")
    limit.hlines([point.limit for point in points], starts, ends, lw=2)
    limit.set_ylabel("requests in flight, limit")
    limit.set_ylim(0, max(point.limit for point in points) + 1)
    limit.yaxis.set_major_locator(MaxNLocator(integer=True))
    limit.set_xlabel("seconds since the stream started (a line per micro-batch)")
    _killed(figure.axes, points, middles)
    figure.suptitle("asyncsink demo")
    figure.savefig(path, dpi=100)


def _events(axes: Any, points: Sequence[BatchPoint], starts: Sequence[float]) -> None:
    """Per batch, two bars side by side on a count axis: throttled requests, retried
    entries."""
    from matplotlib.ticker import MaxNLocator

    widths = [point.seconds / 2 for point in points]
    axes.bar(starts, [p.throttled for p in points], widths, align="edge",
             color="tab:red", label="throttled requests")  # fmt: skip
    axes.bar([start + width for start, width in zip(starts, widths, strict=True)],
             [p.retried for p in points], widths, align="edge", color="tab:orange",
             label="retried entries")  # fmt: skip
    axes.set_ylabel("count per batch")
    axes.set_ylim(bottom=0)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(loc="upper right")


def _killed(axes: Sequence[Any], points: Sequence[BatchPoint], middles: Sequence[float]) -> None:
    """A dashed line through every plot at each batch whose task was killed."""
    for x, point in zip(middles, points, strict=True):
        if point.killed:
            for index, each in enumerate(axes):
                each.axvline(x, color="black", ls="--", lw=1,
                             label="task killed" if index == 0 else None)  # fmt: skip
    axes[0].legend(loc="lower right")
