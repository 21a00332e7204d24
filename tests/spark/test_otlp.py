"""``OTEL_METRICS_EXPORTER=otlp`` follows the OTLP protocol variables as the SDK does:
with ``http/protobuf`` the HTTP exporter sends a Spark job's live and committed figures to
a local OTLP/HTTP collector."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from asyncsink.spark import register_data_sources
from asyncsink.telemetry import environment
from asyncsink.testing import Faults, FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, "otlp_proto_grpc"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "otlp_proto_http"),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": " http/protobuf ",
            },
            "otlp_proto_http",
        ),  # fmt: skip
        ({"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}, None),
    ],
)
def test_otlp_is_mapped_by_protocol_as_the_sdk_maps_it(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], expected: str | None
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert environment._entry_point_name("otlp") == expected
    assert environment._entry_point_name("prometheus") == "prometheus"


class _Collector(BaseHTTPRequestHandler):
    server: Any

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )

        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        points = []
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.sum.data_points:
                        attributes = {a.key: a.value.string_value for a in point.attributes}
                        points.append((metric.name, attributes, point.as_int))
        with self.server.lock:
            self.server.posts.append((self.path, points))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.posts, server.lock = [], threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def delivered(collector: Any, report: str) -> int:
    """The latest cumulative ``delivered`` of each reporting process, summed."""
    with collector.lock:
        posts = list(collector.posts)
    found = 0
    for path, points in posts:
        assert path == "/v1/metrics"
        for name, attributes, value in points:
            if (
                name == "asyncsink.entries.delivered"
                and attributes.get("asyncsink.report") == report
            ):
                found = max(found, value)
    return found


def test_http_protobuf_exports_live_and_committed_figures(spark: Any, collector: Any) -> None:
    environment_of = spark.sparkContext.environment
    saved = dict(environment_of)
    environment_of.update({
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":
            f"http://127.0.0.1:{collector.server_port}/v1/metrics",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "PYTHONPATH": str(ROOT),
    })  # fmt: skip
    register_data_sources(spark)  # a data source runs with the variables of its registration
    try:
        with FaultServer(Faults()) as server:
            (
                spark.range(0, 2000, 1, 2)
                .selectExpr("id")
                .write.format("asyncsink-http")
                .options(url=server.ingest_url, maxBatchSize="100")
                .mode("append")
                .save()
            )
        deadline = time.monotonic() + 30
        while delivered(collector, "committed") < 2000 or delivered(collector, "live") < 1000:
            assert time.monotonic() < deadline, collector.posts[-3:]
            time.sleep(0.2)
        assert delivered(collector, "committed") == 2000
    finally:
        environment_of.clear()
        environment_of.update(saved)
        register_data_sources(spark)
