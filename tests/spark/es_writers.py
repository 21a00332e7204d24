"""Elasticsearch writers the Spark tests ship to executors by ``module:function`` path."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyspark import TaskContext

from asyncsink.sinks.elasticsearch import create_writer


def create_killing_es_writer(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """An Elasticsearch writer whose first attempt of partition 0 dies (``os._exit``) once
    ``killAfterRequests`` requests were answered: a task killed mid-batch, with some of
    its changes applied and the rest not. Only once: the file ``killMarker`` records that
    a writer died."""
    options = dict(options)
    after = int(options.pop("killAfterRequests"))
    marker = options.pop("killMarker")
    writer = create_writer(options, **kwargs)
    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0 or context.partitionId() != 0:
        return writer
    if os.path.exists(marker):
        return writer
    submit = writer.submit_request_entries
    done = 0

    async def submit_then_die(entries: list[Any]) -> Any:
        nonlocal done
        result = await submit(entries)
        done += 1
        if done >= after:
            os.close(os.open(marker, os.O_CREAT | os.O_WRONLY))  # dying: nothing to wait for
            os._exit(1)
        return result

    writer.submit_request_entries = submit_then_die  # type: ignore[method-assign]
    return writer
