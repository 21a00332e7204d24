"""Batch writes on ``local-cluster[2,1,1024]`` (two executor JVMs) with PostgreSQL records.

Run by ``test_cluster_postgres.py`` in a process of its own (a cluster needs its own
SparkContext): ``python cluster_postgres_job.py INGEST_URL STORE_URL``.

1. With ``sinkId`` and no ``recordStore`` (the default SQLite file), the write is refused
   on the driver: no Spark job runs.
2. With the PostgreSQL store, partition 0's first attempt SIGKILLs its Python worker once
   its fifth request was answered, while others are in flight; ``excludeOnFailure`` sends
   the retry to the other executor, which must find the first attempt's records.

Prints one JSON line: the refusal, the jobs it ran, and the second write's statistics.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from tests.spark.cluster_job import cluster_session

KILL_AFTER_ANSWERS = 5


def create_killing_http_writer(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """An HTTP writer whose first attempt of partition 0 SIGKILLs its Python worker once
    its ``KILL_AFTER_ANSWERS``-th answer came back, before the writer records that one."""
    from pyspark import TaskContext

    from asyncsink.sinks.http import create_writer

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
        if answered >= KILL_AFTER_ANSWERS:
            # The answers before this one are on disk first (the writer persists them
            # soon after they arrive, not at once): the retry then has calls to skip.
            await writer._log.sync()
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    writer.submit_request_entries = submit_then_die
    return writer


def main(ingest_url: str, store: str) -> None:
    spark = cluster_session()
    context = spark.sparkContext
    from asyncsink.errors import OptionError
    from asyncsink.spark import foreach_partition

    df = spark.range(0, 4000, 1, 2).selectExpr("concat('r', id) AS id", "id AS n")

    context.setJobGroup("default-store", "the default store on a cluster")
    refusal = ""
    try:
        foreach_partition(df, "http", {"url": ingest_url}, sink_id="cluster-pg", batch_id=1)
    except OptionError as exc:
        refusal = str(exc)
    refused_jobs = list(context.statusTracker().getJobIdsForGroup("default-store"))

    context.setJobGroup("postgresql", "the PostgreSQL store, a task killed")
    options = {"url": ingest_url, "recordStore": store, "maxBatchSize": "100"}
    writer = "tests.spark.cluster_postgres_job:create_killing_http_writer"
    stats = foreach_partition(df, writer, options, sink_id="cluster-pg", batch_id=1)
    executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({
        "refusal": refusal, "refused_jobs": refused_jobs,
        "delivered": stats.delivered, "skipped": stats.skipped, "executors": executors,
        "resent_calls": stats.resent_calls,
    }))  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
