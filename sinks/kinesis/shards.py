"""A stream's shards as the reconciler sees them, and reading one shard within its limits.

- ``Shard``: an id, its hash key range, its parents (one for a split, two for a merge)
  and whether it is closed. ``hash_key`` places a record as Kinesis does: its explicit
  hash key, else the MD5 of its partition key read as a 128-bit number; the record goes
  to the open shard whose range holds that number.
- ``list_shards``: every page of ListShards, leaving out the shards that closed before a
  given time (the ``FROM_TIMESTAMP`` filter; an endpoint that ignores it lists them all).
- ``ShardCursor``: GetShardIterator, then GetRecords page by page: at most five calls a
  second on the shard (its GetRecords limit, shared with the stream's consumers), backing
  off on ``ProvisionedThroughputExceededException`` and the other throttling codes (and
  trying again after a timeout, a dropped connection or a 5xx), re-opening an iterator
  that expired.
- ``ReadCost``: what the reads cost (calls, records, bytes, throttles).
"""

from __future__ import annotations

import datetime
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import backoff
from botocore.exceptions import ClientError

from asyncsink.errors import RetryableError, ThrottledError

from .converter import KinesisEntry
from .errors import translate_error

__all__ = ["Page", "ReadCost", "Shard", "ShardCursor", "hash_key", "list_shards"]

MAX_RECORDS_PER_PAGE = 10_000
"""GetRecords returns at most 10,000 records a call."""
_CALL_INTERVAL_S = 0.2  # GetRecords: 5 calls per second per shard
_MAX_TRIES = 12  # the caller's time budget usually ends the backoff first
_BACKOFF_FACTOR_S = 0.2
_BACKOFF_MAX_S = 5.0


def hash_key(entry: KinesisEntry) -> int:
    """The 128-bit hash key that decides the record's shard."""
    if entry.explicit_hash_key is not None:
        return int(entry.explicit_hash_key)
    digest = hashlib.md5(entry.partition_key.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True, slots=True)
class Shard:
    """A shard of the stream: its id, hash key range, parents, and whether it is closed
    (a closed shard was split or merged; it takes no new records)."""

    shard_id: str
    first_hash: int
    last_hash: int
    parents: tuple[str, ...]
    closed: bool

    def covers(self, hash_key: int) -> bool:
        return self.first_hash <= hash_key <= self.last_hash

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> Shard:
        ranges = shard["HashKeyRange"]
        parents = tuple(
            shard[name] for name in ("ParentShardId", "AdjacentParentShardId") if shard.get(name)
        )
        closed = shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber") is not None
        return cls(
            shard["ShardId"],
            int(ranges["StartingHashKey"]),
            int(ranges["EndingHashKey"]),
            parents,
            closed,
        )


@dataclass(slots=True)
class ReadCost:
    """What reading cost: API calls (tries included), records and bytes (data plus
    partition keys) read, the tries the stream throttled and those that failed on the
    way (a timeout, a dropped connection, a 5xx) and were tried again."""

    list_shards: int = 0
    get_shard_iterator: int = 0
    get_records: int = 0
    records: int = 0
    bytes: int = 0
    throttled: int = 0
    retried: int = 0


async def call_api(client: Any, name: str, cost: ReadCost, **params: Any) -> Any:
    """The client's operation ``name`` (``get_records``...) with ``params``, tried again
    with exponential backoff (full jitter) while the stream throttles it or the call
    fails on the way (reads change nothing, so a try that may have been answered is
    simply made again); each try is counted in ``cost``.

    Raises:
        Exception: the error of a call that retrying cannot help (a ``ClientError`` such
            as ``ExpiredIteratorException`` or ``AccessDeniedException``), or of the last
            of ``_MAX_TRIES`` tries.
    """
    waits = backoff.expo(factor=_BACKOFF_FACTOR_S, max_value=_BACKOFF_MAX_S)
    next(waits)  # the generator's priming step
    operation: Callable[..., Awaitable[Any]] = getattr(client, name)
    for attempt in range(1, _MAX_TRIES + 1):
        setattr(cost, name, getattr(cost, name) + 1)
        try:
            return await operation(**params)
        except Exception as exc:
            kind = translate_error(exc, "")
            if not isinstance(kind, RetryableError | ThrottledError) or attempt == _MAX_TRIES:
                raise
            if isinstance(kind, ThrottledError):
                cost.throttled += 1
            else:
                cost.retried += 1
            await anyio.sleep(backoff.full_jitter(next(waits)))
    raise AssertionError("unreachable")


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


