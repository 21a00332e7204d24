"""The driver's side of a durable write: which run it is, and what happens once Spark
committed it.

Once committed, each task's statistics are recorded as OpenTelemetry metrics (see
``asyncsink.telemetry``), when the process has an SDK configured, or the ``OTEL_*``
variables configure one.

**Run identity.** A scope is ``(sinkId, run, batch, partition)``. A streaming query's run
is its persistent id, stored in its checkpoint: the same across restarts of that
checkpoint (so a replayed micro-batch meets its records), new with a new checkpoint (so a
reprocessing run never looks delivered). A batch write with an explicit ``batchId`` is
the run named by that id (re-running it skips what it delivered); without one, each
write is a fresh run that nothing will replay once it committed.

**Completion.** Only when Spark committed (every partition of a ``foreachBatch`` or
``foreach_partition`` returned, a data source's ``commit``) does the driver complete the
scopes the tasks reported: sealed with their summaries, or, for a fresh run, deleted
outright. Until then a replay is matched entry by entry. Retention then purges the call
records of a stream's batches older than ``retainBatches``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from ..durable.completion import ScopeSummary, complete_scopes
from ..stats import WriterStatistics
from ..stores import open_store
from ..telemetry import configure_from_environment, record_committed
from .runner import PartitionResult
from .spec import SinkSpec

__all__ = ["RunIdentity", "batch_identity", "commit_run", "stream_identity", "task_stream_run"]

log = logging.getLogger("asyncsink.spark")

QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """Which run a write belongs to; ``fresh`` when nothing will replay it once committed."""

    run: str
    batch_id: int
    fresh: bool = False

    def describe(self, sink_id: str | None) -> str:
        if sink_id is None:
            return f"batch {self.batch_id}"
        run = f" (run {self.run})" if self.run else ""
        return f"batch {self.batch_id} of {sink_id}{run}"


def batch_identity(spec: SinkSpec) -> RunIdentity:
    """A batch write's run: the ``batchId`` option when set, else a fresh one."""
    batch_id = spec.durable.batch_id
    if batch_id is not None:
        return RunIdentity("", batch_id)
    return RunIdentity(uuid.uuid4().hex, 0, fresh=True)


def stream_identity(df: Any, batch_id: int) -> RunIdentity | None:
    """The run of the micro-batch ``df`` inside ``foreachBatch`` (on the driver): the
    query's persistent id, or ``None`` when the function is not called by a query."""
    try:
        query_id = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID)
    except Exception:  # not a classic session (Spark Connect): no local properties
        return None
    return RunIdentity(query_id, batch_id) if query_id else None


def task_stream_run() -> RunIdentity:
    """The run of the streaming write this task belongs to (on an executor).

    Raises:
        RuntimeError: the task does not belong to a streaming query.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID) if context is not None else None
    batch = context.getLocalProperty(BATCH_ID) if context is not None else None
    if not query_id or batch is None:
        raise RuntimeError(
            "a streaming write task without the query id and batch id Spark sets "
            f"({QUERY_ID!r}, {BATCH_ID!r}); the durable scope cannot be named"
        )
    return RunIdentity(query_id, int(batch))


def commit_run(
    spec: SinkSpec,
    identity: RunIdentity,
    results: Iterable[PartitionResult],
    *,
    completed_by: str,
    stream: bool = False,
) -> WriterStatistics:
    """Spark committed the run's work: complete its scopes, apply retention, and say on
    the driver what was skipped. Returns the summed statistics.

    Raises:
        DurableError: the record store cannot be written (the data is delivered; the
            scopes stay replayable call by call).
    """
    results = list(results)
    total = sum((result.statistics for result in results), WriterStatistics())
    configure_from_environment()  # under Spark Connect and in a data source's commit,
    # this process is Spark's: only the OTEL_* variables can configure it
    record_committed((result.statistics, result.attributes) for result in results)
    sink_id = spec.durable.sink_id
    if sink_id is None:
        return total
    summaries = [result.summary for result in results if result.summary is not None]
    if summaries or identity.fresh:
        anyio.run(_complete, spec, identity, summaries, completed_by, stream)
    if total.skipped:
        skipping = [
            result.summary.scope
            for result in results
            if result.summary is not None and result.statistics.skipped
        ]
        scopes = ", ".join(str(scope) for scope in skipping[:4])
        more = f" and {len(skipping) - 4} more" if len(skipping) > 4 else ""
        log.warning(
            "%s: %d of %d rows not sent, as an earlier attempt or run of the same scopes "
            "already delivered them (%d delivered now; scopes %s%s)",
            identity.describe(sink_id),
            total.skipped,
            total.written,
            total.delivered,
            scopes,
            more,
        )
    return total


def drop_failed_run(spec: SinkSpec, identity: RunIdentity) -> None:
    """A write failed: drop its call records if nothing can replay it (a fresh run: the
    next write is a new run). Best effort: a store that fails is logged, not raised."""
    sink_id = spec.durable.sink_id
    if sink_id is None or not identity.fresh:
        return
    try:
        anyio.run(_purge_run, spec.durable.store_url, sink_id, identity.run)
    except Exception as exc:
        log.warning(
            "%s: a failed write's call records could not be dropped (purge them with "
            "'asyncsink records purge STORE_URL %s --run %s --all'): %s",
            identity.describe(sink_id),
            sink_id,
            identity.run,
            exc,
        )


async def _purge_run(store_url: str, sink_id: str, run: str) -> None:
    async with open_store(store_url) as store:
        await store.purge(sink_id, run=run)


async def _complete(
    spec: SinkSpec,
    identity: RunIdentity,
    summaries: list[ScopeSummary],
    completed_by: str,
    stream: bool,
) -> None:
    durable = spec.durable
    sink_id = durable.sink_id or ""
    async with open_store(durable.store_url) as store:
        if identity.fresh:
            # Nothing replays a fresh run once it committed: its records have done their job.
            await store.purge(sink_id, run=identity.run)
            return
        await complete_scopes(store, summaries, completed_by=completed_by, whole_batches=True)
        keep = durable.retain_batches
        if stream and keep and identity.batch_id - keep > 0:
            await store.purge(sink_id, run=identity.run, before_batch=identity.batch_id - keep)
