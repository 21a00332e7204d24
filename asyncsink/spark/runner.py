"""Runs one partition through a writer, on the executor, and returns its statistics.

Each Python worker process keeps one event loop, in a background thread, for as long as
Spark reuses the worker; record stores opened there are cached per process and reused by
every partition that worker runs. The task's own thread reads rows from Spark in chunks
and hands them to the loop, so reading the next rows overlaps with requests in flight,
and a full writer slows the reading down (backpressure).

The partition ends with the writer's barrier: ``run_partition`` returns only when every
row is acknowledged (or skipped as delivered by an earlier attempt), and raises
otherwise, which fails the Spark task so that Spark retries it.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from itertools import islice
from typing import Any

import anyio
import anyio.from_thread
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.from_thread import BlockingPortal

from ..durable.call_log import CallLog
from ..stats import WriterStatistics
from ..stores import RecordStore, Scope, open_store
from .spec import SinkSpec

__all__ = ["run_partition", "task_scope"]

log = logging.getLogger("asyncsink.spark")

CHUNK_ROWS = 1000

_lock = threading.Lock()
_portal: tuple[int, AbstractContextManager[BlockingPortal], BlockingPortal] | None = None
_stores: dict[str, RecordStore] = {}


def _worker_portal() -> BlockingPortal:
    """This process's event loop thread (started on first use, again after a fork)."""
    global _portal
    with _lock:
        if _portal is None or _portal[0] != os.getpid():
            _stores.clear()
            manager = anyio.from_thread.start_blocking_portal()
            _portal = (os.getpid(), manager, manager.__enter__())
            atexit.register(_stop_portal)
        return _portal[2]


def _stop_portal() -> None:
    global _portal
    with _lock:
        if _portal is None or _portal[0] != os.getpid():
            return
        _, manager, portal = _portal
        _portal = None
    for store in list(_stores.values()):
        portal.call(store.aclose)
    _stores.clear()
    manager.__exit__(None, None, None)


def _store(url: str) -> RecordStore:
    store = _stores.get(url)
    if store is None:
        store = _stores[url] = open_store(url)
    return store


def task_scope(spec: SinkSpec, batch_id: int | None) -> Scope | None:
    """The durable scope of the running Spark task, or ``None`` without a ``sinkId``.

    The batch id is the micro-batch id when given, else the ``batchId`` option.
    """
    if spec.durable.sink_id is None:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    batch = spec.durable.batch_id if batch_id is None else batch_id
    return Scope(spec.durable.sink_id, batch, partition)


def run_partition(
    spec: SinkSpec, rows: Iterable[Any], batch_id: int | None = None
) -> WriterStatistics:
    """Deliver ``rows`` with a writer built from ``spec``; return its statistics.

    Raises:
        AsyncSinkError: the rows could not all be delivered (the Spark task should fail).
    """
    scope = task_scope(spec, batch_id)
    portal = _worker_portal()
    send, receive = portal.call(_channel)
    future = portal.start_task_soon(_deliver, spec, scope, receive)
    iterator: Iterator[Any] = iter(rows)
    try:
        while not future.done():
            chunk = list(islice(iterator, CHUNK_ROWS))
            if not chunk:
                break
            try:
                portal.call(send.send, chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                break  # the writer stopped; its error is in the future
    finally:
        portal.call(send.aclose)
    stats: WriterStatistics = future.result()
    return stats


async def _channel() -> tuple[ObjectSendStream[list[Any]], ObjectReceiveStream[list[Any]]]:
    return anyio.create_memory_object_stream[list[Any]](max_buffer_size=2)


async def _deliver(
    spec: SinkSpec, scope: Scope | None, receive: ObjectReceiveStream[list[Any]]
) -> WriterStatistics:
    async with receive:  # closed on every exit, so the reading thread never blocks
        store = _store(spec.durable.record_store) if scope is not None else None
        call_log = CallLog(store, scope) if store is not None and scope is not None else None
        writer = spec.build(call_log=call_log)
        async with writer:
            async for chunk in receive:
                await writer.write_all(chunk)
    stats = writer.statistics()
    log.info("%s: %s", scope or "partition", stats.summary())
    return stats
