"""Reading asyncsink's metrics back in tests: an SDK with an in-memory reader, installed
as the process's meter provider for one test, and sums over its data points."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry.metrics import _internal as api_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.util._once import Once


def _reset_globals() -> None:
    """Forget the process's meter provider, as OpenTelemetry's own test utilities do
    (``set_meter_provider`` takes effect once per process)."""
    api_internal._METER_PROVIDER_SET_ONCE = Once()
    api_internal._METER_PROVIDER = None
    api_internal._PROXY_METER_PROVIDER = api_internal._ProxyMeterProvider()


@contextmanager
def in_memory_metrics() -> Iterator[InMemoryMetricReader]:
    """An SDK meter provider with an in-memory reader, for the duration of the block."""
    _reset_globals()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics_api.set_meter_provider(provider)
    try:
        yield reader
    finally:
        provider.shutdown()
        _reset_globals()


def data_points(reader: InMemoryMetricReader) -> list[tuple[str, dict[str, Any], Any]]:
    """Every data point the reader holds: (instrument name, attributes, point)."""
    found = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.append((metric.name, dict(point.attributes or {}), point))
    return found


Points = list[tuple[str, dict[str, Any], Any]]


def matching(points: Points, name: str, **attributes: str) -> list[Any]:
    return [
        point
        for found, attrs, point in points
        if found == name and all(attrs.get(key) == value for key, value in attributes.items())
    ]


def total(points: Points, name: str, **attributes: str) -> int:
    """The sum of a counter's (or up-down counter's) points with these attributes; for a
    histogram, its count of observations."""
    return sum(
        getattr(point, "count", None) if hasattr(point, "bucket_counts") else point.value
        for point in matching(points, name, **attributes)
    )
