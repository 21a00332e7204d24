"""An SDK from the standard ``OTEL_*`` environment variables, in processes Spark starts.

An application configures OpenTelemetry in its own process. Spark's Python workers (the
executors' tasks, the process that runs a data source's ``commit``, and under Spark
Connect the one that runs ``foreachBatch``) are started by Spark, where nothing of the
application runs first. asyncsink calls ``configure_from_environment`` where it records
(the Spark runner, the driver's commit). With the SDK installed and
``OTEL_METRICS_EXPORTER`` set (``spark.executorEnv.OTEL_METRICS_EXPORTER`` on a
cluster), asyncsink sets up a meter provider as OpenTelemetry's own auto-configuration
would: one reader per exporter named (``otlp``, ``prometheus``, ``console``, or any
installed under the ``opentelemetry_metrics_exporter`` entry point group), exporting
every ``OTEL_METRIC_EXPORT_INTERVAL`` ms, with the resource of ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES``. A provider already set is left alone.

``otlp`` names an exporter by protocol as the SDK's own configuration does:
``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, selects
``otlp_proto_http`` for ``http/protobuf`` and ``otlp_proto_grpc`` for ``grpc`` (the
default, unset). An exporter of a protocol that is not installed is a warning naming
the package to install.
"""

from __future__ import annotations

import logging
import os
import threading
from importlib.metadata import entry_points
from typing import Any

__all__ = ["configure_from_environment"]

log = logging.getLogger("asyncsink")

_EXPORTERS = "opentelemetry_metrics_exporter"
_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
_OTLP_PACKAGES = {
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
}

_lock = threading.Lock()
_tried = False


def configure_from_environment() -> bool:
    """Set a meter provider from ``OTEL_METRICS_EXPORTER``, once per process; whether
    one was set. Does nothing when the variable is unset or ``none``, when a provider
    is set already, or when the SDK is not installed (logged)."""
    global _tried
    names = [name.strip() for name in os.environ.get("OTEL_METRICS_EXPORTER", "").split(",")]
    names = [name for name in names if name and name != "none"]
    with _lock:
        if _tried or not names:
            return False
        _tried = True
        return _configure(names)


def _configure(names: list[str]) -> bool:
    from opentelemetry import metrics

    if not type(metrics.get_meter_provider()).__module__.startswith("opentelemetry.metrics"):
        return False  # the application, or a sitecustomize, configured one
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        log.warning(
            "OTEL_METRICS_EXPORTER is set, but the OpenTelemetry SDK is not installed "
            "(pip install opentelemetry-sdk): no metrics are exported from this process"
        )
        return False
    readers = [reader for name in names if (reader := _reader(name)) is not None]
    if not readers:
        return False
    metrics.set_meter_provider(MeterProvider(metric_readers=readers, resource=Resource.create()))
    return True


def _reader(name: str) -> Any:
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    entry = _entry_point_name(name)
    if entry is None:
        return None
    found = entry_points(group=_EXPORTERS, name=entry)
    if not found:
        package = _OTLP_PACKAGES.get(entry)
        log.warning(
            "OTEL_METRICS_EXPORTER names %r, which no installed package provides%s: no "
            "metrics are exported through it from this process",
            name if name == entry else f"{name}, that is {entry}",
            f" (pip install {package})" if package else "",
        )
        return None
    exporter = next(iter(found)).load()
    if isinstance(exporter, type) and issubclass(exporter, MetricReader):
        return exporter()
    return PeriodicExportingMetricReader(exporter())


def _entry_point_name(name: str) -> str | None:
    """The exporter entry point ``name`` stands for: ``otlp`` by the OTLP protocol
    variables, as the SDK maps it; ``None`` (logged) for a protocol no exporter speaks."""
    if name != "otlp":
        return name
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    found = _OTLP_BY_PROTOCOL.get(protocol)
    if found is None:
        log.warning(
            "OTEL_METRICS_EXPORTER is otlp with the OTLP protocol %r, which is none of %s: "
            "no metrics are exported through it",
            protocol,
            ", ".join(_OTLP_BY_PROTOCOL),
        )
    return found
