"""Options of the DynamoDB sink, and the BatchWriteItem limits the writer's options respect."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from asyncsink.errors import OptionError
from asyncsink.options import SinkOptions, option
from asyncsink.policies.ordering import KeyOrder, Ordering, key_reader

from ..aws.options import AwsSinkOptions

__all__ = ["MAX_ITEMS", "MAX_ITEM_BYTES", "MAX_REQUEST_BYTES", "DynamoDBOptions"]

MAX_ITEMS = 25
"""BatchWriteItem takes at most 25 puts and deletes per request..."""
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""... and at most 16 MiB."""
MAX_ITEM_BYTES = 400 * 1024
"""An item holds at most 400 KB."""

_TABLE_NAME = re.compile(r"^[a-zA-Z0-9_.-]{3,255}\Z")


def _fields(text: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


@dataclass(frozen=True, kw_only=True, repr=False)
class DynamoDBOptions(AwsSinkOptions):
    """Which table the DynamoDB sink writes, its key, and which rows are deletes.

    Raises:
        OptionError: a value is not allowed, a required option is missing, or two options
            contradict each other; the message names the options involved.
    """

    table_name: str = option(kind="str", doc="Name of the table to write to.")
    key_fields: str = option(
        kind="str",
        doc="The table's key: its partition key field, then its sort key field if it has "
        "one (e.g. 'customer_id,order_id').",
    )
    operation_field: str | None = option(
        None,
        doc="Field whose value says what a row does: 'put' (or null) writes the item, "
        "'delete' deletes the item with the row's key. The field is not stored.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _TABLE_NAME.match(self.table_name):
            raise OptionError(
                "tableName", self.table_name, "3 to 255 characters of a-z, A-Z, 0-9, _ . -"
            )
        if not 1 <= len(self.keys) <= 2:
            raise OptionError(
                "keyFields", self.key_fields, "a partition key field, and a sort key field"
            )
        if self.operation_field is not None and (
            not self.operation_field or self.operation_field in self.keys
        ):
            raise OptionError("operationField", self.operation_field, "a field not in keyFields")

    @property
    def keys(self) -> tuple[str, ...]:
        """The key fields: partition key, then sort key."""
        return _fields(self.key_fields)

    def core_defaults(self) -> Mapping[str, Any]:
        """25 items and 16 MiB a request; an item of at most 400 KB."""
        return {
            "max_batch_size": MAX_ITEMS,
            "max_batch_size_in_bytes": MAX_REQUEST_BYTES,
            "max_record_size_in_bytes": MAX_ITEM_BYTES,
        }

    def check_core(self, core: SinkOptions) -> None:
        """Refuse core options above a BatchWriteItem limit, and an ``orderingKey`` that
        is not made of key fields (two writes of one item could then share a request)."""
        limits = {
            "maxBatchSize": (core.max_batch_size, MAX_ITEMS),
            "maxBatchSizeInBytes": (core.max_batch_size_in_bytes, MAX_REQUEST_BYTES),
            "maxRecordSizeInBytes": (core.max_record_size_in_bytes, MAX_ITEM_BYTES),
        }
        for name, (value, limit) in limits.items():
            if value > limit:
                raise OptionError(name, value, f"at most {limit} (BatchWriteItem's limit)")
        ordering = _fields(core.ordering_key)
        if ordering and not set(ordering) <= set(self.keys):
            raise OptionError(
                "orderingKey", core.ordering_key, f"fields of keyFields ({self.key_fields})"
            )

    def ordering(self, core: SinkOptions) -> Ordering:
        """One write of an item out at a time, in input order: by ``orderingKey`` when
        set (key fields), else by the whole key."""
        return KeyOrder(key_reader(_fields(core.ordering_key) or self.keys))
