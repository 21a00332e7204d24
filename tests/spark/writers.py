"""Writers the Spark tests ship to executors by ``module:function`` path."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from pyspark import TaskContext

from asyncsink import WriterStatistics
from asyncsink.sinks.http import create_writer as create_http_writer


def create_killing_writer(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """An HTTP writer whose first attempt of partition 0 dies (``os._exit``) after
    ``killAfterRequests`` acknowledged requests, or raises (``killMode`` = ``raise``);
    with ``killMode`` = ``raise-always`` every attempt of partition 0 raises."""
    options = dict(options)
    after = int(options.pop("killAfterRequests"))
    mode = options.pop("killMode", "exit")
    writer = create_http_writer(options, **kwargs)
    context = TaskContext.get()
    first = mode == "raise-always" or (context is not None and context.attemptNumber() == 0)
    doomed = first and context is not None and context.partitionId() == 0
    if not doomed:
        return writer
    submit = writer.submit_request_entries
    done = 0

    async def submit_then_die(entries: list[Any]) -> Any:
        nonlocal done
        result = await submit(entries)
        done += 1
        if done >= after:
            if mode == "exit":
                # Die once the answers so far are on disk (the writer persists them soon
                # after they arrive, not at once): the retry then has calls to skip.
                await writer._log.sync()
                os._exit(1)
            raise RuntimeError("injected task failure")
        return result

    writer.submit_request_entries = submit_then_die  # type: ignore[method-assign]
    return writer


class StatsFile:
    """An ``on_batch`` callback appending each batch's statistics to a JSON-lines file:
    under Spark Connect it runs on the server, and the file carries them to the test."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, batch_id: int, stats: WriterStatistics) -> None:
        line = {"batch": batch_id, "delivered": stats.delivered, "skipped": stats.skipped}
        with open(self.path, "a") as out:
            out.write(json.dumps(line) + "\n")

    def read(self) -> list[dict[str, int]]:
        if not os.path.exists(self.path):
            return []
        with open(self.path) as lines:
            return [json.loads(line) for line in lines]


class LoggedBatches:
    """A ``foreachBatch`` function that runs ``sink`` with the ``asyncsink.spark`` log going
    to ``path`` at INFO, in whichever process it runs (the server's, under Connect)."""

    def __init__(self, sink: Any, path: str) -> None:
        self.sink = sink
        self.path = path

    def __call__(self, df: Any, batch_id: int) -> None:
        logger = logging.getLogger("asyncsink.spark")
        if not any(getattr(h, "baseFilename", None) == self.path for h in logger.handlers):
            logger.addHandler(logging.FileHandler(self.path))
            logger.setLevel(logging.INFO)
        self.sink(df, batch_id)
