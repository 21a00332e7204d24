"""The writer factory the demo's query runs: a shim's writer that can kill its task."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from sinks import shim_factory

from ..writer import AsyncSinkWriter

__all__ = ["KILL_AFTER_OPTION", "KILL_MARKER_OPTION", "SINK_OPTION", "create_demo_writer"]

SINK_OPTION = "demoSink"
"""Option of ``create_demo_writer``: the shim whose writer it builds (default ``http``)."""
KILL_AFTER_OPTION = "demoKillAfterRequests"
"""Option of ``create_demo_writer``: kill the task after this many acknowledged requests."""
KILL_MARKER_OPTION = "demoKillMarker"
"""Option of ``create_demo_writer``: a file created at the kill, so that it happens once."""


def _pop(options: dict[str, Any], name: str) -> Any:
    for key in list(options):
        if key.lower() == name.lower():
            return options.pop(key)
    return None


def create_demo_writer(options: Mapping[str, Any], **kwargs: Any) -> AsyncSinkWriter[Any, Any]:
    """The demo's writer: the ``demoSink`` shim's writer (``http`` by default), built from
    the other options.

    With ``demoKillAfterRequests`` and ``demoKillMarker``, the first attempt of partition 0
    kills its own Python worker with ``os._exit`` as soon as that many of its requests were
    acknowledged, before it records the last acknowledgement: a worker lost mid-partition,
    with one request delivered but not known to be. The marker file is created at the kill
    (and says where it happened), so it happens once.
    """
    rest = dict(options)
    sink = _pop(rest, SINK_OPTION) or "http"
    after = _pop(rest, KILL_AFTER_OPTION)
    marker = _pop(rest, KILL_MARKER_OPTION)
    writer: AsyncSinkWriter[Any, Any] = shim_factory(str(sink))(rest, **kwargs)
    if after is None or marker is None:
        return writer
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0 or context.partitionId() != 0:
        return writer
    _arm(writer, int(after), Path(str(marker)), context.partitionId())
    return writer


def _arm(writer: AsyncSinkWriter[Any, Any], after: int, marker: Path, partition: int) -> None:
    submit = writer.submit_request_entries
    acknowledged = 0

    async def submit_then_die(entries: list[Any]) -> Any:
        nonlocal acknowledged
        result = await submit(entries)
        acknowledged += 1
        if acknowledged >= after and _claim(marker, partition, acknowledged):
            os._exit(1)  # no flush, no cleanup: as if the machine had gone away
        return result

    writer.submit_request_entries = submit_then_die  # type: ignore[method-assign]


def _claim(marker: Path, partition: int, acknowledged: int) -> bool:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(orjson.dumps({"partition": partition, "attempt": 0, "acked": acknowledged}))
    return True
