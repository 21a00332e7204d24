"""A PNG chart of the demo's run, one point per micro-batch: entries delivered per
second, request latency p50 and p99, the limit of requests in flight, and the batches
with throttles and retries marked. Drawn with matplotlib, which only the chart needs:
without it, the demo says so and goes on."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

    @classmethod
    def of(cls, stats: WriterStatistics, *, end_s: float, seconds: float) -> BatchPoint:
        return cls(end_s=end_s, seconds=seconds, delivered=stats.delivered,
                   p50_ms=stats.p50_ms, p99_ms=stats.p99_ms, limit=stats.in_flight_limit,
                   throttled=stats.throttled, retried=stats.retried)  # fmt: skip

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

    figure = Figure(figsize=(9, 8), layout="constrained")
    rate, latency, limit = figure.subplots(3, 1, sharex=True)
    starts = [point.end_s - point.seconds for point in points]
    ends = [point.end_s for point in points]
    middles = [(start + end) / 2 for start, end in zip(starts, ends, strict=True)]
    rate.hlines([point.rate for point in points], starts, ends, label="delivered", lw=2)
    rate.set_ylabel("entries / s")
    rate.set_ylim(bottom=0)
    _mark(rate, points, middles)
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
    figure.suptitle("asyncsink demo")
    figure.savefig(path, dpi=100)


def _mark(axes: object, points: Sequence[BatchPoint], middles: Sequence[float]) -> None:
    """Marks on the rate plot, mid-batch: a triangle per batch with throttles, a cross
    per batch with retries, sized by their count."""
    from matplotlib.axes import Axes

    assert isinstance(axes, Axes)
    throttled = [(x, p) for x, p in zip(middles, points, strict=True) if p.throttled]
    retried = [(x, p) for x, p in zip(middles, points, strict=True) if p.retried]
    axes.scatter([x for x, _ in throttled], [p.rate for _, p in throttled], marker="v",
                 s=[30 + 3 * p.throttled for _, p in throttled], color="tab:red",
                 label="throttled requests")  # fmt: skip
    axes.scatter([x for x, _ in retried], [p.rate for _, p in retried], marker="x",
                 s=[30 + p.retried // 5 for _, p in retried], color="tab:orange",
                 label="retried entries")  # fmt: skip
    axes.legend(loc="lower right")
