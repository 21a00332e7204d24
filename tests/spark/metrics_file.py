"""A metric exporter for tests, for the processes Spark starts: each export writes the
process's cumulative data points to ``$ASYNCSINK_TEST_METRICS_DIR/<pid>.json``.

Spark's Python workers find it through the ``opentelemetry_metrics_exporter`` entry point
of a distribution the test writes (``exporter_distribution``) and puts on their path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

NAME = "asyncsink_test_file"


class FileExporter(MetricExporter):
    """Writes every export's data points, replacing the process's previous file."""

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        points = []
        for resource in metrics_data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "count", None)
                        if value is None or not hasattr(point, "bucket_counts"):
                            value = point.value
                        points.append([metric.name, dict(point.attributes or {}), value])
        folder = Path(os.environ["ASYNCSINK_TEST_METRICS_DIR"])
        path = folder / f"{os.getpid()}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(points))
        temporary.replace(path)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def exporter_distribution(folder: Path) -> Path:
    """A distribution's metadata in ``folder`` naming ``FileExporter`` as an exporter."""
    info = folder / "asyncsink_test_metrics-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: asyncsink-test-metrics\n"
                                   "Version: 0.0\n")  # fmt: skip
    (info / "entry_points.txt").write_text(
        f"[opentelemetry_metrics_exporter]\n{NAME} = tests.spark.metrics_file:FileExporter\n"
    )
    return folder


def read_points(folder: Path) -> list[tuple[str, dict[str, Any], Any]]:
    """The data points every process exported last, together."""
    found = []
    for path in folder.glob("*.json"):
        for name, attributes, value in json.loads(path.read_text()):
            found.append((name, attributes, _Value(value)))
    return found


class _Value:
    """A point as ``tests.metrics.total`` reads it."""

    def __init__(self, value: Any) -> None:
        self.value = value
