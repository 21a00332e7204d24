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

Under Spark Connect, ``foreachBatch`` runs on the server, where neither the batch's
session nor its tasks carry the query's id: ``StreamRuns`` then reads it from the query's
checkpoint (its ``metadata`` file, through Spark), which the user names; without that
name a ``sinkId`` fails loudly rather than guess a run.

**Dead letters.** A ``deadLetter`` directory's files are published at the same moment,
from the attempts Spark took (see ``letters``).

**Completion.** Only when Spark committed (every partition of a ``foreachBatch`` or
``foreach_partition`` returned, a data source's ``commit``) does the driver complete the
scopes the tasks reported: sealed with their summaries, or, for a fresh run, deleted
outright. Until then a replay is matched entry by entry. Retention then purges the call
records of a stream's batches older than ``retainBatches``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..durable.blocking import run_blocking
from ..durable.completion import ScopeSummary, complete_batch
from ..errors import SparkSetupError
from ..stats import WriterStatistics
from ..stores import Scope, open_store
from ..telemetry import configure_from_environment, record_committed
from .connect import is_connect
from .letters import discard_letters, publish_letters
from .runner import PartitionResult
from .spec import SinkSpec

__all__ = [
    "RunIdentity",
    "StreamRuns",
    "batch_identity",
    "checkpoint_query_id",
    "commit_run",
    "stream_identity",
    "task_stream_run",
]

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
    """The run of the micro-batch ``df`` inside ``foreachBatch`` in a classic session (on
    the driver): the query's persistent id, or ``None`` when the function is not called by
    a query, or under Spark Connect (whose sessions have no local properties)."""
    if is_connect(df):
        return None
    try:
        query_id = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID)
    except Exception:  # not a session of this process (a test double, a closed session)
        return None
    return RunIdentity(query_id, batch_id) if query_id else None


def checkpoint_query_id(session: Any, location: str) -> str:
    """The persistent id of the streaming query whose checkpoint is ``location``, read
    through ``session`` from the checkpoint's ``metadata`` file (Spark writes it when the
    query first starts, and keeps it across restarts).

    Raises:
        SparkSetupError: there is no such file, or it holds no id.
    """
    path = f"{location.rstrip('/')}/metadata"
    try:
        first = session.read.text(path).first()
        query_id = json.loads(first[0])["id"] if first is not None else None
    except Exception as exc:
        raise SparkSetupError(
            f"checkpoint_location {location!r}: its metadata file {path!r}, which holds the "
            f"query's id, cannot be read ({type(exc).__name__}: {_first_line(exc)}): pass "
            "the checkpointLocation of the query that runs this foreachBatch"
        ) from exc
    if not isinstance(query_id, str) or not query_id:
        raise SparkSetupError(
            f"checkpoint_location {location!r}: its metadata file {path!r} names no query "
            "id: pass the checkpointLocation of the query that runs this foreachBatch"
        )
    return query_id


