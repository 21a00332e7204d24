"""Orders to an Amazon SQS FIFO queue: one message group per customer, the order's kind as
a message attribute, each order once.

Run it against AWS, or against a local emulator (moto's server):

    python examples/sqs_orders.py QUEUE_URL REGION [ENDPOINT_URL]

AWS credentials come from the SDK's default chain (e.g. AWS_ACCESS_KEY_ID).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from asyncsink.spark import foreach_partition


def send(orders: Any, queue_url: str, region: str, store: str, batch_id: int,
         endpoint_url: str | None = None) -> Any:  # fmt: skip
    """Send each order as a message; return the write's statistics."""
    options = {
        "queueUrl": queue_url,
        "region": region,
        "messageGroupIdField": "customer_id",  # a FIFO queue keeps each group's order
        "messageAttributesFields": "kind",
        "recordStore": store,
    }
    if endpoint_url:
        options["endpointUrl"] = endpoint_url
    # the same batch id again: what was delivered is skipped, the rest deduplicated by SQS
    return foreach_partition(orders, "sqs", options, sink_id="orders-to-sqs", batch_id=batch_id)


def orders_frame(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr(
        "concat('o', id) AS order_id",
        "concat('c', id % 7) AS customer_id",
        "CAST(id * 1.25 AS DECIMAL(10, 2)) AS total",
        "IF(id % 10 = 0, 'refund', 'sale') AS kind",
    )


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    queue_url, region, *endpoint = argv
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    store = f"sqlite://{Path(tempfile.mkdtemp()) / 'records.db'}"
    stats = send(orders_frame(spark, 1000), queue_url, region, store, 1, *endpoint)
    print(stats.delivered, "orders sent")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
