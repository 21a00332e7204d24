"""Runs one partition through a writer, on the executor, and returns its statistics.

Each Python worker process keeps one event loop, in a background thread, for as long as
Spark reuses the worker; record stores opened there are cached per process and reused by
every partition that worker runs. The task's own thread reads rows from Spark in chunks
and hands them to the loop, so reading the next rows overlaps with requests in flight,
and a full writer slows the reading down (backpressure).

The partition ends with the writer's barrier: ``run_partition`` returns only when every
row is acknowledged (or skipped as delivered by an earlier attempt), and raises
otherwise, which fails the Spark task so that Spark retries it. An error while reading
the rows (an operator upstream failed) is a failure too, never an end of input: the
writer is stopped, keeps what it knows in its call records, and the error propagates.

A partition that passed its barrier is still not done: its ``PartitionResult`` carries
the scope's summary back to the driver, which completes the scope once Spark committed
(see ``asyncsink.durable.completion``), and the dead letters it staged, which the driver
then publishes (see ``letters``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import anyio
import anyio.from_thread
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.from_thread import BlockingPortal

from ..durable.call_log import CallLog
from ..durable.completion import ScopeSummary
from ..errors import FatalError
from ..policies.dead_letter_files import DeadLetterFiles, StagedLetters
from ..stats import WriterStatistics
from ..stores import RecordStore, Scope, open_store
from ..telemetry import configure_from_environment
from .letters import task_letters
from .spec import SinkSpec

__all__ = ["PartitionResult", "run_chunks", "run_partition", "task_scope"]

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


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What a partition's task sends back to the driver: its statistics and, with durable
    records, the summary the driver completes the scope with once Spark committed."""

    statistics: WriterStatistics
    summary: ScopeSummary | None = None
    attributes: dict[str, str] = field(default_factory=dict)  # of the writer's metrics
    letters: StagedLetters | None = None  # dead letters staged, for the driver to publish


def task_scope(spec: SinkSpec, run: str, batch_id: int) -> Scope | None:
    """The durable scope of the running Spark task, or ``None`` without a ``sinkId``."""
    if spec.durable.sink_id is None:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    return Scope(spec.durable.sink_id, batch_id, partition, run)


class _ReadFailed(Exception):
    """Stops the writer when reading the partition's rows failed."""


def run_partition(spec: SinkSpec, rows: Iterable[Any], run: str, batch_id: int) -> PartitionResult:
    """Deliver ``rows`` with a writer built from ``spec``, in the scope of ``run`` and
    ``batch_id``; return its statistics and scope summary.

    Raises:
        AsyncSinkError: the rows could not all be delivered (the Spark task should fail).
        Exception: reading the rows failed (as raised by the iterator); the writer was
            stopped without treating the rows read so far as the whole partition.
    """
    return run_chunks(spec, _chunked(rows), run, batch_id)


def run_chunks(
    spec: SinkSpec, chunks: Iterable[Sequence[Any]], run: str, batch_id: int
) -> PartitionResult:
    """``run_partition`` for rows that come in sequences (e.g. one per Arrow record
    batch)."""
    scope = task_scope(spec, run, batch_id)
    portal = _worker_portal()
    send, receive = portal.call(_channel)
    letters = task_letters(spec, run, batch_id)
    future = portal.start_task_soon(_deliver, spec, scope, receive, letters)
    iterator: Iterator[Sequence[Any]] = iter(chunks)
    try:
        while not future.done():
            try:
                chunk = next(iterator, None)
            except BaseException as exc:
                portal.call(_abort, send, exc)
                _wait_quietly(future)
                raise
            if chunk is None:
                break
            if not chunk:
                continue
            try:
                portal.call(send.send, chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                break  # the writer stopped; its error is in the future
    finally:
        portal.call(send.aclose)
    result: PartitionResult = future.result()
    return result


def _chunked(rows: Iterable[Any]) -> Iterator[list[Any]]:
    iterator = iter(rows)
    while chunk := list(islice(iterator, CHUNK_ROWS)):
        yield chunk


async def _abort(send: ObjectSendStream[Sequence[Any]], exc: BaseException) -> None:
    """Tell the writer that the input failed: it must not pass its barrier."""
    try:
        await send.send(_ReadFailed(f"reading the partition's rows failed: {exc!r}"))  # type: ignore[arg-type]
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


def _wait_quietly(future: Any) -> None:
    """Wait for the writer to stop; its own error is secondary to the read error."""
    try:
        future.result()
    except BaseException as exc:  # noqa: BLE001 - the read error is what the task reports
        log.debug("writer stopped after a read error: %r", exc)


async def _channel() -> tuple[ObjectSendStream[Sequence[Any]], ObjectReceiveStream[Sequence[Any]]]:
    return anyio.create_memory_object_stream[Sequence[Any]](max_buffer_size=2)


async def _deliver(
    spec: SinkSpec,
    scope: Scope | None,
    receive: ObjectReceiveStream[Sequence[Any]],
    letters: DeadLetterFiles | None,
) -> PartitionResult:
    configure_from_environment()
    async with receive:  # closed on every exit, so the reading thread never blocks
        store = _store(spec.durable.store_url) if scope is not None else None
        call_log = CallLog(store, scope) if store is not None and scope is not None else None
        writer = spec.build(call_log=call_log, dead_letter=letters)
        try:
            async with writer:
                async for chunk in receive:
                    if isinstance(chunk, _ReadFailed):
                        raise chunk
                    await writer.write_all(chunk)
        except (KeyboardInterrupt, SystemExit) as exc:
            # Raised out of this task, either would stop the worker's event loop, which
            # its later tasks need: the task fails instead, and Spark retries it.
            raise FatalError(f"{scope or 'the partition'}: the writer ended with {exc!r}") from exc
    stats = writer.statistics()
    log.info("%s: %s", scope or "partition", stats.summary())
    summary = call_log.summary() if call_log is not None else None
    staged = letters.staged() if letters is not None else None
    return PartitionResult(stats, summary, writer.metric_attributes(), staged)
