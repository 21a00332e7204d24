"""The Kinesis writer the Spark reconcile test ships to executors by ``module:function``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyspark import TaskContext

from asyncsink.sinks.kinesis import create_writer


def create_killing_kinesis_writer(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """A Kinesis writer whose first attempt of partition 0 kills its Python worker
    (``os._exit``) once its ``killAfterAnswers``-th PutRecords answer came back, before
    the writer records it, while other requests are in flight."""
    options = dict(options)
    after = int(options.pop("killAfterAnswers"))
    writer = create_writer(options, **kwargs)
    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0 or context.partitionId() != 0:
        return writer
    submit = writer.submit_request_entries
    answered = 0

    async def submit_then_die(entries: list[Any]) -> Any:
        nonlocal answered
        result = await submit(entries)
        answered += 1
        if answered >= after:
            os._exit(1)
        return result

    writer.submit_request_entries = submit_then_die  # type: ignore[method-assign]
    return writer
