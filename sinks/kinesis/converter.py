"""From an input row to a Kinesis record: payload bytes, partition key, explicit hash key.

Rows are Spark ``Row`` objects (recognised by their ``asDict`` method, so Spark is never
imported here), dicts or other mappings. A row that cannot become a record raises
``ValueError`` or ``TypeError`` naming the field and the reason; the writer reports it as
a bad record at the row's position.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asyncsink.encoding import JsonEntryEncoder
from asyncsink.entries.arrow_rows import ArrowRows
from asyncsink.entries.rows import fields_of

from .options import MAX_PARTITION_KEY_LENGTH, KinesisOptions

__all__ = ["KinesisEntry", "RecordConverter", "as_mapping"]

_MAX_HASH_KEY = 2**128


@dataclass(frozen=True, slots=True)
class KinesisEntry:
    """One Kinesis record: its data, its partition key and, optionally, an explicit hash
    key (a decimal integer in [0, 2^128) that picks the shard instead of the key's hash)."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None = None

    @property
    def size(self) -> int:
        """Bytes as Kinesis counts them against its limits: data plus partition key."""
        return len(self.data) + len(self.partition_key.encode("utf-8"))

    def to_request(self) -> dict[str, Any]:
        """The record as a PutRecords ``Records`` member."""
        record: dict[str, Any] = {"Data": self.data, "PartitionKey": self.partition_key}
        if self.explicit_hash_key is not None:
            record["ExplicitHashKey"] = self.explicit_hash_key
        return record


def as_mapping(element: Any) -> Mapping[str, Any]:
    """A Spark ``Row`` (anything with ``asDict``) or a mapping, as a mapping.

    Raises:
        TypeError: the element is neither.
    """
    if type(element) is dict:
        return element
    if callable(getattr(element, "asDict", None)):
        result = fields_of(element)
        if isinstance(result, Mapping):
            return result
    if isinstance(element, Mapping):
        return element
    raise TypeError(f"expected a Row, a dict or a mapping, got {type(element).__name__}")


def _field(row: Mapping[str, Any], name: str, role: str) -> Any:
    try:
        return row[name]
    except KeyError:
        names = ", ".join(list(map(str, row))[:20]) or "none"
        raise ValueError(f"{role} field {name!r} is missing (the row's fields: {names})") from None


def _payload_hash(data: bytes) -> str:
    """The partition key of ``partitionKeyMode=hash``: a digest of the record's data, the
    same on every replay of the row."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _spread_key(position: int, data: bytes) -> str:
    """The partition key of ``partitionKeyMode=random``: a digest of the record's position
    in the writer's input (``AsyncSinkWriter.entry_position``) and its data. Keys spread
    over the shards as random ones would, equal payloads included, and a retried task that
    replays its rows keys them as before, so that reconciling finds what a lost attempt
    stored."""
    return hashlib.blake2b(data, digest_size=16, salt=position.to_bytes(16, "little")).hexdigest()


def _key_text(value: Any, what: str) -> str:
    if value is None:
        raise ValueError(f"{what} is null")
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} is binary that is not UTF-8 text") from exc
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"{what} holds {type(value).__name__}; expected text, a number or a date")


class RecordConverter:
    """Turns input elements into ``KinesisEntry`` records as ``KinesisOptions`` say."""

    def __init__(self, options: KinesisOptions) -> None:
        self._mode = options.resolved_partition_key_mode
        self._key_fields = options.key_fields
        self._fixed_key = options.partition_key or ""
        self._key_fn: Callable[[Any], Any] | None = options.partition_key_fn
        self._hash_key_field = options.explicit_hash_key_field
        self._payload_field = options.payload_field
        self.json = JsonEntryEncoder(options.contract)
        """The row's data: its JSON under the contract (``asyncsink.encoding``)."""

    def __call__(self, element: Any, position: int = 0) -> KinesisEntry:
        """The record for ``element``, at ``position`` in the writer's input.

        Raises:
            ValueError, TypeError: the element cannot become a record; the message names
                the field and the reason.
        """
        row = as_mapping(element)
        data = self._payload(row)
        key = self._partition_key(element, row, data, position)
        if not 1 <= len(key) <= MAX_PARTITION_KEY_LENGTH:
            raise ValueError(
                f"the partition key has {len(key)} characters; Kinesis takes 1 to "
                f"{MAX_PARTITION_KEY_LENGTH}"
            )
        hash_key = self._explicit_hash_key(row) if self._hash_key_field else None
        return KinesisEntry(data, key, hash_key)

    def convert_all(self, elements: Sequence[Any]) -> list[KinesisEntry] | None:
        """The records of a run at once, the same as ``__call__`` gives each, when the
        options are the common ones (the row as JSON; a partition key from one field of
        text or integers, fixed, or the payload's hash; no explicit hash key) and the run
        is plain dicts or the rows of an Arrow record batch (``ArrowRows``: encoded a
        column at a time); ``None`` when they are not, or when a row needs a closer look
        (then ``__call__`` on each finds which, and why)."""
        mode = self._mode
        common = mode in ("fixed", "hash") or (mode == "field" and len(self._key_fields) == 1)
        if not common or self._payload_field is not None or self._hash_key_field is not None:
            return None
        if isinstance(elements, ArrowRows):
            return self._convert_arrow(elements)
        rows = elements if type(elements) is list else list(elements)  # each dict built once
        if any(type(row) is not dict for row in rows):
            return None
        try:
            datas = list(self.json.encode_all(rows))
        except TypeError:
            return None  # a value with no JSON form: each row says which
        if mode == "field":
            values = [row.get(self._key_fields[0]) for row in rows]
        return self._entries(datas, values if mode == "field" else None)

    def _convert_arrow(self, rows: ArrowRows) -> list[KinesisEntry] | None:
        try:
            datas = list(self.json.encode_all(rows))
        except TypeError:
            return None
        values = None
        if self._mode == "field":
            name = self._key_fields[0]
            if name not in rows.names:
                return None
            values = rows.batch.column(rows.names.index(name)).to_pylist()
        return self._entries(datas, values)

    def _entries(self, datas: list[bytes], values: list[Any] | None) -> list[KinesisEntry] | None:
        """Records of ``datas``, keyed as the mode says (``values``: the key field's)."""
        mode = self._mode
        if mode == "fixed":
            keys = [self._fixed_key] * len(datas)
        elif mode == "hash":
            keys = list(map(_payload_hash, datas))
        else:
            assert values is not None
            if not all(type(value) is str or type(value) is int for value in values):
                return None  # missing, null, or a type that needs converting
            keys = [value if type(value) is str else str(value) for value in values]
            if not all(0 < len(key) <= MAX_PARTITION_KEY_LENGTH for key in keys):
                return None
        return [KinesisEntry(data, key) for data, key in zip(datas, keys, strict=True)]

    def _payload(self, row: Mapping[str, Any]) -> bytes:
        name = self._payload_field
        if name is None:
            return self.json(row)
        value = _field(row, name, "payload")
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        if value is None:
            raise ValueError(f"payload field {name!r} is null")
        raise TypeError(
            f"payload field {name!r} holds {type(value).__name__}; expected bytes or text"
        )

    def _partition_key(
        self, element: Any, row: Mapping[str, Any], data: bytes, position: int
    ) -> str:
        mode = self._mode
        if mode == "hash":
            return _payload_hash(data)
        if mode == "field":
            return "|".join(
                _key_text(_field(row, name, "partition key"), f"partition key field {name!r}")
                for name in self._key_fields
            )
        if mode == "fixed":
            return self._fixed_key
        if mode == "random":
            return _spread_key(position, data)
        assert self._key_fn is not None
        return _key_text(self._key_fn(element), "the partition key from partitionKeyFn")

    def _explicit_hash_key(self, row: Mapping[str, Any]) -> str:
        name = self._hash_key_field
        assert name is not None
        value = _field(row, name, "explicit hash key")
        what = f"explicit hash key field {name!r}"
        if isinstance(value, str) and value.isascii() and value.isdigit():
            number = int(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, decimal.Decimal) and value == value.to_integral_value():
            number = int(value)
        else:
            raise ValueError(f"{what} holds {value!r}; expected a decimal integer")
        if not 0 <= number < _MAX_HASH_KEY:
            raise ValueError(f"{what} holds {number}, outside [0, 2^128)")
        return str(number)
