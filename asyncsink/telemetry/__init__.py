"""OpenTelemetry metrics: what every writer, micro-batch and job did.

asyncsink reports through the OpenTelemetry metrics API (``pip install
"asyncsink[otel]"``), which does nothing until the application configures an SDK: then
each writer records its requests as it runs (``asyncsink.report="live"``), and the Spark
driver records each committed micro-batch and job from the statistics its tasks brought
back (``asyncsink.report="committed"``). ``INSTRUMENTS`` lists every instrument; the
README's "Monitoring" section shows them with a Prometheus exporter and queries.

In processes Spark starts (executors, a data source's ``commit``), the standard
``OTEL_*`` environment variables configure the SDK (``configure_from_environment``).
"""

from .attributes import COMMITTED, LIVE, sink_attributes
from .committed import record_committed
from .environment import configure_from_environment
from .instruments import INSTRUMENTS, Instrument, Kind
from .live import LiveMetrics, NoMetrics, WriterMetrics, writer_metrics

__all__ = [
    "COMMITTED",
    "INSTRUMENTS",
    "LIVE",
    "Instrument",
    "Kind",
    "LiveMetrics",
    "NoMetrics",
    "WriterMetrics",
    "configure_from_environment",
    "record_committed",
    "sink_attributes",
    "writer_metrics",
]
