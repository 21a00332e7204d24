"""A Kinesis writer that dies (``os._exit``) with calls in flight, run as its own process by
the reconcile tests: ``python -m tests.sinks.kinesis_crash '<json settings>'``.

Settings: ``endpoint``, ``stream``, ``store`` (a SQLite file), ``sink_id``, ``rows``,
``options`` (more Spark options), ``point`` and ``at``:

- ``before_send``: the ``at``-th PutRecords request never leaves (its PENDING record is
  durable; the requests before it may be in flight, answered or not);
- ``after_apply``: the ``at``-th request reached the stream, its answer is never read;
- ``before_succeeded``: call ``at`` was answered, and the process dies as its SUCCEEDED
  record is about to be written.

With ``split_at``, the ``split_at``-th request first splits ``split_shard`` in two, and the
later requests wait until the stream is ACTIVE again. Before dying, the process writes ``marker``
(JSON: the requests started and answered). Exit code 1 means it died as planned.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import orjson

from asyncsink import CallLog, Scope
from asyncsink.sinks.kinesis import create_writer
from asyncsink.sinks.kinesis.clients import ClientSettings, get_client
from asyncsink.stores.sqlite import SQLiteStore

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "AKIACRASHTEST0000001", "aws_secret_access_key": "crash"}


def rows(count: int) -> list[dict[str, Any]]:
    """The rows every attempt writes: unique ids (the partition key), some payload."""
    return [{"id": f"r{i:05d}", "v": i, "pad": "x" * (i % 40)} for i in range(count)]


def spark_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    extra = settings.get("options", {})
    keys = {} if "partitionKeyMode" in extra else {"partitionKeyField": "id"}
    return {
        **keys,
        "streamName": settings["stream"],
        "endpointUrl": settings["endpoint"],
        "region": REGION,
        "awsAccessKeyId": CREDENTIALS["aws_access_key_id"],
        "awsSecretAccessKey": CREDENTIALS["aws_secret_access_key"],
        "maxBatchSize": "50",
        "maxInFlightRequests": "4",
        "requestTimeoutMs": "2s",
        "reconcileClockSkewMs": "300ms",
        "initialBackoffMs": "5",
        "maxBackoffMs": "50",
        **extra,
    }


class Dying:
    """A Kinesis client that forwards every call and dies where it was told to."""

    def __init__(self, client: Any, settings: Mapping[str, Any]) -> None:
        self.client = client
        self.settings = settings
        self.started = 0
        self.answered = 0
        self.split_done = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def put_records(self, **params: Any) -> Any:
        self.started += 1
        number = self.started
        point, at = self.settings["point"], self.settings["at"]
        split_at = self.settings.get("split_at")
        if number == split_at:
            await self.split()
            self.split_done.set()
        elif split_at is not None and number > split_at:
            await self.split_done.wait()  # later requests go to the new shards
        if point == "before_send" and number == at:
            self.die()
        answer = await self.client.put_records(**params)
        if point == "after_apply" and number == at:
            self.die()
        self.answered += 1
        return answer

    async def split(self) -> None:
        stream, shard = self.settings["stream"], self.settings["split_shard"]
        shards = (await self.client.list_shards(StreamName=stream))["Shards"]
        ranges = next(s["HashKeyRange"] for s in shards if s["ShardId"] == shard)
        middle = (int(ranges["StartingHashKey"]) + int(ranges["EndingHashKey"])) // 2
        await self.client.split_shard(
            StreamName=stream, ShardToSplit=shard, NewStartingHashKey=str(middle)
        )
        while True:
            summary = await self.client.describe_stream_summary(StreamName=stream)
            if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                return
            await anyio.sleep(0.05)

    def die(self) -> None:
        with open(self.settings["marker"], "wb") as out:
            out.write(orjson.dumps({"started": self.started, "answered": self.answered}))
        os._exit(1)


def die_before_succeeded(store: SQLiteStore, dying: Dying, call_id: int) -> None:
    """Make the store kill the process as call ``call_id``'s SUCCEEDED record is written."""
    put = store.put
    key = f"call:{call_id:010d}"

    async def put_or_die(
        scope: Scope, epoch: int, puts: Mapping[str, bytes], deletes: Iterable[str] = ()
    ) -> None:
        if b'"SUCCEEDED"' in puts.get(key, b""):
            dying.die()
        await put(scope, epoch, puts, deletes)

    store.put = put_or_die  # type: ignore[method-assign]


async def main(settings: Mapping[str, Any]) -> None:
    options = spark_options(settings)
    client = await get_client(
        ClientSettings(region=REGION, endpoint_url=settings["endpoint"], **CREDENTIALS)
    )
    dying = Dying(client, settings)
    store = SQLiteStore(settings["store"])
    if settings["point"] == "before_succeeded":
        die_before_succeeded(store, dying, settings["at"])
    call_log = CallLog(store, Scope(settings["sink_id"], 0, 0))
    writer = create_writer(options, call_log=call_log, client=dying)
    async with writer:
        await writer.write_all(rows(settings["rows"]))
    sys.exit(f"the writer finished without dying ({dying.started} requests)")


if __name__ == "__main__":
    anyio.run(main, orjson.loads(sys.argv[1]))
