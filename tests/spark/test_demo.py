"""The demo job end to end on the shared Spark session: a task killed mid-partition, and
still every row delivered exactly once."""

from __future__ import annotations

import io
import multiprocessing
import re
from pathlib import Path
from typing import Any

import pytest

from asyncsink.demo import DemoSettings, run_demo

pytestmark = pytest.mark.spark


@pytest.mark.timeout(240)  # the first Spark test of a run also starts the shared session
def test_demo_recovers_a_killed_task_without_loss_or_duplicates(spark: Any, tmp_path: Path) -> None:
    out = io.StringIO()
    chart = tmp_path / "demo.png"
    settings = DemoSettings(rows=3000, progress=False, throttle_rate=0.05, error_rate=0.02,
                            partial_failure_rate=0.02, timeout_s=80, chart=chart)  # fmt: skip
    report = run_demo(settings, spark=spark, out=out)
    text = out.getvalue()
    assert report.exit_code == 0, text
    assert (report.lost, report.duplicates, report.unexpected) == (0, 0, 0)
    assert report.kill is not None and report.kill.partition == 0, text
    assert report.kill.acknowledged >= 1
    # the retry skipped what the killed attempt recorded as delivered and re-sent the
    # calls it left pending, with their idempotency keys
    assert report.writers.skipped + report.writers.resent_calls > 0, text
    # the call it was killed in had reached the endpoint: its re-send was answered from
    # the endpoint's idempotency store, not stored again
    assert report.writers.resent_calls >= 1, text
    assert re.search(r"\b[1-9][\d,]* repeated keys? answered", " ".join(text.split())), text
    assert report.writers.delivered + report.writers.skipped == 3000
    assert report.writers.retried > 0  # the injected faults were retried
    assert re.search(r"^  lost rows +0$", text, re.M), text
    assert re.search(r"^  duplicates +0 stored twice$", text, re.M), text
    assert text.rstrip().endswith("OK: every row was delivered, and none was stored twice.")
    assert f"chart: {chart}" in text and chart.read_bytes().startswith(b"\x89PNG"), text
    assert spark.streams.active == []  # the query was stopped
    assert not [p for p in multiprocessing.active_children() if p.name == "fault-server"]
