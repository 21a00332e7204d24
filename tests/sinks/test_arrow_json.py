"""Arrow record batches encoded a column at a time give the very bytes each row's dict
gives ``JsonEntryEncoder``, or no answer at all."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct
from typing import Any

import pyarrow as pa
import pytest

from asyncsink import PackedEntries
from asyncsink.arrow_rows import ArrowRows
from asyncsink.sinks.http import JsonEntryEncoder, arrow_json
from asyncsink.sinks.http.arrow_json import ArrowJsonEntries, encode_batch

TRICKY = [
    "", "plain", ",", '","', '"', '\\"', "\\", 'x\\",', 'x",', '"},{"', "a,b", "é", "日本",
    "\U0001f600", "\x7f", "\u2028\u2029", "\\\\", 'q"\\n', "null", "tab\there", "\n\r\b\f",
    "".join(map(chr, range(32))),
]  # fmt: skip

SPARK_TYPES = [
    pa.string(), pa.large_string(), pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(),
    pa.float32(), pa.float64(), pa.date32(), pa.decimal128(10, 2), pa.decimal128(38, 18),
    pa.decimal128(5, 0), pa.decimal128(18, 6), pa.decimal128(12, 7), pa.decimal128(38, 0),
]  # fmt: skip


def decoded(rng: random.Random) -> float:
    return float(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])


def value(rng: random.Random, kind: pa.DataType) -> Any:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if rng.random() < 0.5:
            return rng.choice(TRICKY)
        return "".join(rng.choice([*TRICKY, "abc", "x", " "]) for _ in range(rng.randrange(4)))
    if pa.types.is_boolean(kind):
        return rng.random() < 0.5
    if pa.types.is_integer(kind):
        bits = kind.bit_width - 1
        return rng.choice([-(2**bits), 2**bits - 1, 0, -1, rng.randrange(-(2**bits), 2**bits)])
    if pa.types.is_floating(kind):
        special = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e16, 1e-7, 0.1, 5e-324]
        number = rng.choice([*special, decoded(rng), rng.randrange(-(10**6), 10**6) / 100])
        if kind == pa.float32() and abs(number) < 3e38:  # NaN and infinities stay
            return float(struct.unpack("<f", struct.pack("<f", number))[0])
        return number
    if pa.types.is_date32(kind):
        edges = [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(999, 3, 4), dt.date(1970, 1, 1)]
        return rng.choice([*edges, dt.date(1, 1, 1) + dt.timedelta(rng.randrange(3652058))])
    if pa.types.is_decimal(kind):
        digits = rng.randrange(0, kind.precision + 1)
        unscaled = rng.randrange(-(10**digits) + 1, 10**digits) if digits else 0
        edges = [0, 1, -1, 10**kind.precision - 1, -(10**kind.precision) + 1]
        exact = decimal.Context(prec=80)
        return decimal.Decimal(rng.choice([unscaled, unscaled, *edges])).scaleb(-kind.scale, exact)
    raise AssertionError(kind)


def random_batch(rng: random.Random, rows: int) -> pa.RecordBatch:
    names, columns = [], []
    for i in range(rng.randrange(1, 7)):
        kind = rng.choice(SPARK_TYPES)
        missing = rng.choice([0.0, 0.0, 0.3, 1.0])
        values = [None if rng.random() < missing else value(rng, kind) for _ in range(rows)]
        columns.append(pa.array(values, kind))
        names.append(rng.choice(["id", "v", 'q"k', "é", "a\nb", "", "\\"]) + str(i))
    return pa.RecordBatch.from_arrays(columns, names=names)


def per_row(data: pa.RecordBatch, encoder: JsonEntryEncoder) -> list[bytes]:
    return [encoder(row) for row in data.to_pylist()]


@pytest.mark.parametrize("decimal_as", ["string", "number"])
@pytest.mark.parametrize("seed", range(60))
def test_a_batch_encodes_to_the_bytes_of_each_row_alone(seed: int, decimal_as: Any) -> None:
    rng = random.Random(seed)
    data = random_batch(rng, rng.choice([1, 2, 7, 300]))
    encoder = JsonEntryEncoder(decimal_as=decimal_as)
    entries = encode_batch(data, decimal_as=decimal_as, default=encoder._default)
    assert entries is not None  # every column type Spark reads through Arrow has a way
    assert entries == per_row(data, encoder)
    assert isinstance(entries, PackedEntries)  # no object per row: one buffer
    assert entries.joined() == b",".join(per_row(data, encoder))
    start = rng.randrange(data.num_rows)
    sliced = data.slice(start, rng.randrange(data.num_rows - start + 1))
    assert encode_batch(sliced, decimal_as=decimal_as, default=encoder._default) == per_row(
        sliced, encoder
    )


@pytest.mark.parametrize("kind", SPARK_TYPES, ids=str)
def test_each_type_with_missing_values_everywhere(kind: pa.DataType) -> None:
    rng = random.Random(str(kind))
    for pattern in ([None], [None, None], ["v", None], [None, "v"], ["v", None, "v"], ["v"]):
        values = [value(rng, kind) if slot else None for slot in pattern]
        data = pa.RecordBatch.from_arrays([pa.array(values, kind)], names=["x"])
        for decimal_as in ("string", "number"):
            encoder = JsonEntryEncoder(decimal_as=decimal_as)  # type: ignore[arg-type]
            assert encoder.encode_all(ArrowRows(data)) == per_row(data, encoder)


def test_strings_needing_every_escape_and_none() -> None:
    texts = [chr(c) for c in range(0x80)] + TRICKY + ["x" * 1000, "é" * 3]
    for values in (texts, [t for t in texts if t.isalnum()], [*texts, None]):
        data = pa.RecordBatch.from_arrays([pa.array(values), pa.array(values)], ["a", "b"])
        encoder = JsonEntryEncoder()
        assert encode_batch(data, decimal_as="string", default=encoder._default) == per_row(
            data, encoder
        )


@pytest.mark.parametrize("decimal_as", ["string", "number"])
def test_decimals_of_every_precision_and_scale(decimal_as: Any) -> None:
    rng = random.Random(7)
    encoder = JsonEntryEncoder(decimal_as=decimal_as)
    kinds = [pa.decimal128(p, s) for p in range(1, 39) for s in range(0, p + 1, 3)]
    kinds += [pa.decimal128(5, -2), pa.decimal128(20, -3)]  # never Spark's: through orjson
    for kind in kinds:
        values = [value(rng, kind) for _ in range(40)] + [None]
        data = pa.RecordBatch.from_arrays([pa.array(values, kind)], ["d"])
        entries = encode_batch(data, decimal_as=decimal_as, default=encoder._default)
        assert entries == per_row(data, encoder), kind


def test_a_value_faking_a_separator_still_encodes_exactly() -> None:
    # cut at '","', orjson's column would give 'x\\' and ',"next': the right count, wrong cut
    data = pa.RecordBatch.from_arrays([pa.array(['x",', "next", "a\\", ""])], ["s"])
    encoder = JsonEntryEncoder()
    assert encoder.encode_all(ArrowRows(data)) == per_row(data, encoder)


@pytest.mark.parametrize(
    "data",
    [
        pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], ["a", "a"]),
        pa.RecordBatch.from_arrays([pa.array([dt.datetime(2024, 1, 1)])], ["t"]),
        pa.RecordBatch.from_arrays([pa.array([b"\x00"])], ["bin"]),
        pa.RecordBatch.from_arrays([pa.array([[1, 2]])], ["list"]),
        pa.RecordBatch.from_arrays([pa.array([{"x": 1}])], ["struct"]),
        pa.RecordBatch.from_arrays([pa.array([1], pa.uint8())], ["u"]),
        pa.RecordBatch.from_arrays([pa.array([None], pa.null())], ["nothing"]),
        pa.RecordBatch.from_arrays([pa.array([1.5], pa.float16())], ["half"]),
        pa.RecordBatch.from_arrays([pa.array([decimal.Decimal(1)], pa.decimal256(40, 0))], ["d"]),
        pa.RecordBatch.from_arrays([pa.array([1], pa.int64()), pa.array([dt.time(1)])], ["a", "t"]),
    ],  # fmt: skip
    ids=lambda data: ",".join(f"{f.name}:{f.type}" for f in data.schema),
)
def test_no_answer_without_proof_and_the_dicts_are_encoded(data: pa.RecordBatch) -> None:
    encoder = JsonEntryEncoder()
    assert encode_batch(data, decimal_as="string", default=encoder._default) is None
    assert encoder.encode_all(ArrowRows(data)) == per_row(data, encoder)


def test_dates_python_cannot_hold_give_no_answer() -> None:
    days = pa.array([0, 2932897], pa.int32()).cast(pa.date32())
    data = pa.RecordBatch.from_arrays([days], ["day"])
    assert encode_batch(data, decimal_as="string", default=str) is None
    with pytest.raises(OverflowError):
        data.to_pylist()  # and the dicts cannot be built either: the writer reports it


def test_rows_of_a_sliced_column_are_packed_from_its_own_offsets() -> None:
    column = pa.array([b"{1},", b"{22},", b"{333},", b"{4444},", b"{5},"], pa.binary())
    for start, stop in ((0, 5), (1, 4), (3, 5), (2, 2)):
        packed = arrow_json._packed(column.slice(start, stop - start))
        expected = [value[:-1] for value in column.to_pylist()[start:stop]]
        assert packed == expected and packed.sizes() == [len(e) for e in expected]
        assert packed.joined() == b",".join(expected)


def test_an_empty_batch_has_no_entries() -> None:
    data = pa.RecordBatch.from_arrays([pa.array([], pa.string())], ["s"])
    assert encode_batch(data, decimal_as="string", default=str) == []
    assert JsonEntryEncoder().encode_all(ArrowRows(data)) == []


def test_a_batch_is_encoded_once_for_all_its_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counting(data: pa.RecordBatch, **settings: Any) -> list[bytes] | None:
        calls.append(data.num_rows)
        return encode_batch(data, **settings)

    monkeypatch.setattr(arrow_json, "encode_batch", counting)
    encoder = JsonEntryEncoder()
    first = random_batch(random.Random(1), 1000)
    second = random_batch(random.Random(2), 10)
    out: list[bytes] = []
    for data in (first, second):
        rows = ArrowRows(data)
        for start in range(0, len(rows), 300):
            out += encoder.encode_all(rows[start : start + 300])
    assert calls == [1000, 10]
    assert out == per_row(first, encoder) + per_row(second, encoder)
    again = ArrowRows(first)  # another batch object: encoded anew
    assert encoder.encode_all(again[:5]) == per_row(first, encoder)[:5] and calls[-1] == 1000


def test_entries_keep_the_batch_only_until_its_last_slice() -> None:
    entries = ArrowJsonEntries(decimal_as="string", default=str)
    rows = ArrowRows(random_batch(random.Random(3), 20))
    assert entries(rows[:10]) is not None and entries._source is rows
    assert entries(rows[10:]) is not None and entries._source is None


def test_strings_that_are_not_utf8_give_no_answer() -> None:
    offsets = pa.py_buffer(struct.pack("<3i", 0, 1, 3))
    text = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"a\xff\xfe")])
    data = pa.RecordBatch.from_arrays([text], ["s"])
    assert encode_batch(data, decimal_as="string", default=str) is None
    with pytest.raises(UnicodeDecodeError):
        data.to_pylist()  # no dict, no entry: the writer reports the row
