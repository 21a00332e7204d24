"""``foreachBatch`` and ``foreachPartition`` entry points.

::

    query = (df.writeStream
               .foreachBatch(foreach_batch("http", {"url": url}, sink_id="orders"))
               .option("checkpointLocation", checkpoint)
               .start())

    foreach_partition(df, "http", {"url": url}, sink_id="backfill", batch_id=20261121)

Both run every partition through a writer (see ``runner``), reading its rows through
Arrow when the columns allow it (see ``arrow``), and bring each partition's statistics
back to the driver, where they are summed, logged in one line, and handed to
an optional ``on_batch(batch_id, stats)`` callback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ..stats import WriterStatistics
from ..stores import open_store
from .arrow import arrow_readable, map_partitions_in_arrow
from .runner import run_partition
from .spec import SinkSpec

__all__ = ["BatchSink", "foreach_batch", "foreach_partition"]

log = logging.getLogger("asyncsink.spark")

OnBatch = Callable[[int, WriterStatistics], Any]


def _spec(sink: str, options: Mapping[str, Any] | None, sink_id: str | None) -> SinkSpec:
    merged = dict(options or {})
    if sink_id is not None:
        merged["sinkId"] = sink_id
    return SinkSpec(sink, merged)


def _partition_task(spec: SinkSpec, batch_id: int | None, rows: Any) -> WriterStatistics:
    return run_partition(spec, rows, batch_id)


def _write(df: Any, spec: SinkSpec, batch_id: int | None) -> WriterStatistics:
    task = partial(_partition_task, spec, batch_id)
    if arrow_readable(df.schema):
        per_partition = map_partitions_in_arrow(df, task, as_dicts=spec.reads_mappings)
    else:
        per_partition = df.rdd.mapPartitions(lambda rows: [task(rows)]).collect()
    return sum(per_partition, WriterStatistics())


class BatchSink:
    """The function ``foreachBatch`` calls: ``(df, batch_id) -> None``.

    ``statistics`` maps each batch id this driver ran to its summed statistics.
    """

    def __init__(self, spec: SinkSpec, on_batch: OnBatch | None = None) -> None:
        self.spec = spec
        self.on_batch = on_batch
        self.statistics: dict[int, WriterStatistics] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        stats = _write(df, self.spec, batch_id)
        self.statistics[batch_id] = stats
        log.info("batch %d of %s: %s", batch_id, self.spec.durable.sink_id, stats.summary())
        self._purge_old(batch_id)
        if self.on_batch is not None:
            self.on_batch(batch_id, stats)

    def _purge_old(self, batch_id: int) -> None:
        durable = self.spec.durable
        if durable.sink_id is None or not durable.retain_batches:
            return
        if batch_id - durable.retain_batches <= 0:
            return
        import anyio

        async def purge() -> int:
            async with open_store(durable.record_store) as store:
                return await store.purge(
                    durable.sink_id or "", before_batch=batch_id - durable.retain_batches
                )

        anyio.run(purge)

    def __repr__(self) -> str:
        return f"BatchSink({self.spec!r})"


def foreach_batch(
    sink: str,
    options: Mapping[str, Any] | None = None,
    *,
    sink_id: str | None = None,
    on_batch: OnBatch | None = None,
) -> BatchSink:
    """A ``foreachBatch`` function delivering each micro-batch through ``sink``.

    With ``sink_id`` (stable across restarts of the query), call records make a retried
    task or a replayed micro-batch skip what already reached the destination.

    Raises:
        OptionError: an option is unknown or invalid (raised here, on the driver).
    """
    return BatchSink(_spec(sink, options, sink_id), on_batch)


def foreach_partition(
    df: Any,
    sink: str,
    options: Mapping[str, Any] | None = None,
    *,
    sink_id: str | None = None,
    batch_id: int | None = None,
) -> WriterStatistics:
    """Deliver a batch DataFrame through ``sink``; return the summed statistics.

    ``batch_id`` names this run in the durable scope (with ``sink_id``): re-running the
    same ``(sink_id, batch_id)`` skips what was delivered, so use a new id per run.
    """
    merged = dict(options or {})
    if batch_id is not None:
        merged["batchId"] = str(batch_id)
    spec = _spec(sink, merged, sink_id)
    stats = _write(df, spec, None)
    log.info("job %s/%d: %s", spec.durable.sink_id, spec.durable.batch_id, stats.summary())
    return stats
