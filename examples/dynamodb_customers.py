"""Customer changes (puts and deletes) to a DynamoDB table: each customer ends with its
last change, in order per key, however often a write is sent again.

Run it against AWS, or against a local emulator (moto's server):

    python examples/dynamodb_customers.py TABLE REGION [ENDPOINT_URL]

The table's partition key is ``customer_id`` (a string). AWS credentials come from the
SDK's default chain (e.g. AWS_ACCESS_KEY_ID).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from asyncsink.spark import foreach_partition


def apply(
    changes: Any,
    table: str,
    region: str,
    store: str,
    batch_id: int,
    endpoint_url: str | None = None,
) -> Any:
    """Put or delete each change's customer; return the write's statistics."""
    options = {
        "tableName": table,
        "keyFields": "customer_id",
        "operationField": "op",  # 'put' or 'delete'; not stored
        "region": region,
        "recordStore": store,
    }
    if endpoint_url:
        options["endpointUrl"] = endpoint_url
    # each customer's changes in one partition, in order: the sink keeps that order
    ordered = changes.repartition(2, "customer_id").sortWithinPartitions("customer_id", "version")
    return foreach_partition(ordered, "dynamodb", options, sink_id="customers", batch_id=batch_id)


def changes_frame(spark: Any, customers: int, versions: int) -> Any:
    """``versions`` changes of each customer; every fifth customer is deleted last."""
    return spark.range(customers * versions).selectExpr(
        f"concat('c', id % {customers}) AS customer_id",
        f"CAST(id DIV {customers} AS INT) AS version",
        f"IF(id DIV {customers} = {versions - 1} AND id % 5 = 0, 'delete', 'put') AS op",
        "named_struct('city', concat('city-', id % 3), 'tier', id % 4) AS profile",
        "CAST(id * 0.5 AS DECIMAL(12, 2)) AS balance",
    )


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    table, region, *endpoint = argv
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    store = f"sqlite://{Path(tempfile.mkdtemp()) / 'records.db'}"
    stats = apply(changes_frame(spark, 100, 5), table, region, store, 1, *endpoint)
    print(stats.delivered, "changes applied")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
