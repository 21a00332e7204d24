"""Spark entry points: ``foreachBatch``, ``foreachPartition`` and Python data sources."""

from .foreach import BatchSink, foreach_batch, foreach_partition
from .runner import PartitionResult, run_partition
from .spec import DurableOptions, SinkSpec

__all__ = [
    "BatchSink",
    "DurableOptions",
    "PartitionResult",
    "SinkSpec",
    "foreach_batch",
    "foreach_partition",
    "register_data_sources",
    "run_partition",
]


def register_data_sources(spark: object) -> None:
    """Register the ``asyncsink*`` data sources with a Spark session."""
    from .datasource import register

    register(spark)
