"""Dead letters of a job on ``local-cluster[2,1,1024]`` (two executor JVMs) in a
``file://`` directory, read back with ``spark.read.json``.

Run by ``test_cluster_letters.py`` in a process of its own (a cluster needs its own
SparkContext): ``python -m tests.spark.cluster_letters_job INGEST_URL WORKDIR``.

1. A plain ``deadLetter`` path is refused on the driver: no Spark job runs.
2. ``foreach_partition`` with ``sinkId`` and ``batchId``: 1% of the rows are too large,
   1% refused by the endpoint; partition 0's first attempt SIGKILLs its Python worker
   after its fifth answer (some refusals answered and recorded), and the retry runs on
   the other executor.
3. The same ``batchId`` is written again: a replay of a completed run.
4. The ``asyncsink-http`` data source writes the same rows, without a ``sinkId``, to a
   directory of its own.

Prints one JSON line: the refusal, the rows each directory holds, the statistics.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.spark.cluster_job import cluster_session

ROWS = 4000


def letters_of(spark: Any, url: str) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.read.json(url).collect()]


def main(ingest_url: str, workdir: str) -> None:
    spark = cluster_session()
    context = spark.sparkContext
    from asyncsink.errors import OptionError
    from asyncsink.spark import foreach_partition, register_data_sources

    df = spark.range(0, ROWS, 1, 2).selectExpr(
        "concat('r', id) AS id",
        "id % 100 = 7 AS bad",  # refused by the endpoint (item status 400)
        "IF(id % 100 = 42, repeat('x', 2000), '') AS pad",  # above maxRecordSizeInBytes
    )
    letters = f"file://{workdir}/letters"
    options = {
        "url": ingest_url,
        "recordStore": f"sqlite://{workdir}/records.db",
        "recordStoreScope": "machine",  # both executors run on this machine
        "maxBatchSize": "100",
        "maxRecordSizeInBytes": "1kb",
    }

    context.setJobGroup("plain-path", "a plain deadLetter path on a cluster")
    refusal = ""
    try:
        plain = {"url": ingest_url, "deadLetter": f"{workdir}/letters.jsonl"}
        foreach_partition(df, "http", plain)
    except OptionError as exc:
        refusal = str(exc)
    refused_jobs = list(context.statusTracker().getJobIdsForGroup("plain-path"))

    killing = "tests.spark.cluster_postgres_job:create_killing_http_writer"
    first = foreach_partition(
        df, killing, {**options, "deadLetter": letters}, sink_id="letters", batch_id=1
    )
    after_first = letters_of(spark, letters)
    again = foreach_partition(
        df, "http", {**options, "deadLetter": letters}, sink_id="letters", batch_id=1
    )

    register_data_sources(spark)
    source_letters = f"file://{workdir}/source-letters"
    (
        df.write.format("asyncsink-http")
        .option("url", ingest_url)
        .option("maxBatchSize", "100")
        .option("maxRecordSizeInBytes", "1kb")
        .option("deadLetter", source_letters)
        .mode("append")
        .save()
    )
    executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({
        "refusal": refusal, "refused_jobs": refused_jobs, "executors": executors,
        "first": {"dead_lettered": first.dead_lettered, "delivered": first.delivered,
                  "skipped": first.skipped},
        "again": {"dead_lettered": again.dead_lettered, "skipped": again.skipped},
        "letters": after_first, "letters_after_replay": letters_of(spark, letters),
        "source_letters": letters_of(spark, source_letters),
    }, default=str))  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
