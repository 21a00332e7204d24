"""A batch backfill to Elasticsearch, with document ids taken from the rows.

Run it from a source checkout: python examples/elasticsearch_backfill.py
It starts the Elasticsearch emulator of the repository's tests (tests/servers/elasticsearch)
and a local Spark session. It runs the backfill twice: the second run, with the same batch
id, sends nothing again.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from asyncsink.spark import foreach_partition


def backfill(orders: Any, hosts: str, store: str, batch_id: int) -> Any:
    """Index ``orders`` by ``order_id``; return the write's statistics."""
    return foreach_partition(
        orders,
        "elasticsearch",
        {"hosts": hosts, "index": "orders", "idField": "order_id", "recordStore": store},
        sink_id="orders-backfill",
        batch_id=batch_id,  # the same id again: what was delivered is skipped
    )


def orders_frame(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr("concat('o', id) AS order_id", "id * 3 AS amount")


def main() -> int:
    from pyspark.sql import SparkSession

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's root
    from tests.servers.elasticsearch import ElasticsearchServer

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    store = f"sqlite://{Path(tempfile.mkdtemp()) / 'records.db'}"
    orders = orders_frame(spark, 5000)
    with ElasticsearchServer() as server:
        first = backfill(orders, server.url, store, batch_id=20261128)
        again = backfill(orders, server.url, store, batch_id=20261128)
        print(first.delivered, "documents indexed;", again.delivered, "sent by the re-run")
        print(len(server.documents("orders")), "documents in the index")
    return 0


if __name__ == "__main__":
    sys.exit(main())
