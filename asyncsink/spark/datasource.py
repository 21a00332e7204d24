"""Spark Python data sources: ``df.write.format("asyncsink-http")`` and ``writeStream``.

::

    register_data_sources(spark)
    df.write.format("asyncsink-http").option("url", url).mode("append").save()
    (df.writeStream.format("asyncsink-http").option("url", url).option("sinkId", "orders")
       .option("checkpointLocation", checkpoint).start())

Names: ``asyncsink-<name>`` for every registered sink (``asyncsink-http``,
``asyncsink-kinesis``, ``asyncsink-elasticsearch``, and those added with
``register_sink``), and ``asyncsink`` (the generic one: option ``writer`` =
``module:Class``). Options are the same as for ``foreach_batch``. Each task's ``write``
returns its statistics and its
durable scope's summary in a commit message; the driver's ``commit`` completes those
scopes (Spark committed them; see ``commit``), records them as OpenTelemetry metrics,
sums the statistics into one log line and,
for a stream, purges call records of batches older than ``retainBatches``; ``abort``
leaves the records for the retry. These methods run in Python worker processes that
Spark starts, so everything they need travels in the options, in the writer object Spark
pickles for its tasks, and in the commit messages.

The run of a batch write is the ``batchId`` option, or a fresh id drawn when Spark asks
for the writer (its tasks, retries included, share it); a stream's run is its query's
persistent id, which each task reads from Spark's local properties.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..durable.completion import ScopeSummary
from ..plugins.sinks import SinkEntry, sink_entry, sink_names
from ..policies.dead_letter_files import StagedLetters
from ..stats import WriterStatistics
from .arrow import batch_chunks, check_columns
from .commit import (
    RunIdentity,
    batch_identity,
    commit_run,
    drop_failed_run,
    task_stream_run,
)
from .letters import discard_letters
from .preflight import check_workers
from .runner import PartitionResult, run_chunks
from .spec import SinkSpec, cores_of, master_of

__all__ = [
    "AsyncSinkCommitMessage",
    "AsyncSinkDataSource",
    "data_source_for",
    "register",
]

log = logging.getLogger("asyncsink.spark")

# Options Spark itself reads and still passes to the data source.
_SPARK_OWN = frozenset({"checkpointlocation", "path", "queryname"})


@dataclass
class AsyncSinkCommitMessage(WriterCommitMessage):
    """One task's statistics, scope summary and metric attributes, sent to the driver's
    ``commit``."""

    statistics: WriterStatistics
    summary: ScopeSummary | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    letters: StagedLetters | None = None

    @classmethod
    def of(cls, result: PartitionResult) -> AsyncSinkCommitMessage:
        return cls(result.statistics, result.summary, result.attributes, result.letters)


def _results(messages: list[Any]) -> list[PartitionResult]:
    return [
        PartitionResult(message.statistics, message.summary, message.attributes, message.letters)
        for message in messages
        if isinstance(message, AsyncSinkCommitMessage)
    ]


def _sum(messages: list[Any]) -> tuple[WriterStatistics, int]:
    results = _results(messages)
    total = sum((result.statistics for result in results), WriterStatistics())
    return total, len(messages) - len(results)


class _Tasks:
    """What a write task does with its partition: the Arrow record batches Spark's
    Arrow writers hand it, as rows of ``schema`` (see ``batch_chunks``)."""

    spec: SinkSpec
    schema: Any

    def _deliver(self, iterator: Iterator[Any], identity: RunIdentity) -> AsyncSinkCommitMessage:
        chunks = batch_chunks(iterator, self.schema, as_dicts=self.spec.reads_mappings)
        result = run_chunks(self.spec, chunks, identity.run, identity.batch_id)
        return AsyncSinkCommitMessage.of(result)


class _BatchWriter(_Tasks, DataSourceArrowWriter):
    def __init__(self, spec: SinkSpec, schema: Any) -> None:
        self.spec = spec
        self.schema = schema
        self.identity = batch_identity(spec)  # pickled with the writer: one run per write

    def write(self, iterator: Iterator[Any]) -> AsyncSinkCommitMessage:
        return self._deliver(iterator, self.identity)

    def commit(self, messages: list[Any]) -> None:
        results = _results(messages)
        total = commit_run(self.spec, self.identity, results, completed_by="data source commit")
        log.info("write of %s committed: %s", self.spec.sink, total.summary())

    def abort(self, messages: list[Any]) -> None:
        total, failed = _sum(messages)
        if self.spec.durable.sink_id is None:
            kept = ""
            discard_letters(self.spec, self.identity.run, self.identity.batch_id)
        elif self.identity.fresh:
            kept = "; its call records are dropped (without batchId, nothing replays it)"
            drop_failed_run(self.spec, self.identity)
        else:
            kept = "; its call records are kept for a write of the same batchId"
        log.warning(
            "write of %s aborted (%d tasks failed)%s: %s",
            self.spec.sink,
            failed,
            kept,
            total.summary(),
        )


class _StreamWriter(_Tasks, DataSourceStreamArrowWriter):
    def __init__(self, spec: SinkSpec, schema: Any) -> None:
        self.spec = spec
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> AsyncSinkCommitMessage:
        return self._deliver(iterator, task_stream_run())

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        results = _results(messages)
        runs = {result.summary.scope.run for result in results if result.summary is not None}
        if len(runs) > 1:
            raise RuntimeError(f"batch {batchId} of {self.spec.sink}: tasks of runs {runs}")
        identity = RunIdentity(runs.pop() if runs else "", batchId)
        total = commit_run(
            self.spec, identity, results, completed_by="data source commit", stream=True
        )
        log.info("batch %d of %s committed: %s", batchId, self.spec.sink, total.summary())

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        total, failed = _sum(messages)
        log.warning(
            "batch %d of %s aborted (%d tasks failed); call records are kept: %s",
            batchId,
            self.spec.sink,
            failed,
            total.summary(),
        )


class AsyncSinkDataSource(DataSource):
    """The generic data source ``asyncsink`` (option ``writer`` names an
    ``AsyncSinkWriter`` subclass or a factory, as ``module:attribute``) and, through
    ``data_source_for``, the base of ``asyncsink-<name>`` for each registered sink."""

    sink_entry: SinkEntry | None = None
    master: str | None = None  # the Spark master the class was registered with
    cores: int | None = None  # the tasks its cluster runs at once, when known

    @classmethod
    def name(cls) -> str:
        return "asyncsink" if cls.sink_entry is None else f"asyncsink-{cls.sink_entry.name}"

    def _spec(self) -> SinkSpec:
        options = {k: v for k, v in self.options.items() if k.lower() not in _SPARK_OWN}
        entry = self.sink_entry
        if entry is not None:
            spec = SinkSpec(entry.name, options, entry=entry).for_spark()
        else:
            sink = options.get("writer")
            if not sink:
                raise ValueError(
                    "the asyncsink data source needs option 'writer' (module:Class or "
                    "module:function)"
                )
            spec = SinkSpec(sink, options).for_spark()
        spec.check_master(self.master)
        # A data source does not see the partitions it writes: the caps are split among
        # the cluster's cores, the most tasks that can run at once.
        return spec.with_rate_shares(self.cores)

    def writer(self, schema: Any, overwrite: bool) -> _BatchWriter:
        if overwrite:
            raise ValueError(
                f"{self.name()} appends what it is given: mode('overwrite') cannot replace "
                "what the destination holds; write with mode('append')"
            )
        check_columns(schema)
        return _BatchWriter(self._spec(), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> _StreamWriter:  # noqa: N802
        check_columns(schema)
        return _StreamWriter(self._spec().for_stream(), schema)


def data_source_for(entry: SinkEntry) -> type[AsyncSinkDataSource]:
    """The data source class ``asyncsink-<name>`` of a registered sink. It carries the
    sink's entry, so Spark's Python workers need no registration of their own."""
    title = "".join(part.capitalize() for part in re.split(r"[-_]", entry.name))
    attributes = {"sink_entry": entry, "__module__": __name__, "__doc__": f"{entry.name} sink"}
    return type(f"{title}DataSource", (AsyncSinkDataSource,), attributes)


def register(spark: Any) -> None:
    """Register ``asyncsink`` and ``asyncsink-<name>`` for every registered sink.

    The classes registered carry the session's Spark master, so that a write with a
    per-machine record store on a cluster is refused before any task (``check_master``),
    and its cores, among which a write splits its rate caps.
    """
    check_workers(spark)
    master, cores = master_of(spark), cores_of(spark)
    spark.dataSource.register(_on_master(AsyncSinkDataSource, master, cores))
    for name in sink_names():
        spark.dataSource.register(_on_master(data_source_for(sink_entry(name)), master, cores))


def _on_master(
    cls: type[AsyncSinkDataSource], master: str | None, cores: int | None = None
) -> type[AsyncSinkDataSource]:
    attributes = {"master": master, "cores": cores, "__module__": cls.__module__,
                  "__doc__": cls.__doc__}  # fmt: skip
    return type(cls.__name__, (cls,), attributes)