async def list_shards(
    client: Any, stream: Mapping[str, str], since: float, cost: ReadCost
) -> list[Shard]:
    """The shards of ``stream`` (its ``StreamName`` or ``StreamARN`` parameter) that were
    open at ``since`` (a ``time.time()``) or later, every page of them."""
    params: dict[str, Any] = {
        **stream,
        "ShardFilter": {
            "Type": "FROM_TIMESTAMP",
            "Timestamp": datetime.datetime.fromtimestamp(since, datetime.UTC),
        },
    }
    shards: list[Shard] = []
    while True:
        page = await call_api(client, "list_shards", cost, **params)
        shards.extend(Shard.from_api(shard) for shard in page.get("Shards", ()))
        token = page.get("NextToken")
        if not token:
            return shards
        params = {"NextToken": token}


@dataclass(frozen=True, slots=True)
class Page:
    """One GetRecords answer: its records, and ``at_end``: nothing more was there when it
    was read (the stream's tip, or the end of a closed shard)."""

    records: list[dict[str, Any]]
    at_end: bool


class ShardCursor:
    """Reads one shard forward from a starting point.

    ``after`` (a sequence number) starts just after that record; else ``at_time`` (a
    ``time.time()``) starts at the first record that arrived then or later.
    """

    def __init__(
        self,
        client: Any,
        stream: Mapping[str, str],
        shard_id: str,
        cost: ReadCost,
        *,
        after: str | None = None,
        at_time: float | None = None,
    ) -> None:
        if (after is None) == (at_time is None):
            raise ValueError("give one starting point: after or at_time")
        self._client = client
        self._stream = stream
        self.shard_id = shard_id
        self._cost = cost
        self._after = after
        self._at_time = at_time
        self._iterator: str | None = None
        self._next_call = 0.0

    async def next_page(self, limit: int) -> Page:
        """The next page of at most ``limit`` records.

        Raises:
            botocore.exceptions.ClientError: the stream refused a call (other than by
                throttling), or throttled it too long.
        """
        limit = max(1, min(MAX_RECORDS_PER_PAGE, limit))
        if self._iterator is None:
            self._iterator = await self._open()
        while True:
            await anyio.sleep(max(0.0, self._next_call - time.monotonic()))
            self._next_call = time.monotonic() + _CALL_INTERVAL_S
            try:
                answer = await call_api(
                    self._client,
                    "get_records",
                    self._cost,
                    ShardIterator=self._iterator,
                    Limit=limit,
                )
            except ClientError as exc:
                if error_code(exc) != "ExpiredIteratorException":
                    raise
                self._iterator = await self._open()
                continue
            break
        records: list[dict[str, Any]] = answer.get("Records") or []
        for record in records:
            self._cost.bytes += len(record["Data"]) + len(record["PartitionKey"].encode())
        self._cost.records += len(records)
        if records:
            self._after, self._at_time = records[-1]["SequenceNumber"], None
        following = answer.get("NextShardIterator")
        behind = answer.get("MillisBehindLatest")
        at_end = following is None or (behind == 0 and len(records) < limit)
        self._iterator = following
        return Page(records, at_end)

    async def _open(self) -> str:
        params: dict[str, Any] = {**self._stream, "ShardId": self.shard_id}
        if self._after is not None:
            params.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                          StartingSequenceNumber=self._after)  # fmt: skip
        else:
            assert self._at_time is not None
            moment = datetime.datetime.fromtimestamp(self._at_time, datetime.UTC)
            params.update(ShardIteratorType="AT_TIMESTAMP", Timestamp=moment)
        answer = await call_api(self._client, "get_shard_iterator", self._cost, **params)
        iterator: str = answer["ShardIterator"]
        return iterator
