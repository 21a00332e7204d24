"""The entry points as a user of ``SparkSession.builder.remote("local[2]")`` calls them.

Run by ``test_connect_local.py`` in a process of its own (``remote("local[...]")`` starts
the Connect server inside its process, which can then hold no classic session):
``python connect_local_job.py INGEST_URL STORE_URL``. Prints what it saw as JSON on its
last line.
"""

from __future__ import annotations

import json
import sys


def main(ingest_url: str, store: str) -> None:
    from pyspark.sql import SparkSession

    from asyncsink import SparkSetupError
    from asyncsink.spark import foreach_batch, foreach_partition, register_data_sources

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    options = {"url": ingest_url, "recordStore": store, "maxBatchSize": "50"}
    seen: dict[str, object] = {"session": type(spark).__module__}
    try:
        register_data_sources(spark)
        flat = spark.range(0, 1000, 1, 2).selectExpr("concat('f', id) AS id", "id * 2 AS v")
        events = spark.range(0, 1000, 1, 2).selectExpr(
            "concat('e', id) AS id",
            "timestamp_seconds(1764300000 + id) AS ts",
            "named_struct('n', id, 'tag', concat('t', id % 7)) AS s",
            "array(id, id * 2) AS a",
        )
        for name, df in (("flat", flat), ("events", events)):
            stats = foreach_partition(df, "http", options, sink_id=name, batch_id=1)
            seen[name] = stats.delivered
        (
            spark.range(0, 1000, 1, 2)
            .selectExpr("concat('d', id) AS id")
            .write.format("asyncsink-http")
            .options(**options)
            .option("sinkId", "source")
            .mode("append")
            .save()
        )
        try:
            foreach_batch("http", options, sink_id="stream")
        except SparkSetupError as exc:
            seen["refused"] = str(exc)
    finally:
        spark.stop()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:3])
