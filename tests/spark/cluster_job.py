"""A batch write on ``local-cluster[2,1,1024]`` (two executor JVMs) with DynamoDB records.

Run by ``test_cluster.py`` in a process of its own (a cluster needs its own SparkContext):
``python cluster_job.py INGEST_URL STORE_URL``. Partition 0's first attempt fails upstream
of the sink mid-partition; ``excludeOnFailure`` sends the retry to the other executor, which
must find the first attempt's records in DynamoDB. Prints the statistics as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def spark_home() -> str:
    """A mirror of the pyspark package for SPARK_HOME: Spark writes work/ into it."""
    import pyspark

    mirror = Path(tempfile.mkdtemp(prefix="spark-home-"))
    for entry in Path(pyspark.__file__).parent.iterdir():
        (mirror / entry.name).symlink_to(entry)
    return str(mirror)


def cluster_session(*env: str) -> Any:
    """A ``local-cluster[2,1,1024]`` session (two executors of one core, a task tried up
    to four times, a failing executor excluded), whose executors get this Python,
    ``PYTHONPATH`` and the environment variables named in ``env``."""
    os.environ["SPARK_HOME"] = spark_home()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.task.maxFailures", "4")
        .config("spark.excludeOnFailure.enabled", "true")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    for name in ("PYTHONPATH", *env):
        builder = builder.config(f"spark.executorEnv.{name}", os.environ.get(name, ""))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(ingest_url: str, store: str) -> None:
    spark = cluster_session("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    from pyspark.sql import functions as F

    def label(i: int) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if i == 1500 and context is not None and context.attemptNumber() == 0:
            raise ValueError("upstream operator failed")
        return f"r{i}"

    flaky = F.udf(label, "string", useArrow=False)
    df = spark.range(0, 4000, 1, 2).select(flaky("id").alias("id"), F.col("id").alias("n"))
    from asyncsink.spark import foreach_partition

    options = {"url": ingest_url, "recordStore": store, "maxBatchSize": "100"}
    stats = foreach_partition(df, "http", options, sink_id="cluster", batch_id=1)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({"delivered": stats.delivered, "skipped": stats.skipped,
                      "executors": executors}))  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
