"""JSON entries of an Arrow record batch, encoded a column at a time (see ``json_rules``).

Each column becomes the JSON text of its values in one binary array, mostly inside
pyarrow: integers and decimals are cast to text, strings get their escapes by a few
replacements over the whole column, floats go through orjson as one numpy array,
timestamps are formatted by pyarrow in the contract's zone. Structs, lists and maps are
built from their children's text: a struct joins its fields element-wise, a list joins
its elements with ``pyarrow.compute.binary_join`` over the list's own offsets. The rows
are then joined from the columns, each followed by a comma, and kept as
``PackedEntries``: one buffer, no Python object per row.

Rare types whose text pyarrow cannot make (binary as base64, durations, calendar
intervals, variants) are converted value by value.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..entries.arrow_rows import JSON_FIELDS, JSON_TEXT, field_names, json_text_marker
from ..entries.packed import PackedEntries
from .errors import EntryEncodingError
from .instants import timestamp_texts
from .json_rules import JsonContract
from .text import duration_text, interval_text, variant_text

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["encode_batch", "encode_column"]

_ESCAPES = {byte: orjson.dumps(chr(byte))[1:-1].decode() for byte in (*range(0x20), 0x22, 0x5C)}
"""The bytes a JSON string escapes (controls, ``"``, ``\\``), and their escapes."""
_UNESCAPED = bytes(byte for byte in range(256) if byte not in _ESCAPES)
_BACKSLASH, _COMMA = 0x5C, 0x2C
_FIRST_DAY, _LAST_DAY = -719162, 2932896
"""Days since 1970-01-01 of 0001-01-01 and 9999-12-31."""

Text = tuple["pa.Array", bool]
"""A column's values as JSON bytes with no nulls, and whether each value is a string's
content that still has to be put between quotes (saves a pass for a top-level column)."""


def encode_batch(
    batch: pa.RecordBatch, contract: JsonContract, names: list[str] | None = None
) -> PackedEntries:
    """The JSON object of each row of ``batch``, keys ``names`` (the batch's own when
    omitted), as ``PackedEntries`` separated by commas.

    Raises:
        EntryEncodingError: a column holds a value the contract cannot write (text that
            is not UTF-8, a date beyond year 9999...), naming the column.
    """

    names = field_names(batch.schema) if names is None else names
    if batch.num_rows == 0:
        return PackedEntries(b"", [], [])
    if not names:
        return _packed(_repeat(b"{},", batch.num_rows))
    encode = _Encoder(contract)
    parts: list[bytes | Text] = []
    position = 0  # in names: a column of JSON text holds several fields
    for field, column in zip(batch.schema, batch.columns, strict=True):
        held = field.metadata.get(JSON_FIELDS) if field.metadata else None
        if held is not None:
            parts += [b"," if parts else b"{", encode.json_fields(column, field)]
            position += len(orjson.loads(held))
            continue
        name = names[position]
        position += 1
        parts += [b"," if parts else b"{", orjson.dumps(name) + b":"]
        parts.append(encode.column(column, name))
    if position != len(names):
        raise ValueError(f"{len(names)} names for the {position} fields of the batch")
    return _packed(_concat([*parts, b"},"]))


def _concat(parts: list[bytes | Text]) -> pa.Array:
    """The element-wise concatenation of literal bytes and columns' text, a column that
    is a string's content put between quotes by the literals around it (one pass)."""
    import pyarrow.compute as pc

    arguments: list[Any] = []
    literal = b""
    for part in parts:
        if isinstance(part, bytes):
            literal += part
            continue
        values, quoted = part
        arguments += [_bytes(literal + (b'"' if quoted else b"")), values]
        literal = b'"' if quoted else b""
    return pc.binary_join_element_wise(*arguments, _bytes(literal), _bytes(b""))


def encode_column(column: pa.Array, contract: JsonContract, name: str = "") -> pa.Array:
    """The JSON text of each value of ``column`` (``null`` for a missing one), as a
    binary array of the same length.

    Raises:
        EntryEncodingError: as ``encode_batch``.
    """

    return _Encoder(contract).text(column, name)


def _bytes(value: bytes) -> pa.Scalar:
    import pyarrow as pa

    return pa.scalar(value, pa.binary())


def _packed(joined: pa.Array) -> PackedEntries:
    """The values of a binary column that each end in a comma, as entries without it."""
    _validity, offsets, data = joined.buffers()
    bounds = np.frombuffer(offsets, np.int32, len(joined) + 1, joined.offset * 4)
    first = int(bounds[0])
    buffer = data.to_pybytes()[first : int(bounds[-1])]
    bounds = bounds - first
    return PackedEntries(buffer, bounds[:-1], bounds[1:] - 1)


class _Encoder:
    """Column encoders for one contract; ``path`` names the column (and the field inside
    it) in errors."""

    def __init__(self, contract: JsonContract) -> None:
        self.contract = contract

    def text(self, column: pa.Array, path: str) -> pa.Array:
        """Complete JSON text of each value (quotes included)."""
        values, quoted = self.column(column, path)
        if not quoted:
            return values
        import pyarrow.compute as pc

        quote = _bytes(b'"')
        return pc.binary_join_element_wise(quote, values, quote, _bytes(b""))

    def json_fields(self, column: pa.Array, field: pa.Field) -> Text:
        """The fields of a column of JSON text (``JSON_TEXT``): each object's text without
        its braces.

        Raises:
            EntryEncodingError: the text was made under another contract.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        marker = field.metadata[JSON_TEXT]
        own = json_text_marker(self.contract.utc, self.contract.decimal_as)
        if marker != own:
            raise EntryEncodingError(
                field.name, "JSON text", f"made under a contract ({marker.decode()}) other "
                f"than this encoder's ({own.decode()})",
            )  # fmt: skip
        if not pa.types.is_string(column.type):
            column = column.cast(pa.string())
        return pc.binary_slice(column.view(pa.binary()), 1, -1), False

    def column(self, column: pa.Array, path: str) -> Text:
        """The text of each value, a string's content left for the caller to quote."""
        import pyarrow as pa

        kind = column.type
        types = pa.types
        if types.is_dictionary(kind):
            return self.column(column.dictionary_decode(), path)
        if types.is_null(kind):
            return pa.nulls(len(column), pa.binary()).fill_null(b"null"), False
        if types.is_boolean(kind) or types.is_integer(kind):
            return _as_text(column), False
        if types.is_floating(kind):
            return _floats(column, path), False
        if types.is_decimal(kind):
            return self._decimals(column)
        if types.is_string(kind) or types.is_large_string(kind):
            return _strings(column, path)
        if types.is_binary(kind) or types.is_large_binary(kind) or types.is_fixed_size_binary(kind):
            return _each(column, lambda v: base64.b64encode(v).decode("ascii"))
        if types.is_date32(kind) or types.is_date64(kind):
            return _dates(column, path)
        if types.is_timestamp(kind):
            return _quoted(self._timestamps(column))
        if types.is_time(kind):
            return _quoted(_as_binary(column.cast(pa.time64("us"))))
        if types.is_duration(kind):
            return _each(column.cast(pa.duration("us")), duration_text)
        if kind == pa.month_day_nano_interval():
            return _each(column, interval_text)
        if types.is_struct(kind):
            if _is_variant(kind):
                return _variants(column, path), False
            return self._struct(column, path), False
        if types.is_map(kind):
            return self._map(column, path), False
        if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
            return self._list(column, path), False
        raise EntryEncodingError(path, str(kind), "the JSON contract has no form for this type")

    def _decimals(self, column: pa.Array) -> Text:
        if column.type.scale < 0:  # never Spark's; Python's text of the Decimal
            return _each(column, str) if self.contract.decimal_as == "string" else _raw(column)
        if self.contract.decimal_as == "string":
            return _quoted(_as_binary(column))
        return _as_text(column), False

    def _timestamps(self, column: pa.Array) -> pa.Array:
        """The content of each value's string (null for a missing one): RFC 3339, six
        decimals, with ``Z`` or the contract zone's offset; no offset for a timestamp
        without a zone (TIMESTAMP_NTZ)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = column.type
        if kind.unit != "us":
            column = column.cast(pa.timestamp("us", kind.tz))
        if kind.tz is None or self.contract.utc:
            suffix = b"" if kind.tz is None else b"Z"
            texts = timestamp_texts(column.cast(pa.int64()), suffix)
            if texts is not None:
                return texts
        if kind.tz is None:
            text = column.cast(pa.string())
        elif self.contract.utc:
            text = column.cast(pa.timestamp("us", "UTC")).cast(pa.string())
        else:
            zoned = column.cast(pa.timestamp("us", self.contract.time_zone))
            text = pc.strftime(zoned, format="%Y-%m-%d %H:%M:%S%z")
            text = pc.replace_substring_regex(text, r"([+-]\d\d)(\d\d)$", r"\1:\2")
        text = pc.replace_substring(text, " ", "T", max_replacements=1)
        return text.view(pa.binary())

    def _struct(self, column: pa.Array, path: str) -> pa.Array:

        kind = column.type
        if kind.num_fields == 0:
            return _where_valid(column, _repeat(b"{}", len(column)))
        children = column.flatten()  # sliced, with the struct's own nulls applied
        parts: list[bytes | Text] = []
        for index, child in enumerate(children):
            name = kind.field(index).name
            parts += [b"," if parts else b"{", orjson.dumps(name) + b":"]
            parts.append(self.column(child, _join(path, name)))
        return _where_valid(column, _concat([*parts, b"}"]))

    def _list(self, column: pa.Array, path: str) -> pa.Array:
        import pyarrow as pa

        kind = column.type
        if pa.types.is_fixed_size_list(kind):
            size = kind.list_size
            offsets = pa.array(np.arange(len(column) + 1, dtype=np.int32) * size)
            values = column.values.slice(column.offset * size, len(column) * size)
        else:
            offsets, values = _spans(column)
        texts = self.text(values, f"{path}[]")
        return _wrap_joined(column, offsets, texts, b"[", b"]")

    def _map(self, column: pa.Array, path: str) -> pa.Array:
        import pyarrow as pa

        kind = column.type
        key_type = kind.key_type
        if pa.types.is_nested(key_type):
            raise EntryEncodingError(
                path, str(kind), "a map key of a nested type has no JSON form: write "
                "to_json(key) as the key (transform_keys) before writing"
            )  # fmt: skip
        offsets, entries = _spans(column)
        keys: Text = self.column(entries.field(0), f"{path}{{}}")
        if not (pa.types.is_string(key_type) or pa.types.is_large_string(key_type)):
            keys = _as_json_key(self.text(entries.field(0), path)), False
        items = self.column(entries.field(1), f"{path}{{}}")
        pairs = _concat([keys, b":", items])
        return _wrap_joined(column, offsets, pairs, b"{", b"}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _spans(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list or map column's offsets from 0 and the child values they point into."""
    import pyarrow as pa

    offsets = column.offsets
    start, stop = offsets[0].as_py(), offsets[-1].as_py()
    if start:
        offsets = pa.compute.subtract(offsets, pa.scalar(start, offsets.type))
    return offsets, column.values.slice(start, stop - start)


def _wrap_joined(
    column: pa.Array, offsets: pa.Array, texts: pa.Array, open_: bytes, close: bytes
) -> pa.Array:
    """``open_`` + the texts of each list joined with commas + ``close``; ``null`` for a
    missing list."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_int64(offsets.type):
        texts = texts.cast(pa.large_binary())
        lists = pa.LargeListArray.from_arrays(offsets, texts)
        joined = pc.binary_join(lists, pa.scalar(b",", pa.large_binary())).cast(pa.binary())
    else:
        lists = pa.ListArray.from_arrays(offsets, texts)
        joined = pc.binary_join(lists, _bytes(b","))
    wrapped = pc.binary_join_element_wise(_bytes(open_), joined, _bytes(close), _bytes(b""))
    return _where_valid(column, wrapped)


def _where_valid(column: pa.Array, texts: pa.Array) -> pa.Array:
    """``texts``, with ``null`` where ``column`` has no value."""
    import pyarrow.compute as pc

    if column.null_count == 0:
        return texts
    return pc.if_else(column.is_valid(), texts, _bytes(b"null"))


def _repeat(value: bytes, count: int) -> pa.Array:
    import pyarrow as pa

    return pa.nulls(count, pa.binary()).fill_null(value)


def _as_binary(column: pa.Array) -> pa.Array:
    """pyarrow's text of each value, as bytes (null for a missing one)."""
    import pyarrow as pa

    return column.cast(pa.string()).view(pa.binary())


def _as_text(column: pa.Array) -> pa.Array:
    """pyarrow's text of each value, ``null`` for a missing one."""
    return _as_binary(column).fill_null(b"null")


def _quoted(content: pa.Array) -> Text:
    """Values that are the content of JSON strings: left for the row to quote when none
    is missing, else quoted here (``null`` for a missing one)."""
    import pyarrow.compute as pc

    if content.null_count == 0:
        return content, True
    quote = _bytes(b'"')
    return pc.binary_join_element_wise(quote, content, quote, _bytes(b"")).fill_null(b"null"), False


def _as_json_key(texts: pa.Array) -> pa.Array:
    """The JSON text of keys that are not strings, made JSON strings: a key written as a
    string already (a date) stays, any other (``1``, ``true``) is put between quotes."""
    import pyarrow.compute as pc

    quote = _bytes(b'"')
    starts_quoted = pc.starts_with(texts.cast("string"), '"')
    quoted = pc.binary_join_element_wise(quote, texts, quote, _bytes(b""))
    return pc.if_else(starts_quoted, texts, quoted)


def _each(column: pa.Array, convert: Callable[[Any], str]) -> Text:
    """String content made value by value by ``convert`` (rare types only)."""
    import pyarrow as pa

    texts = [None if value is None else convert(value) for value in column.to_pylist()]
    return _quoted(pa.array(texts, pa.string()).view(pa.binary()))


def _raw(column: pa.Array) -> Text:
    """JSON numbers made value by value from Python's text of each value."""
    import pyarrow as pa

    texts = [b"null" if value is None else str(value).encode() for value in column.to_pylist()]
    return pa.array(texts, pa.binary()), False


def _is_variant(kind: pa.StructType) -> bool:
    """Spark's variant: ``struct<value: binary, metadata: binary>`` whose ``metadata``
    field is marked ``variant``."""
    names = [kind.field(i).name for i in range(kind.num_fields)]
    return (
        names == ["value", "metadata"] and (kind.field(1).metadata or {}).get(b"variant") == b"true"
    )


def _variants(column: pa.Array, path: str) -> pa.Array:
    import pyarrow as pa

    texts = []
    for value in column.to_pylist():
        try:
            texts.append(b"null" if value is None else variant_text(value))
        except Exception as exc:
            raise EntryEncodingError(path, "variant", f"not a valid variant: {exc}") from exc
    return pa.array(texts, pa.binary())


def _dates(column: pa.Array, path: str) -> Text:
    import pyarrow as pa
    import pyarrow.compute as pc

    days = column.cast(pa.date32()).cast(pa.int32())
    bounds = pc.min_max(days)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and (low < _FIRST_DAY or high > _LAST_DAY):
        raise EntryEncodingError(path, "date", "a date outside the years 1 to 9999")
    return _quoted(_as_binary(column.cast(pa.date32())))


def _strings(column: pa.Array, path: str) -> Text:
    """Each string's UTF-8 bytes, with the bytes JSON escapes replaced by their escapes
    (backslashes first: the later escapes bring their own)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        column.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise EntryEncodingError(path, "string", f"text that is not UTF-8 ({exc})") from exc
    present = set(_value_bytes(column).translate(None, _UNESCAPED))
    for byte in sorted(present, key=lambda byte: byte != _BACKSLASH):
        column = pc.replace_substring(column, chr(byte), _ESCAPES[byte])
    if pa.types.is_large_string(column.type):
        column = column.cast(pa.string())
    return _quoted(column.view(pa.binary()))


def _value_bytes(column: pa.Array) -> bytes:
    """The bytes of a string column's values, all run together."""
    import pyarrow as pa

    _, offsets, data = column.buffers()
    if data is None:
        return b""
    width = 8 if pa.types.is_large_string(column.type) else 4
    ends = memoryview(offsets).cast("B")[column.offset * width :]
    first = int.from_bytes(ends[:width], "little", signed=True)
    last = int.from_bytes(ends[len(column) * width : (len(column) + 1) * width], "little")
    return memoryview(data)[first:last].tobytes()


def _floats(column: pa.Array, path: str) -> pa.Array:
    """orjson's shortest text of each value (a 32-bit float's own shortest text), the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, and ``null`` for a missing one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_float16(column.type):
        column = column.cast(pa.float32())
    values = column.to_numpy(zero_copy_only=False)  # missing values: NaN
    encoded = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)  # NaN, inf: null
    texts = _cut_at_commas(encoded[1:-1], len(column))
    finite = np.isfinite(values)
    if finite.all():
        return texts
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    for mask, text in (
        (np.isnan(values), b'"NaN"'),
        (np.isposinf(values), b'"Infinity"'),
        (np.isneginf(values), b'"-Infinity"'),
    ):
        mask &= valid
        if mask.any():
            texts = pc.if_else(pa.array(mask), _bytes(text), texts)
    return texts


def _cut_at_commas(inner: bytes, count: int) -> pa.Array:
    """The comma-separated values in ``inner`` (none holds a comma) as a binary array,
    made from its bytes without a Python object per value."""
    import pyarrow as pa

    commas = np.flatnonzero(np.frombuffer(inner, np.uint8) == _COMMA)
    if len(commas) != count - 1:
        raise AssertionError(f"{len(commas) + 1} numbers in the text of {count} floats")
    offsets = np.empty(count + 1, np.int64)
    offsets[0] = 0
    offsets[1:count] = commas - np.arange(count - 1)  # each value's start, commas removed
    offsets[count] = len(inner) - (count - 1)
    data = inner.replace(b",", b"")
    kind = pa.large_binary() if len(data) >= 2**31 else pa.binary()
    if kind == pa.binary():
        offsets = offsets.astype(np.int32)
    array = pa.Array.from_buffers(kind, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return array.cast(pa.binary())