class StreamRuns:
    """Names the run of each micro-batch a ``foreachBatch`` function is called with.

    In a classic session, the run is the query's persistent id, from the local property
    Spark sets; with ``checkpoint_location`` the id in that checkpoint must agree. Under
    Spark Connect the function runs on the server, where the id can only be read from the
    checkpoint, so ``checkpoint_location`` is needed (with a ``sinkId``). Called outside a
    streaming query in a classic session, the function is one run of its own, and a
    warning says so once.

    Args:
        spec: the sink's spec (a run matters only with its ``sinkId``).
        checkpoint_location: the query's ``checkpointLocation``, or ``None``.
    """

    def __init__(self, spec: SinkSpec, checkpoint_location: str | None = None) -> None:
        self.spec = spec
        self.checkpoint_location = checkpoint_location
        self._own_run = uuid.uuid4().hex
        self._warned_own_run = False
        self._verified: set[str] = set()  # query ids the checkpoint was found to hold
        self._checkpoint_run: str | None = None  # under Connect, read once per process

    def __getstate__(self) -> dict[str, Any]:
        # What was read or verified here is not carried to another process.
        state = dict(self.__dict__)
        state.update(_verified=set(), _checkpoint_run=None, _warned_own_run=False)
        return state

    def identity(self, df: Any, batch_id: int) -> RunIdentity:
        """The run of micro-batch ``batch_id`` (``df``), before anything is sent.

        Raises:
            SparkSetupError: under Spark Connect with a ``sinkId`` but no
                ``checkpoint_location``; or the checkpoint does not belong to the query.
        """
        sink_id = self.spec.durable.sink_id
        if sink_id is None:  # no call records: the run only names dead-letter files
            return stream_identity(df, batch_id) or RunIdentity(self._own_run, batch_id)
        if is_connect(df):
            return RunIdentity(self._remote_run(df, batch_id, sink_id), batch_id)
        identity = stream_identity(df, batch_id)
        if identity is None:
            return self._own(batch_id, sink_id)
        location = self.checkpoint_location
        if location is not None and identity.run not in self._verified:
            found = checkpoint_query_id(df.sparkSession, location)
            if found != identity.run:
                raise SparkSetupError(
                    f"sinkId {sink_id!r}: checkpoint_location {location!r} holds query "
                    f"{found}, but this batch belongs to query {identity.run}: pass the "
                    "checkpointLocation of the query that runs this foreachBatch"
                )
            self._verified.add(identity.run)
        return identity

    def _remote_run(self, df: Any, batch_id: int, sink_id: str) -> str:
        location = self.checkpoint_location
        if location is None:
            raise SparkSetupError(no_query_id_under_connect(self.spec))
        if self._checkpoint_run is None:
            session = df.sparkSession
            run = checkpoint_query_id(session, location)
            _check_batch_running(session, location, batch_id, sink_id)
            self._checkpoint_run = run
        return self._checkpoint_run

    def _own(self, batch_id: int, sink_id: str) -> RunIdentity:
        if not self._warned_own_run:
            self._warned_own_run = True
            log.warning(
                "sinkId %r: called outside a streaming query, so this foreachBatch "
                "function is one run of its own (run %s): call records of another "
                "function object or process never match it",
                sink_id,
                self._own_run,
            )
        return RunIdentity(self._own_run, batch_id)


def no_query_id_under_connect(spec: SinkSpec) -> str:
    """What to do when a ``foreachBatch`` with a ``sinkId`` cannot know its query's id."""
    source = f"asyncsink-{spec.sink}" if spec.entry is not None else "asyncsink"
    sink_id = spec.durable.sink_id
    return (
        f"sinkId {sink_id!r}: under Spark Connect, foreachBatch runs on the server, where "
        "the query's persistent id (from its checkpoint), which names the run of the call "
        "records, cannot be read from the batch. Pass the query's checkpoint: "
        "foreach_batch(..., checkpoint_location=<the writeStream's checkpointLocation>), "
        f"or write with the streaming data source instead: writeStream.format({source!r})"
        f".option('sinkId', {sink_id!r}), whose tasks read the query's id"
    )


def _check_batch_running(session: Any, location: str, batch_id: int, sink_id: str) -> None:
    """Refuse a checkpoint that is not running ``batch_id``: Spark logs a micro-batch's
    offsets before it runs it (``offsets/N``), and its commit only after the batch's
    function returned (``commits/N``). Another query's checkpoint, or a mistyped one, is
    so found out before anything is sent.

    Raises:
        SparkSetupError: ``offsets/N`` is missing, or ``commits/N`` exists.
    """
    root = location.rstrip("/")
    problem = None
    if not _exists(session, f"{root}/offsets/{batch_id}"):
        problem = f"has no offsets of batch {batch_id}"
    elif _exists(session, f"{root}/commits/{batch_id}"):
        problem = f"committed batch {batch_id} already"
    if problem is not None:
        raise SparkSetupError(
            f"sinkId {sink_id!r}: checkpoint_location {location!r} {problem}, so it is not "
            "the checkpoint of the query running this batch: pass the checkpointLocation "
            "of the query that runs this foreachBatch"
        )


