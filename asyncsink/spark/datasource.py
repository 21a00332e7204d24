"""Spark Python data sources: ``df.write.format("asyncsink-http")`` and ``writeStream``.

::

    register_data_sources(spark)
    df.write.format("asyncsink-http").option("url", url).mode("append").save()
    (df.writeStream.format("asyncsink-http").option("url", url).option("sinkId", "orders")
       .option("checkpointLocation", checkpoint).start())

Names: ``asyncsink-http``, ``asyncsink-kinesis``, ``asyncsink-elasticsearch``, and
``asyncsink`` (the generic one: option ``writer`` = ``module:Class``). Options are the
same as for ``foreach_batch``. Each task's ``write`` returns its statistics in a commit
message; the driver's ``commit`` sums them into one log line and, for a stream, purges
call records of batches older than ``retainBatches``; ``abort`` leaves the records for
the retry. These methods run in Python worker processes that Spark starts, so everything
they need travels in the options and the commit messages.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from ..stats import WriterStatistics
from .foreach import BatchSink
from .runner import run_partition
from .spec import SinkSpec

__all__ = [
    "AsyncSinkCommitMessage",
    "AsyncSinkDataSource",
    "ElasticsearchDataSource",
    "HttpDataSource",
    "KinesisDataSource",
    "register",
]

log = logging.getLogger("asyncsink.spark")

# Options Spark itself reads and still passes to the data source.
_SPARK_OWN = frozenset({"checkpointlocation", "path", "queryname"})


@dataclass
class AsyncSinkCommitMessage(WriterCommitMessage):
    """One task's statistics, sent to the driver's ``commit``."""

    statistics: WriterStatistics


def _sum(messages: list[Any]) -> tuple[WriterStatistics, int]:
    total = WriterStatistics()
    failed = 0
    for message in messages:
        if isinstance(message, AsyncSinkCommitMessage):
            total += message.statistics
        else:
            failed += 1
    return total, failed


class _BatchWriter(DataSourceWriter):
    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[Any]) -> AsyncSinkCommitMessage:
        return AsyncSinkCommitMessage(run_partition(self.spec, iterator))

    def commit(self, messages: list[Any]) -> None:
        total, _ = _sum(messages)
        log.info("write of %s committed: %s", self.spec.sink, total.summary())

    def abort(self, messages: list[Any]) -> None:
        total, failed = _sum(messages)
        log.warning(
            "write of %s aborted (%d tasks failed); call records are kept for the retry: %s",
            self.spec.sink,
            failed,
            total.summary(),
        )


class _StreamWriter(DataSourceStreamWriter):
    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[Any]) -> AsyncSinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        batch_id = int(batch) if batch is not None else None
        return AsyncSinkCommitMessage(run_partition(self.spec, iterator, batch_id))

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        total, _ = _sum(messages)
        log.info("batch %d of %s committed: %s", batchId, self.spec.sink, total.summary())
        BatchSink(self.spec)._purge_old(batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        total, failed = _sum(messages)
        log.warning(
            "batch %d of %s aborted (%d tasks failed); call records are kept: %s",
            batchId,
            self.spec.sink,
            failed,
            total.summary(),
        )


class AsyncSinkDataSource(DataSource):
    """The generic data source: option ``writer`` names an ``AsyncSinkWriter`` subclass."""

    shim: str | None = None

    @classmethod
    def name(cls) -> str:
        return "asyncsink"

    def _spec(self) -> SinkSpec:
        options = {k: v for k, v in self.options.items() if k.lower() not in _SPARK_OWN}
        sink = self.shim or options.get("writer")
        if not sink:
            raise ValueError("the asyncsink data source needs option 'writer' (module:Class)")
        return SinkSpec(sink, options)

    def writer(self, schema: Any, overwrite: bool) -> _BatchWriter:
        return _BatchWriter(self._spec())

    def streamWriter(self, schema: Any, overwrite: bool) -> _StreamWriter:  # noqa: N802
        return _StreamWriter(self._spec())


class HttpDataSource(AsyncSinkDataSource):
    shim = "http"

    @classmethod
    def name(cls) -> str:
        return "asyncsink-http"


class KinesisDataSource(AsyncSinkDataSource):
    shim = "kinesis"

    @classmethod
    def name(cls) -> str:
        return "asyncsink-kinesis"


class ElasticsearchDataSource(AsyncSinkDataSource):
    shim = "elasticsearch"

    @classmethod
    def name(cls) -> str:
        return "asyncsink-elasticsearch"


def register(spark: Any) -> None:
    for source in (AsyncSinkDataSource, HttpDataSource, KinesisDataSource, ElasticsearchDataSource):
        spark.dataSource.register(source)
