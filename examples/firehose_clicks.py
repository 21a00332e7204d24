"""Click events to an Amazon Data Firehose stream, through the data source, as JSON lines.

Run it against AWS, or against a local emulator (moto's server):

    python examples/firehose_clicks.py STREAM REGION [ENDPOINT_URL]

AWS credentials come from the SDK's default chain (e.g. AWS_ACCESS_KEY_ID).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any


def send(clicks: Any, stream: str, region: str, store: str, batch_id: int,
         endpoint_url: str | None = None, **options: str) -> None:  # fmt: skip
    """Send each click as a record; a re-run with the same batch id skips what arrived.
    ``options``: more of the sink's options (credentials, say)."""
    writer = (
        clicks.write.format("asyncsink-firehose")
        .option("deliveryStreamName", stream)
        .option("region", region)
        .option("sinkId", "clicks-to-firehose")
        .option("batchId", str(batch_id))
        .option("recordStore", store)
    )
    if endpoint_url:
        writer = writer.option("endpointUrl", endpoint_url)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def clicks_frame(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr(
        "concat('c', id) AS click_id",
        "concat('/page/', id % 13) AS path",
        "TIMESTAMP '2026-11-28 12:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS at",
    )


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    from asyncsink.spark import register_data_sources

    stream, region, *endpoint = argv
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    register_data_sources(spark)
    store = f"sqlite://{Path(tempfile.mkdtemp()) / 'records.db'}"
    send(clicks_frame(spark, 1000), stream, region, store, 1, *endpoint)
    print("sent 1000 clicks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