def _exists(session: Any, path: str) -> bool:
    """Whether Spark finds ``path`` (through its file systems, as the query does)."""
    from pyspark.errors import AnalysisException

    try:
        session.read.text(path).schema  # noqa: B018 - resolving the path is the check
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return False
        raise
    return True


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


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
    """Spark committed the run's work: publish its dead letters, complete its scopes,
    apply retention, and say on the driver what was skipped. Returns the summed
    statistics.

    Raises:
        OSError: the dead letters cannot be published (see ``letters``).
        ReplayMismatchError: the batch was completed before in another number of
            partitions (a re-run of a named run over other input).
        DurableError: the record store cannot be written (the data is delivered; the
            scopes stay replayable call by call).
    """
    results = list(results)
    total = sum((result.statistics for result in results), WriterStatistics())
    configure_from_environment()  # under Spark Connect and in a data source's commit,
    # this process is Spark's: only the OTEL_* variables can configure it
    record_committed((result.statistics, result.attributes) for result in results)
    publish_letters(result.letters for result in results)
    sink_id = spec.durable.sink_id
    if sink_id is None:
        return total
    summaries = [result.summary for result in results if result.summary is not None]
    if summaries or identity.fresh or not stream:  # an empty batch write is recorded too
        run_blocking(_complete, spec, identity, summaries, completed_by, stream, len(results),
                     name="completing the run's scopes")  # fmt: skip
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
    """A write failed: stop its attempts that Spark has not stopped yet, whose next record
    write is then fenced before they send more. A fresh run's records are dropped (the
    next write is a new run); a named run's scopes are taken, bumping their epochs, and
    keep their records for the retry; a fresh run's staged dead letters are deleted.
    Best effort: a store that fails is logged, not raised."""
    if identity.fresh:
        discard_letters(spec, identity.run, identity.batch_id)
    sink_id = spec.durable.sink_id
    if sink_id is None:
        return
    try:
        run_blocking(_fence_run, spec.durable.store_url, sink_id, identity,
                     name="fencing a failed run")  # fmt: skip
    except Exception as exc:
        log.warning(
            "%s: a failed write's attempts could not be fenced, nor its records dropped if "
            "fresh (purge a fresh run with 'asyncsink records purge STORE_URL %s --run %s "
            "--all'): %s",
            identity.describe(sink_id),
            sink_id,
            identity.run or "-",
            exc,
        )


async def _fence_run(store_url: str, sink_id: str, identity: RunIdentity) -> None:
    async with open_store(store_url) as store:
        if identity.fresh:
            await store.purge(sink_id, run=identity.run)  # a purged scope fences its holder
            return
        for info in await store.scopes(sink_id):
            scope = info.scope
            if scope.run == identity.run and scope.batch_id == identity.batch_id:
                if not info.completed:
                    await store.take(scope)


async def _complete(
    spec: SinkSpec,
    identity: RunIdentity,
    summaries: list[ScopeSummary],
    completed_by: str,
    stream: bool,
    partitions: int,
) -> None:
    durable = spec.durable
    sink_id = durable.sink_id or ""
    async with open_store(durable.store_url) as store:
        if identity.fresh:
            # Nothing replays a fresh run once it committed: its records have done their job.
            await store.purge(sink_id, run=identity.run)
            return
        first = Scope(sink_id, identity.batch_id, 0, identity.run)
        await complete_batch(
            store, first, summaries, partitions=partitions, completed_by=completed_by
        )
        keep = durable.retain_batches
        if stream and keep and identity.batch_id - keep > 0:
            await store.purge(sink_id, run=identity.run, before_batch=identity.batch_id - keep)
