"""OpenTelemetry metrics of a running writer: one observation per request, counters that
match the writer's statistics, levels that return to zero, and no work without an SDK."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink import SinkOptions, SubmitResult, ThrottledError
from asyncsink.telemetry import INSTRUMENTS, LIVE, NoMetrics, record_committed
from asyncsink.telemetry.environment import configure_from_environment
from tests.core.fakes import Destination, FakeWriter
from tests.metrics import data_points, total

ROOT = Path(__file__).resolve().parents[2]


def faulty_handler() -> Any:
    """Every 5th request throttled as a whole, every 3rd answer with its first entry
    to retry, the rest accepted."""
    calls = {"n": 0}

    def handle(entries: list[Any], call: Any) -> Any:
        calls["n"] += 1
        if calls["n"] % 5 == 0:
            raise ThrottledError("slow down")
        if calls["n"] % 3 == 0:
            return SubmitResult(retry=[0])
        return None

    return handle


async def deliver(writer: FakeWriter, n: int) -> None:
    async with writer:
        await writer.write_all(range(n))


def faulty_writer() -> FakeWriter:
    options = SinkOptions(max_batch_size=20, initial_backoff_ms=1, max_backoff_ms=2)
    return FakeWriter(Destination(faulty_handler()), options=options)


def test_live_metrics_match_the_writers_statistics(metric_reader: Any) -> None:
    writer = faulty_writer()
    anyio.run(deliver, writer, 1000)
    stats = writer.statistics()
    points = data_points(metric_reader)
    expected = {"asyncsink.sink.name": "FakeWriter", "asyncsink.report": LIVE}
    for name, field in (
        ("asyncsink.entries.written", "written"),
        ("asyncsink.entries.delivered", "delivered"),
        ("asyncsink.entries.retried", "retried"),
        ("asyncsink.requests.sent", "requests"),
        ("asyncsink.requests.failed", "requests_failed"),
        ("asyncsink.requests.throttled", "throttled"),
        ("asyncsink.bytes.sent", "bytes_sent"),
    ):
        assert total(points, name, **expected) == getattr(stats, field), name
    assert stats.delivered == 1000 and stats.retried > 0 and stats.throttled > 0
    assert total(points, "asyncsink.request.duration") == stats.requests
    assert total(points, "asyncsink.request.entries") == 0  # from committed statistics only
    throttled = total(points, "asyncsink.requests.failed", **{"error.type": "ThrottledError"})
    assert throttled == stats.requests_failed
    for level in ("asyncsink.requests.limit", "asyncsink.requests.active",
                  "asyncsink.entries.buffered"):  # fmt: skip
        assert total(points, level) == 0, f"{level} not back to 0 once the writer closed"
    for _, attributes, _ in points:
        assert attributes["asyncsink.destination.name"] == "FakeWriter"
        assert "asyncsink.sink.id" not in attributes  # no sinkId: no durable records


def test_the_duration_histogram_counts_seconds(metric_reader: Any) -> None:
    writer = FakeWriter(Destination(latency=0.02), options=SinkOptions(max_batch_size=10))
    anyio.run(deliver, writer, 30)
    (point,) = [p for name, _, p in data_points(metric_reader)
                if name == "asyncsink.request.duration"]  # fmt: skip
    assert point.count == 3
    assert 0.06 <= point.sum < 1.0


def test_a_running_writer_shows_its_levels(metric_reader: Any) -> None:
    gate = anyio.Event()

    async def held(entries: list[Any], call: Any) -> None:
        await gate.wait()

    async def run() -> None:
        options = SinkOptions(max_batch_size=10, adaptive_concurrency=False,
                              max_in_flight_requests=4)  # fmt: skip
        async with FakeWriter(Destination(held), options=options) as writer:
            await writer.write_all(range(45))
            points = data_points(metric_reader)
            assert total(points, "asyncsink.requests.active") == 4
            assert total(points, "asyncsink.requests.limit") == 4
            assert total(points, "asyncsink.entries.buffered") == 5
            gate.set()

    anyio.run(run)
    assert total(data_points(metric_reader), "asyncsink.requests.active") == 0


def test_committed_statistics_record_one_duration_per_request(metric_reader: Any) -> None:
    writer = faulty_writer()
    anyio.run(deliver, writer, 500)
    before = total(data_points(metric_reader), "asyncsink.request.duration")
    stats = writer.statistics()
    attributes = writer.metric_attributes()
    record_committed([(stats, attributes), (stats, attributes)])
    points = data_points(metric_reader)
    committed = {"asyncsink.report": "committed"}
    assert total(points, "asyncsink.entries.delivered", **committed) == 2 * stats.delivered
    assert total(points, "asyncsink.entries.retried", **committed) == 2 * stats.retried
    assert total(points, "asyncsink.requests.throttled", **committed) == 2 * stats.throttled
    assert total(points, "asyncsink.request.duration", **committed) == 2 * stats.requests
    assert total(points, "asyncsink.request.entries", **committed) == 2 * stats.requests
    (sizes,) = [p for name, _, p in points if name == "asyncsink.request.entries"]
    assert sizes.sum == 2 * sum(entries * n for entries, n in stats.request_entries.counts)
    assert sizes.max == 20  # maxBatchSize
    assert before == stats.requests  # the live ones, untouched


def test_every_instrument_is_on_the_monitoring_page() -> None:
    page = (ROOT / "docs" / "monitoring.md").read_text()
    for spec in INSTRUMENTS:
        assert f"`{spec.name}`" in page, spec.name


NO_SDK = """
import sys
import anyio
{setup}
from tests.core.fakes import Destination, FakeWriter
from asyncsink.telemetry import NoMetrics

async def main():
    writer = FakeWriter(Destination())
    async with writer:
        await writer.write_all(range(100))
        assert isinstance(writer._metrics, NoMetrics), writer._metrics
    return writer

writer = anyio.run(main)
assert writer.statistics().delivered == 100
sdk = sorted(name for name in sys.modules if name.startswith("opentelemetry.sdk"))
assert not sdk, sdk
print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
"""


@pytest.mark.parametrize(
    ("setup", "api_imported"),
    [("", False), ("import opentelemetry.metrics", True)],
    ids=["api-not-imported", "api-without-sdk"],
)
def test_without_an_sdk_nothing_is_recorded_nor_the_sdk_imported(
    setup: str, api_imported: bool
) -> None:
    code = textwrap.dedent(NO_SDK.format(setup=setup))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert ("opentelemetry.metrics" in done.stdout) is api_imported


def test_the_null_object_is_what_a_writer_starts_with() -> None:
    assert isinstance(FakeWriter(Destination())._metrics, NoMetrics)


ENVIRONMENT = """
from asyncsink.telemetry import configure_from_environment
from opentelemetry import metrics
assert configure_from_environment()
assert not configure_from_environment()  # once per process
print(type(metrics.get_meter_provider()).__module__)
"""


def test_spark_started_processes_configure_the_sdk_from_otel_variables() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OTEL_METRICS_EXPORTER": "console",
           "OTEL_METRIC_EXPORT_INTERVAL": "600000"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", ENVIRONMENT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("opentelemetry.sdk.metrics")


def test_without_otel_variables_no_sdk_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
    assert not configure_from_environment()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert not configure_from_environment()
