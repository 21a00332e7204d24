"""Retention: dropping the durable records of batches a sink will not replay any more.

Spark replays at most the batches after its last committed checkpoint, so the records of
older batches only take space. The driver calls ``purge_scopes`` now and then (e.g. after
each committed batch, or every N batches) with the window it wants to keep::

    await purge_scopes(store, "orders-to-es", keep_batches=100)
    await purge_scopes(store, "orders-to-es", older_than_s=7 * 86400)

A purged scope is unknown to the store again: a task that replayed it afterwards would
send its entries anew. So keep a window wider than the batches Spark can still replay
(the ones after the last checkpointed commit, and more if a query may be restarted from an
older checkpoint), and a time window longer than any task can run: a put refreshes a
scope's ``updated_at``, but a task that stays silent longer than the window loses its
records while it runs.
"""

from __future__ import annotations

from ..stores.base import RecordStore

__all__ = ["purge_scopes"]


async def purge_scopes(
    store: RecordStore,
    sink_id: str,
    *,
    keep_batches: int | None = None,
    older_than_s: float | None = None,
) -> int:
    """Delete the scopes of ``sink_id`` outside the retention window; return how many.

    ``keep_batches=N`` keeps the newest N batch ids seen for the sink (the newest batch id
    in the store and the N-1 before it) and makes every older batch eligible;
    ``older_than_s`` makes eligible the scopes not written for that many seconds. With
    both, a scope goes only when it is outside both windows.

    Raises:
        ValueError: neither bound is given, ``keep_batches`` is below 1 or
            ``older_than_s`` is negative.
        DurableError: the store cannot be read or written.
    """
    if keep_batches is None and older_than_s is None:
        raise ValueError("purge_scopes needs keep_batches, older_than_s or both")
    if keep_batches is not None and keep_batches < 1:
        raise ValueError(f"keep_batches must be >= 1, got {keep_batches}")
    if older_than_s is not None and older_than_s < 0:
        raise ValueError(f"older_than_s must be >= 0, got {older_than_s}")
    before_batch = None
    if keep_batches is not None:
        scopes = await store.scopes(sink_id)
        if not scopes:
            return 0
        newest = max(info.scope.batch_id for info in scopes)
        before_batch = newest - keep_batches + 1
        if before_batch <= 0:
            return 0
    return await store.purge(sink_id, before_batch=before_batch, older_than_s=older_than_s)
