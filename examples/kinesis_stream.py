"""A stream to Amazon Kinesis, with call records in DynamoDB.

Run it against AWS, or against local emulators:

    python examples/kinesis_stream.py STREAM REGION TABLE [KINESIS_URL DYNAMODB_URL]

AWS credentials come from the SDK's default chain (e.g. AWS_ACCESS_KEY_ID).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from asyncsink.spark import foreach_batch


def run(events: Any, stream: str, region: str, table: str, checkpoint: Path,
        kinesis_url: str | None = None, dynamodb_url: str | None = None) -> None:  # fmt: skip
    """Put every row of the ``events`` stream into ``stream``, keyed by ``user``."""
    store = f"dynamodb://{table}?region={region}"
    options = {"streamName": stream, "region": region, "partitionKeyField": "user"}
    if kinesis_url:
        options["endpointUrl"] = kinesis_url
    if dynamodb_url:
        store += f"&endpoint_url={dynamodb_url}"
    sink = foreach_batch("kinesis", {**options, "recordStore": store}, sink_id="to-kinesis",
                         checkpoint_location=str(checkpoint))  # fmt: skip
    query = (
        events.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def main(argv: list[str]) -> int:
    import tempfile

    from pyspark.sql import SparkSession

    stream, region, table, *urls = argv
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    events = (
        spark.readStream.format("rate").option("rowsPerSecond", 100).load()
        .selectExpr("CAST(value AS STRING) AS id", "CAST(value % 5 AS STRING) AS user")
        .where("value < 500")
    )  # fmt: skip
    run(events, stream, region, table, Path(tempfile.mkdtemp()), *urls)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
