"""The demo's chart: a PNG of a run's micro-batches, and a word instead when it cannot be
drawn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from asyncsink import LatencyHistogram, WriterStatistics
from asyncsink.demo.chart import BatchPoint, write_chart
from asyncsink.stats import new_latency_counts


def batch(delivered: int, throttled: int, retried: int) -> WriterStatistics:
    counts = new_latency_counts()
    counts[LatencyHistogram.bucket(5.0)] += 9
    counts[LatencyHistogram.bucket(40.0)] += 1
    return WriterStatistics(delivered=delivered, throttled=throttled, retried=retried,
                            in_flight_limit=8, latency=LatencyHistogram.of(counts))  # fmt: skip


def points() -> list[BatchPoint]:
    return [
        BatchPoint.of(batch(1000, t, r), end_s=2.0 * (i + 1), seconds=2.0, killed=i == 1)
        for i, (t, r) in enumerate([(0, 0), (3, 40), (0, 5)])
    ]


def test_a_run_is_drawn_as_a_png(tmp_path: Path) -> None:
    path = tmp_path / "run.png"
    assert write_chart(points(), path) == f"chart: {path}"
    assert path.read_bytes().startswith(b"\x89PNG")
    assert points()[0].rate == 500.0 and points()[0].p99_ms is not None


def test_counts_have_an_axis_of_their_own_and_the_killed_task_is_marked(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
        write_chart(points(), tmp_path / "run.png")
    (figure,) = saved
    rate, events, _, _ = figure.axes
    assert events.get_ylabel() == "count per batch"
    heights = sorted(round(bar.get_height()) for bar in events.patches)
    assert heights == [0, 0, 0, 3, 5, 40]  # throttled 0, 3, 0 and retried 0, 40, 5
    assert rate.get_ylim()[1] < 2000  # the counts no longer sit on the rate's scale
    killed = [line for line in rate.get_lines() if line.get_label() == "task killed"]
    assert len(killed) == 1 and killed[0].get_xdata()[0] == 3.0  # batch 2, mid-way
    assert all(any(ln.get_linestyle() == "--" for ln in ax.get_lines()) for ax in figure.axes)


def test_without_matplotlib_the_demo_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    message = write_chart(points(), tmp_path / "run.png")
    assert "pip install matplotlib" in message
    assert not (tmp_path / "run.png").exists()


def test_neither_the_runtime_path_nor_the_demo_imports_matplotlib_until_it_draws() -> None:
    code = ("import sys, asyncsink, asyncsink.spark, asyncsink.demo, asyncsink.demo.chart; "
            "assert 'matplotlib' not in sys.modules")  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
