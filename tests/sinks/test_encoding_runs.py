"""A run of rows encoded at once gives the very bytes each row gives alone."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
from typing import Any

import pytest

from asyncsink.encoding import JsonContract, JsonEntryEncoder

TRICKY_STRINGS = ["", "plain", "}", "{", "},{", '"},{"', "a},{b", "}}", "{{", 'é\n\t"q"', "\\"]


def value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(12 if depth < 2 else 9)
    if kind == 0:
        return rng.choice(TRICKY_STRINGS)
    if kind == 1:
        return rng.randrange(-(2**62), 2**62)
    if kind == 2:
        return rng.choice([0.5, -1e300, float("nan"), float("inf"), 3.0])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return decimal.Decimal(rng.choice(["12.50", "-0.01", "1E+3"]))
    if kind == 5:
        return dt.date(2024, 2, 29)
    if kind == 6:
        return dt.datetime(2024, 2, 29, 12, 30, tzinfo=dt.UTC)
    if kind in (7, 8):
        return f"s{rng.randrange(1000)}" + rng.choice(TRICKY_STRINGS)
    if kind == 9:
        return {f"k{i}": value(rng, depth + 1) for i in range(rng.randrange(3))}
    if kind == 10:
        return [value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {}


def rows(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{f"c{i}": value(rng) for i in range(rng.randrange(4))} for _ in range(count)]


@pytest.mark.parametrize("decimal_as", ["string", "number"])
@pytest.mark.parametrize("seed", range(40))
def test_a_run_encodes_to_the_bytes_of_each_row_alone(seed: int, decimal_as: Any) -> None:
    encoder = JsonEntryEncoder(JsonContract(decimal_as=decimal_as))
    run = rows(seed, random.Random(seed).randrange(1, 60))
    assert encoder.encode_all(run) == [encoder(row) for row in run]


def test_flat_rows_take_the_whole_run_path_and_tricky_ones_still_match() -> None:
    encoder = JsonEntryEncoder()
    flat = [{"id": f"r{i}", "v": i, "ok": i % 2 == 0, "x": None} for i in range(500)]
    assert encoder.encode_all(flat) == [encoder(row) for row in flat]
    tricky = [*flat[:10], {"id": "},{", "v": 1}, *flat[10:20]]
    assert encoder.encode_all(tricky) == [encoder(row) for row in tricky]
    assert encoder.encode_all([{}]) == [b"{}"] and encoder.encode_all([{}, {}]) == [b"{}", b"{}"]


def test_spark_rows_of_one_schema_encode_as_their_dicts() -> None:
    from pyspark.sql import Row

    make = Row("id", "note", "n")
    spark_rows = [make(f"r{i}", TRICKY_STRINGS[i % len(TRICKY_STRINGS)], i) for i in range(50)]
    encoder = JsonEntryEncoder()
    assert encoder.encode_all(spark_rows) == [encoder(row) for row in spark_rows]


NON_FINITE = [(float("nan"), b'"NaN"'), (-math.inf, b'"-Infinity"')]


@pytest.mark.parametrize("pad", range(4))
@pytest.mark.parametrize(("number", "text"), NON_FINITE)
def test_a_long_run_finds_a_non_finite_float_at_any_byte_offset(
    pad: int, number: float, text: bytes
) -> None:
    """A run past 4 KiB skips the search for ``null`` when numpy finds none of the byte
    pairs it needs at even offsets: a NaN or an infinity is found wherever its ``null``
    falls, and written as the contract says."""
    encoder = JsonEntryEncoder()
    run: list[dict[str, Any]] = [{"id": f"r{i:05d}", "v": i} for i in range(2000)]
    run[1234] = {"id": "x" * pad, "v": number}
    encoded = encoder.encode_all(run)
    assert encoded[1234] == b'{"id":"' + b"x" * pad + b'","v":' + text + b"}"
    assert encoded == [encoder(row) for row in run]


@pytest.mark.parametrize("word", ["null", "annual", "full", "nu ll", "nul"])
def test_a_long_run_with_text_like_null_stays_packed(word: str) -> None:
    """Pairs of ``null`` in the text, or a real ``null`` of a None, lead to the search and
    the walk for non-finite floats, which finds none: the run stays one packed buffer."""
    encoder = JsonEntryEncoder()
    run: list[dict[str, Any]] = [{"id": f"r{i:05d}", "v": i / 3} for i in range(1000)]
    run[500] = {"id": word, "v": None}
    encoded = encoder.encode_all(run)
    assert type(encoded).__name__ == "PackedEntries"
    assert encoded == [encoder(row) for row in run]
