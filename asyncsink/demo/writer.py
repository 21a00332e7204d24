"""The writer factory the demo's query runs: a sink's writer that can kill its task."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from asyncsink.sinks import sink_factory

from ..writer import AsyncSinkWriter

__all__ = ["KILL_AT_OPTION", "KILL_MARKER_OPTION", "SINK_OPTION", "create_demo_writer"]

SINK_OPTION = "demoSink"
"""Option of ``create_demo_writer``: the sink whose writer it builds (default ``http``)."""
KILL_AT_OPTION = "demoKillAtRequest"
"""Option of ``create_demo_writer``: kill the task when the answer to its request number N
(or a later one) arrives, before the writer records it."""
KILL_MARKER_OPTION = "demoKillMarker"
"""Option of ``create_demo_writer``: a file created at the kill, so that it happens once."""


def _pop(options: dict[str, Any], name: str) -> Any:
    for key in list(options):
        if key.lower() == name.lower():
            return options.pop(key)
    return None


def create_demo_writer(options: Mapping[str, Any], **kwargs: Any) -> AsyncSinkWriter[Any, Any]:
    """The demo's writer: the ``demoSink`` sink's writer (``http`` by default), built from
    the other options.

    With ``demoKillAtRequest`` = N and ``demoKillMarker``, the first attempt of partition 0
    kills its own Python worker with ``os._exit`` when the destination answered (without
    an error) its N-th request or a later one (counting re-sends), provided an earlier one
    was acknowledged, before the writer records that answer: the worker is lost
    mid-partition, with some requests delivered and recorded, one delivered that the
    records still hold as PENDING, others in flight, and the rest never sent. The marker
    file is created at the kill and says where it happened, so the kill happens once.
    """
    rest = dict(options)
    sink = _pop(rest, SINK_OPTION) or "http"
    at_request = _pop(rest, KILL_AT_OPTION)
    marker = _pop(rest, KILL_MARKER_OPTION)
    writer: AsyncSinkWriter[Any, Any] = sink_factory(str(sink))(rest, **kwargs)
    if at_request is None or marker is None:
        return writer
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0 or context.partitionId() != 0:
        return writer
    _arm(writer, int(at_request), Path(str(marker)), context.partitionId())
    return writer


def _arm(writer: AsyncSinkWriter[Any, Any], at_request: int, marker: Path, partition: int) -> None:
    submit = writer.submit_request_entries
    started = acknowledged = in_flight = 0

    async def submit_or_die(entries: list[Any]) -> Any:
        nonlocal started, acknowledged, in_flight
        started += 1
        number = started
        in_flight += 1
        try:
            result = await submit(entries)
        finally:
            in_flight -= 1
        if number >= at_request and acknowledged:
            # The destination holds this request; the call records still say PENDING.
            detail = {"partition": partition, "attempt": 0, "acked": acknowledged,
                      "in_flight": in_flight, "started": started}  # fmt: skip
            if _claim(marker, detail):
                os._exit(1)  # no flush, no cleanup: as if the machine had gone away
        acknowledged += 1
        return result

    writer.submit_request_entries = submit_or_die  # type: ignore[method-assign]


def _claim(marker: Path, detail: dict[str, int]) -> bool:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(orjson.dumps(detail))
    return True
