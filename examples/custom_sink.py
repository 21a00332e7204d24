"""A sink of your own, registered as ``format("asyncsink-collector")``.

Run it: python examples/custom_sink.py
The "collector" sink POSTs JSON arrays to an endpoint. Its options class has one required
option, ``endpoint``. Spark then writes to it like to a built-in sink.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from asyncsink import AsyncSinkWriter, FatalError, RetryableError, SinkOptions, current_call
from asyncsink.masking import mask_url
from asyncsink.options import Options, option, parse_options
from asyncsink.sinks import register_sink


@dataclass(frozen=True, kw_only=True, repr=False)
class CollectorOptions(Options):
    endpoint: str = option(kind="str", doc="URL each batch is POSTed to. Required.")


class CollectorWriter(AsyncSinkWriter[Any, bytes]):
    takes_mappings = True  # rows read through Arrow arrive as dicts

    def __init__(self, collector: CollectorOptions, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.endpoint = collector.endpoint

    def describe_destination(self) -> str:  # shown in logs and errors
        return f"collector at {mask_url(self.endpoint)}"

    def convert(self, row: Any) -> bytes:
        return orjson.dumps(row if isinstance(row, dict) else row.asDict(recursive=True))

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        headers = {"Idempotency-Key": current_call().idempotency_key,
                   "Content-Type": "application/json"}  # fmt: skip
        async with httpx.AsyncClient(timeout=30) as client:
            body = b"[" + b",".join(entries) + b"]"
            answer = await client.post(self.endpoint, content=body, headers=headers)
        if answer.status_code >= 500 or answer.status_code == 429:
            raise RetryableError(f"HTTP {answer.status_code}")
        if answer.status_code >= 400:
            raise FatalError(f"HTTP {answer.status_code}")


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> CollectorWriter:
    collector, rest = parse_options(CollectorOptions, options)
    return CollectorWriter(collector, options=SinkOptions.from_options(rest), **kwargs)


def register() -> None:
    """Register the sink; call it before ``register_data_sources(spark)``."""
    register_sink("collector", "custom_sink:create_writer", "custom_sink:CollectorOptions",
                  replace=True)  # fmt: skip


def main() -> int:
    from pyspark.sql import SparkSession

    from asyncsink.spark import register_data_sources
    from asyncsink.testing import FaultServer

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    spark.sparkContext.addPyFile(__file__)  # the executors import this module too
    register()
    register_data_sources(spark)
    with FaultServer() as server:
        rows = spark.range(2000).selectExpr("id", "id % 3 AS kind")
        rows.write.format("asyncsink-collector").option("endpoint", server.ingest_url).mode(
            "append"
        ).save()
        print(server.stats().entries_received, "rows received")
    return 0


if __name__ == "__main__":
    sys.exit(main())
