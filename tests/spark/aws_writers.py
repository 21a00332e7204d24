"""The SQS, DynamoDB and Firehose writers the Spark tests ship to executors by
``module:function``: the first attempt of partition 0 dies mid-batch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyspark import TaskContext

from asyncsink.sinks import sink_factory


def create_killing_writer(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """The writer of sink ``sink`` (an option) whose first attempt of partition 0 kills
    its Python worker (``os._exit``) once its ``killAfterAnswers``-th answer came back,
    before the writer records it, while other requests are in flight."""
    options = dict(options)
    sink, after = options.pop("sink"), int(options.pop("killAfterAnswers"))
    writer = sink_factory(sink)(options, **kwargs)
    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0 or context.partitionId() != 0:
        return writer
    submit, answered = writer.submit_request_entries, []

    async def submit_then_die(entries: list[Any]) -> Any:
        result = await submit(entries)
        answered.append(1)
        if len(answered) >= after:
            os._exit(1)
        return result

    writer.submit_request_entries = submit_then_die
    return writer
