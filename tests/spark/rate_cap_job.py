"""Jobs of 16 partitions on ``local[4]`` under a rate cap for the whole job.

Run by ``test_rate_cap.py`` in a process of its own (it needs a SparkContext of four
cores): ``python rate_cap_job.py URL``. Writes through ``foreach_partition`` with
``maxRequestsPerSecond=50`` (one entry a request), then through the data source with
``maxEntriesPerSecond=500`` (five entries a request), and prints a line of JSON when each
job is done.
"""

from __future__ import annotations

import json
import sys
import time

ROWS = 96  # requests a partition: 16 partitions at 50 a second take about 31 s


def main(url: str) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[4]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from asyncsink.spark import foreach_partition, register_data_sources

    register_data_sources(spark)
    df = spark.range(0, 16 * ROWS, 1, 16).selectExpr("id")
    started = time.monotonic()
    options = {"url": url, "maxBatchSize": "1", "maxRequestsPerSecond": "50"}
    stats = foreach_partition(df, "http", options)
    print(json.dumps({"job": "requests", "delivered": stats.delivered,
                      "seconds": time.monotonic() - started}), flush=True)  # fmt: skip

    started = time.monotonic()
    entries = spark.range(0, 16 * 10 * ROWS, 1, 16).selectExpr("id + 1000000 AS id")
    (
        entries.write.format("asyncsink-http")
        .options(url=url, maxBatchSize="5", maxEntriesPerSecond="500")
        .mode("append")
        .save()
    )
    print(json.dumps({"job": "entries", "seconds": time.monotonic() - started}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
