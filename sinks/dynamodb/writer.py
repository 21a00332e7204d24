"""``DynamoDBWriter``: puts and deletes rows' items in a DynamoDB table with BatchWriteItem.

A put replaces the whole item and a delete removes it, so sending one again is harmless:
each key ends with its last write, "once per key". That holds only if a key's writes land
in input order, so the writer keeps one write of a key out at a time (``KeyOrder`` by the
key fields, or by ``orderingKey``): a later write waits for the earlier one to end, and a
request never holds two writes of one key, which DynamoDB refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from asyncsink.options import SinkOptions
from asyncsink.request import SubmitResult

from ..aws.answers import EntryFailure, result_of
from ..aws.writer import AwsWriter
from ..registry import SinkEntry
from .items import ItemConverter, WriteEntry, key_text
from .options import DynamoDBOptions

__all__ = ["DynamoDBWriter", "create_writer"]

_UNPROCESSED = "UnprocessedItems"


class DynamoDBWriter(AwsWriter[WriteEntry]):
    """Writes Spark ``Row`` objects, dicts or other mappings to a DynamoDB table.

    Each element becomes a put of its item, or a delete of its key (see
    ``DynamoDBOptions``); requests hold at most 25 writes and 16 MiB. The writes DynamoDB
    returns as ``UnprocessedItems`` are retried on their own, as throttled.

    Args:
        dynamodb: the table, its key and which rows are deletes.
        options: buffering hints and retry policy; the DynamoDB defaults if omitted.
        call_log: durable call records for this writer's scope.
        client: an aiobotocore DynamoDB client to use instead of the shared one.
        ordering: an ``Ordering`` instead of one write of a key out at a time.
    """

    sink_name = "dynamodb"
    service = "dynamodb"
    kind = "DynamoDB table"
    hints = {
        "ResourceNotFoundException": "the table does not exist in this account and region; "
        "check tableName and region",
        "AccessDeniedException": "the credentials may not call dynamodb:BatchWriteItem on "
        "this table",
        "ValidationException": "a write is malformed: check keyFields against the table's "
        "key (names and types), and the item sizes",
        "ItemCollectionSizeLimitExceededException": "an item collection of a local "
        "secondary index is over 10 GB",
    }

    def __init__(
        self, dynamodb: DynamoDBOptions, *, options: SinkOptions | None = None, **kwargs: Any
    ) -> None:
        options = options or SinkOptions(**dynamodb.core_defaults())
        kwargs.setdefault("ordering", dynamodb.ordering(options))
        super().__init__(dynamodb, options=options, **kwargs)
        self.dynamodb = dynamodb
        self._convert = ItemConverter(dynamodb)

    def destination_name(self) -> str:
        """The table's name."""
        return self.dynamodb.table_name

    def convert(self, element: Any) -> WriteEntry:
        """The put or delete for a ``Row``, dict or mapping (see ``DynamoDBOptions``)."""
        return self._convert(element)

    def entry_size(self, entry: WriteEntry) -> int:
        """The row's JSON in bytes: a little above the item's size as DynamoDB counts it."""
        return len(entry.data)

    def serialize_entry(self, entry: Any) -> bytes:
        """The row's JSON (for content digests and dead letters)."""
        return entry.data if isinstance(entry, WriteEntry) else super().serialize_entry(entry)

    async def submit_request_entries(self, entries: list[WriteEntry]) -> SubmitResult:
        """One BatchWriteItem request; the writes DynamoDB did not process are returned
        by index. Of two writes of one key, only the later is sent: it is what the key
        ends with (the earlier counts as delivered).

        Raises:
            ThrottledError, RetryableError, FatalError: the whole request failed.
        """
        last = {entry.key: index for index, entry in enumerate(entries)}
        sent = sorted(last.values())
        table = self.dynamodb.table_name
        answer = await self._call(
            "batch_write_item", RequestItems={table: [entries[i].request for i in sent]}
        )
        left = (answer.get(_UNPROCESSED) or {}).get(table) or []
        keys = self.dynamodb.keys
        failures, unnamed = [], []
        for request in left:
            body = request.get("PutRequest", {}).get("Item") or request.get(
                "DeleteRequest", {}
            ).get("Key", {})
            index = last.get(key_text(body, keys))
            if index is None:
                unnamed = sent  # cannot tell which: all again (puts and deletes repeat safely)
                break
            failures.append(EntryFailure(index, "ProvisionedThroughputExceededException"))
        if unnamed:
            return result_of((), unnamed)
        return result_of(failures)


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> DynamoDBWriter:
    """A ``DynamoDBWriter`` from one mapping of Spark options (its own and ``SinkOptions``).

    Raises:
        OptionError: an unknown option, an invalid value, or a value above a limit.
    """
    entry = SinkEntry("dynamodb", DynamoDBWriter, DynamoDBOptions)
    return cast(DynamoDBWriter, entry.build(options, **kwargs))
