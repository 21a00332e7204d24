"""``ArrowRows``: the rows of a record batch, a sequence of the dicts ``to_pylist`` gives."""

from __future__ import annotations

import datetime as dt
import decimal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from asyncsink.entries.arrow_rows import ArrowRows


def batch(count: int = 10) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"r{i}" for i in range(count)]),
            pa.array([i if i % 3 else None for i in range(count)], pa.int64()),
            pa.array([decimal.Decimal(i) / 4 for i in range(count)], pa.decimal128(10, 2)),
            pa.array([dt.date(2024, 1, 1 + i % 28) for i in range(count)]),
        ],
        names=["id", "n", "price", "day"],
    )


class Counting:
    """A record batch that counts the rows it builds."""

    def __init__(self, wrapped: pa.RecordBatch) -> None:
        self.wrapped = wrapped
        self.built = 0

    def to_pylist(self, **options: Any) -> list[dict[str, Any]]:
        self.built += 1
        rows: list[dict[str, Any]] = self.wrapped.to_pylist(**options)
        return rows

    def slice(self, offset: int, length: int) -> Counting:
        return Counting(self.wrapped.slice(offset, length))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def test_rows_are_a_sequence_equal_to_to_pylist() -> None:
    data = batch()
    rows = ArrowRows(data, ["id", "n", "price", "day"])
    expected = data.to_pylist()
    assert isinstance(rows, Sequence)
    assert len(rows) == 10 and bool(rows)
    assert list(rows) == expected
    assert [rows[i] for i in range(-10, 10)] == expected + expected
    assert rows.index(expected[4]) == 4 and expected[2] in rows
    assert list(reversed(rows)) == expected[::-1]
    assert rows.names == ("id", "n", "price", "day") and rows.batch is data
    with pytest.raises(IndexError):
        rows[10]
    assert not ArrowRows(data.slice(0, 0)) and list(ArrowRows(data.slice(0, 0))) == []


def test_a_slice_is_arrow_rows_over_the_same_buffers() -> None:
    data = batch()
    rows = ArrowRows(data)
    expected = data.to_pylist()
    for start, stop in [(0, 10), (2, 5), (-3, None), (None, -7), (8, 3), (0, 99), (5, 5)]:
        part = rows[start:stop]
        assert isinstance(part, ArrowRows)
        assert list(part) == expected[start:stop] and len(part) == len(expected[start:stop])
        assert part.source is rows and part.names == rows.names
    inner = rows[2:9][1:4][1:]
    assert list(inner) == expected[2:9][1:4][1:]
    assert inner.source is rows and inner.start == 4 and len(inner) == 2
    assert inner.batch.equals(data.slice(4, 2))
    column = inner.batch.column(0)
    assert column.offset == 4 and column.buffers()[2].address == data.column(0).buffers()[2].address
    assert list(rows[::3]) == expected[::3] and list(rows[7:1:-2]) == expected[7:1:-2]


def test_rows_are_built_at_most_once_and_shared_with_slices() -> None:
    counting = Counting(batch())
    rows = ArrowRows(counting)  # type: ignore[arg-type]
    part = rows[3:6]
    assert len(part) == 3 and counting.built == 0  # neither length nor slicing builds rows
    first = rows[0]
    assert rows[1] is rows.rows()[1] and list(rows)[0] is first
    assert counting.built == 1
    assert part[0] is rows[3]  # the source's dicts, not new ones


def test_a_slice_taken_first_builds_only_its_own_rows() -> None:
    data = batch(1000)
    counting = Counting(data)
    part = ArrowRows(counting)[990:]  # type: ignore[arg-type]
    assert list(part) == data.to_pylist()[990:] and part.rows() is part.rows()
    assert part.batch.wrapped.num_rows == 10  # type: ignore[attr-defined]


def test_names_given_become_the_keys() -> None:
    data = batch(3)
    rows = ArrowRows(data, ["a", "b", "c", "d"])
    assert rows.names == ("a", "b", "c", "d") and rows.batch.schema.names == list(rows.names)
    assert list(rows[0]) == ["a", "b", "c", "d"]
    assert [list(row.values()) for row in rows] == [list(row.values()) for row in data.to_pylist()]


def test_importing_it_needs_no_pyarrow() -> None:
    code = "import sys, asyncsink.entries.arrow_rows; assert 'pyarrow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
