"""The writer the chaos suite ships to executors: the HTTP sink's, with a worker killer."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark import TaskContext

from asyncsink.sinks.http import create_writer as create_http_writer

KILL_EVERY = "chaosKillEvery"
"""Option: kill the first attempt of partition 0 in every batch whose id is 1 modulo this."""
KILL_AFTER = "chaosKillAfterRequests"
"""Option: kill once this many of the attempt's requests were answered."""
KILL_MARKS = "chaosKillMarks"
"""Option: a folder where each kill leaves a file ``<batch>-<partition>``, so that a scope
is killed once (a replayed batch runs as attempt 0 again)."""


def _pop(options: dict[str, Any], name: str) -> Any:
    for key in list(options):
        if key.lower() == name.lower():
            return options.pop(key)
    raise KeyError(name)


def create_chaos_writer(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """An HTTP writer whose Python worker dies (``os._exit``) in the chosen scopes right
    after an answer arrives, before the writer records it: the request reached the
    endpoint, and the call records still say PENDING."""
    options = dict(options)
    every = int(_pop(options, KILL_EVERY))
    after = int(_pop(options, KILL_AFTER))
    marks = Path(_pop(options, KILL_MARKS))
    writer = create_http_writer(options, **kwargs)
    context = TaskContext.get()
    call_log = kwargs.get("call_log")
    if context is None or call_log is None or context.attemptNumber() != 0:
        return writer
    scope = call_log.scope
    if scope.partition_id != 0 or scope.batch_id % every != 1 % every:
        return writer
    marker = marks / f"{scope.batch_id}-{scope.partition_id}"
    submit = writer.submit_request_entries
    answered = 0

    async def submit_then_die(entries: list[Any]) -> Any:
        nonlocal answered
        result = await submit(entries)
        answered += 1
        if answered >= after and _claim(marker):
            os._exit(1)  # no flush, no cleanup: as if the executor had gone away
        return result

    writer.submit_request_entries = submit_then_die  # type: ignore[method-assign]
    return writer


def _claim(marker: Path) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True
