"""A run of plain dicts becomes the very records the Kinesis sink makes of each row alone;
a row that needs a closer look sends the whole run down the row-by-row path, which names
the bad row."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pytest

from asyncsink.sinks.kinesis import create_writer
from asyncsink.sinks.kinesis.writer import KinesisWriter

ROWS: list[dict[str, Any]] = [
    {"id": "row-1", "n": 1, "x": 1.5, "tags": ["a", "b"], "nested": {"k": None}},
    {"id": 42, "when": dt.datetime(2026, 11, 24, 21, 0), "day": dt.date(2026, 11, 24)},
    {"id": "cl\u00e9 \u2603", "price": decimal.Decimal("12.50"), "blob": b"\x00\xff"},
    {"id": "k" * 256, "empty": {}, "flag": True},
]

MODES = {
    "field": {"partitionKeyField": "id"},
    "fixed": {"partitionKey": "all"},
    "hash": {"partitionKeyMode": "hash"},
}


def writer(**options: str) -> KinesisWriter:
    return create_writer({"streamName": "events", "region": "us-east-1", **options})


@pytest.mark.parametrize("mode", MODES)
def test_a_run_of_dicts_converts_at_once_to_the_records_of_each_row(mode: str) -> None:
    sink = writer(**MODES[mode])
    at_once = sink._convert.convert_all(ROWS)
    assert at_once is not None  # the run took the fast path
    assert at_once == [sink.convert(row) for row in ROWS]
    assert sink.convert_all(ROWS) == at_once


CLOSER_LOOK = {
    "missing key field": {"n": 1},
    "null key": {"id": None},
    "bool key": {"id": True},
    "empty key": {"id": ""},
    "key too long": {"id": "k" * 257},
    "key of another type": {"id": 1.5},
    "a value with no JSON form": {"id": "a", "v": object()},
}

ENCODED_ONE_BY_ONE = {
    "key that is not text": {"id": "a", 3: "three"},
    "integer beyond 64 bits": {"id": "a", "big": 2**70},
}


@pytest.mark.parametrize("row", ENCODED_ONE_BY_ONE.values(), ids=ENCODED_ONE_BY_ONE.keys())
def test_a_row_the_encoder_takes_alone_keeps_the_run_fast_with_the_same_records(
    row: dict[Any, Any],
) -> None:
    sink = writer(partitionKeyField="id")
    run = [*ROWS[:1], row]
    assert sink._convert.convert_all(run) == [sink.convert(element) for element in run]


@pytest.mark.parametrize("row", CLOSER_LOOK.values(), ids=CLOSER_LOOK.keys())
def test_a_row_that_needs_a_closer_look_takes_the_run_row_by_row(row: dict[Any, Any]) -> None:
    sink = writer(partitionKeyField="id")
    run = [*ROWS, row]
    assert sink._convert.convert_all(run) is None
    try:
        expected = [sink.convert(element) for element in run]
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc), match="."):
            sink.convert_all(run)
    else:
        assert sink.convert_all(run) == expected


@pytest.mark.parametrize(
    "options",
    [{"partitionKeyField": "id,n"}, {"payloadField": "id"}, {"partitionKeyMode": "random"},
     {"partitionKeyField": "id", "explicitHashKeyField": "n"}],
)  # fmt: skip
def test_other_options_convert_row_by_row(options: dict[str, str]) -> None:
    sink = writer(**options)
    rows = [{"id": "a", "n": 1}, {"id": "b", "n": 2}]
    assert sink._convert.convert_all(rows) is None
    assert len(sink.convert_all(rows)) == 2
