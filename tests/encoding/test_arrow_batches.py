"""Arrow record batches encoded a column at a time give the bytes the JSON contract
prescribes: the same as each row's Python values encoded alone, for every type."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct
from typing import Any

import orjson
import pyarrow as pa
import pytest

from asyncsink.encoding import (
    EntryEncodingError,
    JsonContract,
    JsonEntryEncoder,
    encode_batch,
    encode_column,
)
from asyncsink.entries.arrow_rows import ArrowRows

TRICKY = [
    "", "plain", ",", '","', '"', '\\"', "\\", 'x\\",', 'x",', '"},{"', "a,b", "é", "日本",
    "\U0001f600", "\x7f", "\u2028\u2029", "\\\\", 'q"\\n', "null", "tab\there", "\n\r\b\f",
    "".join(map(chr, range(32))),
]  # fmt: skip
UTC = dt.UTC

FLAT = [
    pa.string(), pa.large_string(), pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(),
    pa.float64(), pa.date32(), pa.decimal128(10, 2), pa.decimal128(38, 18), pa.decimal128(38, 0),
    pa.timestamp("us", "UTC"), pa.timestamp("us", "America/New_York"), pa.timestamp("us"),
    pa.binary(), pa.duration("us"), pa.time64("us"),
]  # fmt: skip
NESTED = [
    pa.list_(pa.int64()), pa.list_(pa.string()), pa.list_(pa.list_(pa.float64())),
    pa.struct([("id", pa.int64()), ("name", pa.string()), ("at", pa.timestamp("us", "UTC"))]),
    pa.map_(pa.string(), pa.string()), pa.map_(pa.int32(), pa.float64()),
    pa.map_(pa.date32(), pa.list_(pa.int8())), pa.list_(pa.struct([("x", pa.decimal128(12, 2))])),
]  # fmt: skip


def decoded(rng: random.Random) -> float:
    return float(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])


def value(rng: random.Random, kind: pa.DataType, depth: int = 0) -> Any:  # noqa: PLR0911
    if rng.random() < 0.15:
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "".join(rng.choice([*TRICKY, "abc", "x"]) for _ in range(rng.randrange(3)))
    if pa.types.is_boolean(kind):
        return rng.random() < 0.5
    if pa.types.is_integer(kind):
        bits = kind.bit_width - 1
        return rng.choice([-(2**bits), 2**bits - 1, 0, rng.randrange(-(2**bits), 2**bits)])
    if pa.types.is_floating(kind):
        special = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e16, 1e-7, 0.1, 5e-324]
        return rng.choice([*special, decoded(rng), rng.randrange(-(10**6), 10**6) / 100])
    if pa.types.is_date32(kind):
        edges = [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1899, 3, 4)]
        return rng.choice([*edges, dt.date(1, 1, 1) + dt.timedelta(rng.randrange(3652058))])
    if pa.types.is_decimal(kind):
        digits = rng.randrange(0, kind.precision + 1)
        unscaled = rng.randrange(-(10**digits) + 1, 10**digits) if digits else 0
        exact = decimal.Context(prec=80)
        return decimal.Decimal(unscaled).scaleb(-kind.scale, exact)
    if pa.types.is_timestamp(kind):
        micros = rng.choice([0, -1, rng.randrange(-(2**61), 2**61) // 10**4 * 10])
        micros = max(min(micros, 253402300799999999), -62135596800000000)
        instant = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=micros)
        return instant if kind.tz else instant.replace(tzinfo=None)
    if pa.types.is_binary(kind):
        return rng.randbytes(rng.randrange(5))
    if pa.types.is_duration(kind):
        return dt.timedelta(microseconds=rng.randrange(-(10**15), 10**15))
    if pa.types.is_time(kind):
        return dt.time(
            rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6)
        )
    if pa.types.is_list(kind):
        return [value(rng, kind.value_type, depth + 1) for _ in range(rng.randrange(4))]
    if pa.types.is_struct(kind):
        return {f.name: value(rng, f.type, depth + 1) for f in kind}
    if pa.types.is_map(kind):
        keys = {value(rng, kind.key_type) for _ in range(rng.randrange(4))} - {None}
        return [(k, value(rng, kind.item_type, depth + 1)) for k in keys]
    raise AssertionError(kind)


def random_batch(rng: random.Random, rows: int, types: list[pa.DataType]) -> pa.RecordBatch:
    names, columns = [], []
    for i in range(rng.randrange(1, 7)):
        kind = rng.choice(types)
        columns.append(pa.array([value(rng, kind) for _ in range(rows)], kind))
        names.append(rng.choice(["id", "v", 'q"k', "é", "a\nb", "", "\\"]) + str(i))
    return pa.RecordBatch.from_arrays(columns, names=names)


def per_row(data: pa.RecordBatch, encoder: JsonEntryEncoder) -> list[bytes]:
    return [encoder(dict(row)) for row in data.to_pylist(maps_as_pydicts="strict")]


@pytest.mark.parametrize("decimal_as", ["string", "number"])
@pytest.mark.parametrize("seed", range(30))
def test_a_batch_encodes_to_the_bytes_of_each_rows_values(seed: int, decimal_as: Any) -> None:
    rng = random.Random(seed)
    contract = JsonContract(decimal_as=decimal_as)
    data = random_batch(rng, rng.randrange(1, 40), FLAT + NESTED)
    encoder = JsonEntryEncoder(contract)
    entries = encode_batch(data, contract)
    assert entries == per_row(data, encoder)
    for entry in entries:
        orjson.loads(entry)  # each is valid JSON
    start = rng.randrange(data.num_rows)
    sliced = data.slice(start, rng.randrange(data.num_rows - start + 1))
    assert encode_batch(sliced, contract) == per_row(sliced, encoder)


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_timestamps_in_another_zone_carry_its_offset(zone: str) -> None:
    contract = JsonContract(time_zone=zone)
    instants = [dt.datetime(2024, 3, 10, 7, 30, 0, 123456, tzinfo=UTC), None]
    data = pa.RecordBatch.from_arrays([pa.array(instants, pa.timestamp("us", "UTC"))], ["t"])
    entries = encode_batch(data, contract)
    assert entries == per_row(data, JsonEntryEncoder(contract))
    text = orjson.loads(entries[0])["t"]
    assert dt.datetime.fromisoformat(text) == instants[0]
    assert text == ("2024-03-10T03:30:00.123456-04:00" if zone[0] == "A" and "York" in zone
                    else "2024-03-10T13:00:00.123456+05:30")  # fmt: skip


def test_the_contract_of_each_type() -> None:
    rows = {
        "f32": pa.array([0.1, float("nan"), None], pa.float32()),
        "f64": pa.array([-0.0, float("inf"), -float("inf")]),
        "ts": pa.array([dt.datetime(1899, 12, 31, 23, 59, 59, 5, tzinfo=UTC)] * 3,
                       pa.timestamp("us", "UTC")),
        "ntz": pa.array([dt.datetime(9999, 12, 31, 23, 59, 59, 999999)] * 3, pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal("-12.50")] * 3, pa.decimal128(38, 2)),
        "bin": pa.array([b"", b"\x00\xff", None]),
        "m": pa.array([[(1, "a")], [], None], pa.map_(pa.int32(), pa.string())),
        "st": pa.array([{"a": None, "b": [None]}] * 3,
                       pa.struct([("a", pa.int8()), ("b", pa.list_(pa.int8()))])),
        "iv": pa.array([(14, 25, 18367500000000)] * 3, pa.month_day_nano_interval()),
        "nul": pa.nulls(3),
    }  # fmt: skip
    data = pa.RecordBatch.from_arrays(list(rows.values()), list(rows))
    first, second, third = (orjson.loads(entry) for entry in encode_batch(data, JsonContract()))
    assert [first["f32"], second["f32"], third["f32"]] == [0.1, "NaN", None]
    assert [first["f64"], second["f64"], third["f64"]] == [-0.0, "Infinity", "-Infinity"]
    assert first["ts"] == "1899-12-31T23:59:59.000005Z"
    assert first["ntz"] == "9999-12-31T23:59:59.999999"
    assert encode_batch(data, JsonContract())[0].count(b'"dec":-12.50,') == 1
    assert [first["bin"], second["bin"], third["bin"]] == ["", "AP8=", None]
    assert [first["m"], second["m"], third["m"]] == [{"1": "a"}, {}, None]
    assert first["st"] == {"a": None, "b": [None]}
    assert first["iv"] == "P14M25DT18367.5S" and first["nul"] is None


def test_text_that_is_not_utf8_is_refused_naming_the_column() -> None:
    offsets = pa.py_buffer(struct.pack("<3i", 0, 1, 3))
    text = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"a\xff\xfe")])
    data = pa.RecordBatch.from_arrays([text], ["s"])
    with pytest.raises(EntryEncodingError, match="field 's'.*not UTF-8"):
        encode_batch(data, JsonContract())


def test_a_bad_row_is_found_alone_and_the_others_encode_as_in_their_batch() -> None:
    offsets = pa.py_buffer(struct.pack("<4i", 0, 1, 3, 4))
    text = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"a\xff\xfeb")])
    rows = ArrowRows(pa.RecordBatch.from_arrays([text], ["s"]))
    encoder = JsonEntryEncoder()
    with pytest.raises(EntryEncodingError):
        encoder.encode_all(rows)
    one = ArrowRows(pa.RecordBatch.from_arrays([pa.array(["a", "b"])], ["s"]))
    assert [encoder(row) for row in one] == [b'{"s":"a"}', b'{"s":"b"}']


def test_a_batch_is_encoded_once_for_all_its_slices() -> None:
    encoder = JsonEntryEncoder()
    data = random_batch(random.Random(1), 1000, FLAT)
    rows = ArrowRows(data)
    out: list[bytes] = []
    for start in range(0, len(rows), 300):
        out += encoder.encode_all(rows[start : start + 300])
    assert out == encode_batch(data, JsonContract())
    assert [encoder(row) for row in rows[:5]] == out[:5]


def test_an_empty_batch_has_no_entries() -> None:
    data = pa.RecordBatch.from_arrays([pa.array([], pa.string())], ["s"])
    assert encode_batch(data, JsonContract()) == []
    assert JsonEntryEncoder().encode_all(ArrowRows(data)) == []


def test_a_column_alone_and_an_unknown_time_zone() -> None:
    column = pa.array([[1, None], None], pa.list_(pa.int64()))
    assert encode_column(column, JsonContract()).to_pylist() == [b"[1,null]", b"null"]
    with pytest.raises(ValueError, match="Mars/Olympus"):
        JsonContract(time_zone="Mars/Olympus")
