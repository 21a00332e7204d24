"""``foreachBatch`` and ``foreachPartition`` entry points.

::

    query = (df.writeStream
               .foreachBatch(foreach_batch("http", {"url": url}, sink_id="orders"))
               .option("checkpointLocation", checkpoint)
               .start())

    foreach_partition(df, "http", {"url": url}, sink_id="backfill", batch_id=20261121)

Both run every partition through a writer (see ``runner``), reading its rows through
Arrow (see ``arrow``), and bring each partition's result back
to the driver. Once every partition returned, which is when Spark committed the work,
the driver completes the durable scopes (see ``commit``), sums the statistics, logs them
in one line and hands them to an optional ``on_batch(batch_id, stats)`` callback.

Under Spark Connect the same code runs: ``foreach_partition`` on the client, the
``foreachBatch`` function in a Python process on the server, where the query's id is read
from its checkpoint (``checkpoint_location``; see ``commit.StreamRuns``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ..errors import OptionError, SparkSetupError
from ..stats import WriterStatistics, batches_html, batches_text
from .arrow import check_columns, map_partitions_in_arrow
from .commit import (
    RunIdentity,
    StreamRuns,
    batch_identity,
    commit_run,
    drop_failed_run,
    no_query_id_under_connect,
)
from .connect import is_connect, remote_only
from .jobs import cancelled_on_interrupt
from .preflight import check_workers
from .runner import PartitionResult, run_chunks
from .spec import SinkSpec, cores_of

__all__ = ["BatchSink", "foreach_batch", "foreach_partition"]

log = logging.getLogger("asyncsink.spark")

OnBatch = Callable[[int, WriterStatistics], Any]

KEEP_STATISTICS = 100  # batches whose statistics a BatchSink keeps, by default


def _spec(sink: str, options: Mapping[str, Any] | None, sink_id: str | None) -> SinkSpec:
    merged = dict(options or {})
    if sink_id is not None:
        _set_keyword(merged, "sinkId", sink_id, "sink_id")
    return SinkSpec(sink, merged).for_spark()


def _set_keyword(options: dict[str, Any], name: str, value: str, keyword: str) -> None:
    """Set option ``name`` from a keyword argument, unless the options give it already
    (in any case) with another value.

    Raises:
        OptionError: they do.
    """
    for key in [key for key in options if key.lower() == name.lower()]:
        if str(options[key]) != value:
            raise OptionError(
                name,
                None,
                "",
                message=f"option {name!r} is given twice, as {key!r} ({options[key]!r}) in "
                f"the options and as {keyword}={value!r}: give it once",
            )
        del options[key]
    options[name] = value


def _chunks_task(spec: SinkSpec, identity: RunIdentity, chunks: Any) -> PartitionResult:
    return run_chunks(spec, chunks, identity.run, identity.batch_id)


def _write(df: Any, spec: SinkSpec, identity: RunIdentity) -> list[PartitionResult]:
    """Run every partition of ``df`` through the sink. Its Spark jobs carry a tag of their
    own, so that an interrupt (a notebook's) cancels them (see ``jobs``)."""
    check_workers(df)
    spec.check_master(df)
    if spec.rate_capped:
        # The cluster's cores: the most tasks that can run at once. The partitions are not
        # counted, since that takes df.rdd, which the Arrow path never touches.
        spec = spec.with_rate_shares(cores_of(df))
    check_columns(df.schema)
    chunks_task = partial(_chunks_task, spec, identity)
    what = identity.describe(spec.durable.sink_id)
    with cancelled_on_interrupt(df.sparkSession, connect=is_connect(df), what=what):
        results: list[PartitionResult] = map_partitions_in_arrow(
            df,
            chunks_task,
            as_dicts=spec.reads_mappings,
            chunked=True,
            json_contract=spec.json_contract,
            plain_columns=spec.key_fields,
        )
    return results


class BatchSink:
    """The function ``foreachBatch`` calls: ``(df, batch_id) -> None``.

    ``totals`` sums the statistics of every batch this object ran, and ``batches_run``
    counts them. ``statistics`` maps the ids of the last ``keep_statistics`` batches to
    their summed statistics, of the latest time each ran (a batch Spark runs again, or a
    batch of the same id of another query this object serves, replaces the earlier
    figures; ``on_batch`` sees each). Older batches leave ``statistics``, so a stream
    that runs for weeks holds a bounded amount of driver memory. Displayed in a notebook,
    the object shows both as a table.

    Under Spark Connect the function runs in a Python process on the server: ``on_batch``
    and the log line run there, and the client's object keeps no statistics.

    The durable run is the query's persistent id, from its checkpoint (see
    ``StreamRuns``); called outside a streaming query in a classic session, a
    ``BatchSink`` is one run of its own.
    """

    def __init__(
        self,
        spec: SinkSpec,
        on_batch: OnBatch | None = None,
        *,
        checkpoint_location: str | None = None,
        keep_statistics: int = KEEP_STATISTICS,
    ) -> None:
        if keep_statistics < 0:
            raise ValueError(f"keep_statistics must be 0 or more, not {keep_statistics!r}")
        self.spec = spec
        self.on_batch = on_batch
        self.keep_statistics = keep_statistics
        self.statistics: dict[int, WriterStatistics] = {}
        self.totals = WriterStatistics()
        self.batches_run = 0
        self.runs = StreamRuns(spec, checkpoint_location)

    def __call__(self, df: Any, batch_id: int) -> None:
        identity = self.runs.identity(df, batch_id)
        try:
            results = _write(df, self.spec, identity)
        except BaseException:
            drop_failed_run(self.spec, identity)  # fences the batch's attempts still running
            raise
        stats = commit_run(self.spec, identity, results, completed_by="foreachBatch", stream=True)
        self._keep(batch_id, stats)
        log.info("%s: %s", identity.describe(self.spec.durable.sink_id), stats.summary())
        if self.on_batch is not None:
            self.on_batch(batch_id, stats)

    def _keep(self, batch_id: int, stats: WriterStatistics) -> None:
        self.totals += stats
        self.batches_run += 1
        self.statistics.pop(batch_id, None)  # a batch run again moves to the end
        self.statistics[batch_id] = stats
        while len(self.statistics) > self.keep_statistics:
            del self.statistics[next(iter(self.statistics))]

    def __repr__(self) -> str:
        return f"BatchSink({self.spec!r})"

    def _repr_html_(self) -> str:
        return batches_html(self.totals, self.batches_run, self.statistics)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(batches_text(self.totals, self.batches_run, self.statistics))


def foreach_batch(
    sink: str,
    options: Mapping[str, Any] | None = None,
    *,
    sink_id: str | None = None,
    checkpoint_location: str | None = None,
    on_batch: OnBatch | None = None,
    keep_statistics: int = KEEP_STATISTICS,
) -> BatchSink:
    """A ``foreachBatch`` function delivering each micro-batch through ``sink``.

    With ``sink_id`` (stable across restarts of the query), call records make a retried
    task or a replayed micro-batch skip what already reached the destination. A query
    restarted on a new checkpoint is a new run: it delivers everything again.

    ``checkpoint_location`` is the query's ``checkpointLocation``. Under Spark Connect a
    ``sink_id`` needs it: the query's id, which names the run, is read from there. In a
    classic session it is optional, and checked against the query.

    ``keep_statistics`` is how many of the latest batches keep their own statistics in
    ``.statistics``; ``.totals`` sums them all.

    Raises:
        OptionError: an option is unknown or invalid (raised here, on the driver).
        SparkSetupError: this process runs Spark Connect sessions only and ``sink_id`` is
            set without ``checkpoint_location`` (the message says what to use instead).
    """
    spec = _spec(sink, options, sink_id).for_stream()
    if sink_id is not None and checkpoint_location is None and remote_only():
        raise SparkSetupError(no_query_id_under_connect(spec))
    return BatchSink(
        spec, on_batch, checkpoint_location=checkpoint_location, keep_statistics=keep_statistics
    )


def foreach_partition(
    df: Any,
    sink: str,
    options: Mapping[str, Any] | None = None,
    *,
    sink_id: str | None = None,
    batch_id: int | None = None,
) -> WriterStatistics:
    """Deliver a batch DataFrame through ``sink``; return the summed statistics.

    With ``sink_id``, each call is a fresh run (task retries inside it skip what earlier
    attempts delivered); ``batch_id`` names the run instead, so that running the same
    ``(sink_id, batch_id)`` again skips what the earlier run delivered, and fails loudly
    if its input changed.

    Raises:
        OptionError: an option is unknown or invalid (before any task starts).
        Exception: a task failed for good: Spark raises its own exception (a
            ``pyspark.errors.PythonException``), whose text ends with the task's error,
            such as ``ReplayMismatchError`` when ``batch_id`` names a completed run whose
            input differs, or ``DeliveryError``.
    """
    merged = dict(options or {})
    if batch_id is not None:
        _set_keyword(merged, "batchId", str(batch_id), "batch_id")
    spec = _spec(sink, merged, sink_id)
    identity = batch_identity(spec)
    try:
        results = _write(df, spec, identity)
    except BaseException:
        drop_failed_run(spec, identity)
        raise
    stats = commit_run(spec, identity, results, completed_by="foreach_partition")
    log.info("job %s: %s", identity.describe(spec.durable.sink_id), stats.summary())
    return stats
