"""JSON entries of the rows of an Arrow record batch, encoded a column at a time.

``JsonEntryEncoder`` encodes a row's dict with one ``orjson.dumps``; building the dicts of
a record batch (``batch.to_pylist()``) costs more than encoding them. Here each column is
turned into the JSON of its values at once, mostly inside pyarrow, and the entries are
joined from the columns row by row (``pyarrow.compute.binary_join_element_wise``): the
field names are encoded once, and no dict is built. Each row's JSON is followed by a
comma, so the joined column's data is the batch's entries laid end to end, and they are
kept there as ``PackedEntries``: no object per row.

The promise is exactness: an entry is the very bytes ``JsonEntryEncoder`` gives for the
row's dict, or there is no answer (``None``) and the caller encodes the dicts. How each
column keeps it:

- integers and booleans: pyarrow's text of the value is orjson's (``-12``, ``true``).
- strings: the UTF-8 bytes of the value between quotes, with each byte orjson escapes
  (``"``, ``\\`` and the controls below 0x20; it escapes nothing else) replaced by the
  escape orjson gives it, one pyarrow replacement per such byte found in the column.
- floats: orjson's encoding of the column as one numpy array of float64 (the floats
  ``to_pylist`` gives, float32 values widened; NaN, infinities and missing values are
  all ``null``), cut at the commas: a number's JSON holds none, and the count of parts
  is checked.
- dates within Python's years 1-9999: pyarrow's ISO text (``"2024-02-29"``); beyond them
  a row has no dict, and there is no answer.
- decimals: pyarrow's text, which is ``str(Decimal)`` of the value ``to_pylist`` gives
  (``"12.50"``, ``"1E-7"``; the bare number with ``decimal_as="number"``): both follow
  the same rule for an exponent, checked over every precision and scale Spark has. A
  negative scale (never Spark's) goes through orjson and the encoder's ``default``, one
  call per column cut at the commas.
- no answer for field names that repeat or are not text, or a column of any other type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import orjson

from asyncsink.arrow_rows import ArrowRows
from asyncsink.packed import PackedEntries

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowJsonEntries", "encode_batch"]

_ESCAPES = {byte: orjson.dumps(chr(byte))[1:-1].decode() for byte in (*range(0x20), 0x22, 0x5C)}
"""The bytes orjson escapes in a string (controls, ``"``, ``\\``), and their escapes."""
_UNESCAPED = bytes(byte for byte in range(256) if byte not in _ESCAPES)
_BACKSLASH, _COMMA = 0x5C, 0x2C

_FIRST_DAY, _LAST_DAY = -719162, 2932896
"""Days since 1970-01-01 of ``date(1, 1, 1)`` and ``date(9999, 12, 31)``."""

Default = Callable[[Any], Any]
Column = tuple["pa.Array", bool]
"""A column's values as JSON bytes (no nulls), and whether each is a string's content
the row still has to put between quotes."""


class ArrowJsonEntries:
    """The JSON entries of ``ArrowRows``, each record batch encoded whole, once.

    A writer converts the rows of a batch a slice at a time; the first slice of a batch
    encodes all of it (pyarrow's calls cost the same for 500 rows as for 10,000), and
    the batch's entries are kept until its last slice takes its share.

    Args:
        decimal_as: how ``JsonEntryEncoder`` writes decimals (``"string"``, ``"number"``).
        default: the encoder's ``default`` for orjson (turns a ``Decimal`` into JSON).
    """

    def __init__(self, *, decimal_as: Literal["string", "number"], default: Default) -> None:
        self.decimal_as = decimal_as
        self.default = default
        self._source: ArrowRows | None = None
        self._entries: PackedEntries | None = None

    def __call__(self, rows: ArrowRows) -> Sequence[bytes] | None:
        """The entry of each row, or ``None`` when their exactness is not proven."""
        source, start = rows.source, rows.start
        if source is not self._source:
            self._source = source
            self._entries = encode_batch(
                source.batch, decimal_as=self.decimal_as, default=self.default
            )
        entries, stop = self._entries, start + len(rows)
        if stop == len(source):  # the batch's last rows: let it go
            self._source = self._entries = None
        return None if entries is None else entries[start:stop]


def encode_batch(
    batch: pa.RecordBatch, *, decimal_as: Literal["string", "number"], default: Default
) -> PackedEntries | None:
    """The JSON entry of each row of ``batch`` (see the module docstring), or ``None``."""
    import pyarrow as pa

    names = batch.schema.names
    if not names or len(set(names)) != len(names):
        return None
    if batch.num_rows == 0:
        return PackedEntries(b"", [], [])
    try:
        return _encode(batch, names, decimal_as, default)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # the dicts' encoding says what is wrong, if anything


def _encode(
    batch: pa.RecordBatch, names: list[str], decimal_as: str, default: Default
) -> PackedEntries | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    arguments: list[Any] = []
    literal = b"{"
    for name, column in zip(names, batch.columns, strict=True):
        if not isinstance(name, str):
            return None
        encoded = _column(column, decimal_as, default)
        if encoded is None:
            return None
        values, quoted = encoded
        quote = b'"' if quoted else b""
        arguments += [pa.scalar(literal + orjson.dumps(name) + b":" + quote, pa.binary()), values]
        literal = quote + b","
    arguments += [pa.scalar(literal[:-1] + b"},", pa.binary()), pa.scalar(b"", pa.binary())]
    joined = pc.binary_join_element_wise(*arguments)
    if joined.null_count:
        return None
    return _packed(joined)


def _packed(joined: pa.Array) -> PackedEntries:
    """The rows of a binary column whose every value ends in a comma, as the entries
    before those commas."""
    import numpy as np

    _validity, offsets, data = joined.buffers()
    bounds = np.frombuffer(offsets, np.int32, len(joined) + 1, joined.offset * 4)
    first = int(bounds[0])
    buffer = data.to_pybytes()[first : int(bounds[-1])]
    bounds = bounds - first
    return PackedEntries(buffer, bounds[:-1], bounds[1:] - 1)


def _column(column: pa.Array, decimal_as: str, default: Default) -> Column | None:
    import pyarrow as pa

    kind = column.type
    if pa.types.is_boolean(kind) or pa.types.is_signed_integer(kind):
        return _as_text(column), False
    if pa.types.is_float32(kind) or pa.types.is_float64(kind):
        return _floats(column, default)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _strings(column)
    if pa.types.is_date32(kind):
        return _dates(column)
    if pa.types.is_decimal128(kind):
        if kind.scale < 0:
            return _through_orjson(column, default)
        return _quoted(_as_binary(column)) if decimal_as == "string" else (_as_text(column), False)
    return None


def _as_binary(column: pa.Array) -> pa.Array:
    """pyarrow's text of each value, as bytes (null for a missing one)."""
    import pyarrow as pa

    return column.cast(pa.string()).view(pa.binary())


def _as_text(column: pa.Array) -> pa.Array:
    """pyarrow's text of each value, ``null`` for a missing one."""
    return _as_binary(column).fill_null(b"null")


def _quoted(content: pa.Array) -> Column:
    """Values that are the content of JSON strings: left for the row to quote when none
    is missing, else quoted here (``null`` for a missing one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if content.null_count == 0:
        return content, True
    quote, nothing = pa.scalar(b'"', pa.binary()), pa.scalar(b"", pa.binary())
    return pc.binary_join_element_wise(quote, content, quote, nothing).fill_null(b"null"), False


def _dates(column: pa.Array) -> Column | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    bounds = pc.min_max(column.cast(pa.int32()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and (low < _FIRST_DAY or high > _LAST_DAY):
        return None  # no Python date: the row has no dict to compare with
    return _quoted(_as_binary(column))


def _strings(column: pa.Array) -> Column:
    """Each string's UTF-8 bytes, with the bytes orjson escapes replaced by its escapes
    (backslashes first: the later escapes bring their own)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column.validate(full=True)  # raises on bytes that are not UTF-8 (no str for them)
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


def _floats(column: pa.Array, default: Default) -> Column | None:
    """orjson's text of the Python float of each value (float32 values widened, as
    ``to_pylist`` does), ``null`` for NaN, infinities and missing values."""
    import pyarrow as pa

    try:
        import numpy as np
    except ImportError:
        return _through_orjson(column, default)
    if pa.types.is_float32(column.type):
        column = column.cast(pa.float64())
    values = column.to_numpy(zero_copy_only=False)  # missing values: NaN
    encoded = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    cut = _cut_at_commas(encoded[1:-1], len(column), np)
    return None if cut is None else (cut, False)


def _through_orjson(column: pa.Array, default: Default) -> Column | None:
    """orjson's encoding of the column's Python values, cut at the commas between them:
    for values whose JSON holds no comma (numbers, ``null``, decimals' text)."""
    import pyarrow as pa

    parts = orjson.dumps(column.to_pylist(), default=default)[1:-1].split(b",")
    if len(parts) != len(column):
        return None
    return pa.array(parts, pa.binary()), False


def _cut_at_commas(inner: bytes, count: int, np: Any) -> pa.Array | None:
    """The comma-separated values in ``inner`` (none holds a comma) as a binary array,
    made from its bytes without a Python object per value; ``None`` if the count of
    values is not ``count``."""
    import pyarrow as pa

    commas = np.flatnonzero(np.frombuffer(inner, np.uint8) == _COMMA)
    if len(commas) != count - 1 or len(inner) >= 2**31:
        return None
    offsets = np.empty(count + 1, np.int32)
    offsets[0] = 0
    offsets[1:count] = commas - np.arange(count - 1)  # each value's start, commas removed
    offsets[count] = len(inner) - (count - 1)
    data = inner.replace(b",", b"")
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
