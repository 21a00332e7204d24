"""Nested columns as JSON text made by Spark (``asyncsink.spark.json_columns``): for every
tricky value, the entries made from Spark's ``to_json`` text are byte for byte the
entries the Python encoder makes from the nested Arrow columns, and a column whose text
Spark cannot make as the contract does keeps the Python path."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from asyncsink.encoding import JsonContract, encode_batch
from asyncsink.entries.arrow_rows import JSON_FIELDS, ArrowRows
from asyncsink.spark import foreach_partition
from asyncsink.spark.arrow import map_partitions_in_arrow
from asyncsink.spark.json_columns import contract_text, json_plan
from tests.spark.test_arrow_http import keeper  # noqa: F401 - the endpoint that keeps bodies

CONTROLS = ", ".join(f"char({code})" for code in (*range(1, 32), 127))
TRICKY = f"""
SELECT id,
  named_struct(
    's', concat('"q" \\\\ back\\\\u001F not-an-escape ', {CONTROLS}, ' é 日本 😀 \u2028'),
    'we"ird\\\\ name', cast(null as string),
    'n', cast(null as int),
    'bin', X'00FF10FB',
    'empty', X'',
    'dec', 12345678901234567890123456789012345678BD,
    'neg', cast(-0.000001 as decimal(38, 6)),
    'small', cast(0.0000001 as decimal(10, 7)),
    'zero', cast(0 as decimal(10, 8)),
    'ts', array(timestamp_micros(0), timestamp_micros(-2208988800000001),
                timestamp_micros(-62135596800000000), timestamp_micros(253402300799999999),
                timestamp_micros(1710052199999999), timestamp_micros(1710054000000000),
                timestamp_micros(1730613600123456), cast(null as timestamp)),
    'ntz', array(timestamp_ntz'0001-01-01 00:00:00', timestamp_ntz'2024-03-10 02:30:00.5',
                 timestamp_ntz'9999-12-31 23:59:59.999999'),
    'days', array(date'0001-01-01', date'1582-10-10', date'1969-12-31', date'9999-12-31'),
    'deep', named_struct('a', named_struct('b', cast(null as string)), 'c', array())
  ) AS st,
  array(array(1, null), array(), cast(null as array<int>)) AS arr,
  array(named_struct('x', cast(null as string)), cast(null as struct<x: string>)) AS objs,
  map(1, 'a', -2, null, 2147483647, 'max') AS by_int,
  map(9223372036854775807L, 1) AS by_long,
  map(true, array('t'), false, cast(null as array<string>)) AS by_bool,
  map('k"\\\\\\n', named_struct('v', cast(null as int)), 'é', named_struct('v', 1)) AS by_text,
  map('empty', map_filter(map(1, 'x'), (k, v) -> false)) AS maps,
  cast(null as struct<a: int>) AS missing,
  array(cast('NaN' as double), 1e16, 0.1, cast(null as double)) AS doubles,
  map(date'2024-03-10', 1) AS by_date
FROM VALUES (0), (1) AS t(id)
"""


def encoded(chunks: Any) -> list[tuple[bytes, list[str]]]:
    """In a Python worker: each row's entry and the fields that came as JSON text."""
    out = []
    for rows in chunks:
        assert isinstance(rows, ArrowRows)
        schema = rows.batch.schema
        marked = sum((orjson.loads(f.metadata[JSON_FIELDS]) for f in schema if f.metadata), [])
        entries = encode_batch(rows.batch, JsonContract(), list(rows.names))
        for index, entry in enumerate(entries):
            for name in marked:  # a row's dict, and a field's values, hold what it holds
                assert rows[index][name] == orjson.loads(entry)[name]
                assert rows.field_values(name)[index] == rows[index][name]
            assert not marked or list(rows[index]) == list(rows.names)
            out.append((bytes(entry), marked))
    return out


@pytest.fixture
def tricky(spark: Any) -> Any:
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # workers: UTC
    try:
        yield spark.sql(TRICKY).repartition(2)
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_json_text_gives_the_python_encoders_bytes(tricky: Any) -> None:
    def run(contract: JsonContract | None) -> list[tuple[bytes, list[str]]]:
        results = map_partitions_in_arrow(
            tricky, encoded, as_dicts=True, chunked=True, json_contract=contract
        )
        return sorted(sum(results, []))

    python = run(None)
    jvm = run(JsonContract())
    assert [entry for entry, _ in jvm] == [entry for entry, _ in python]
    assert all(marked == [] for _, marked in python)
    run = ["id", "st", "arr", "objs", "by_int", "by_long", "by_bool", "by_text", "maps", "missing"]
    assert [marked for _, marked in jvm] == [run, run]  # not doubles, nor a date key

    row = orjson.loads(jvm[0][0])
    st = row["st"]
    assert st["s"].startswith('"q" \\ back\\u001F not-an-escape \x01\x02')
    assert st["s"].endswith("\x1f\x7f é 日本 😀 \u2028") and st['we"ird\\ name'] is None
    assert b"\\u001f\\u007f" not in jvm[0][0] and b"\\u001f\x7f" in jvm[0][0]
    assert b'"dec":12345678901234567890123456789012345678,' in jvm[0][0]
    assert b'"neg":-0.000001,"small":1E-7,"zero":0E-8,' in jvm[0][0]
    assert st["ts"] == [
        "1970-01-01T00:00:00.000000Z",
        "1899-12-31T23:59:59.999999Z",
        "0001-01-01T00:00:00.000000Z",
        "9999-12-31T23:59:59.999999Z",
        "2024-03-10T06:29:59.999999Z",
        "2024-03-10T07:00:00.000000Z",
        "2024-11-03T06:00:00.123456Z",
        None,
    ]
    assert st["ntz"][1] == "2024-03-10T02:30:00.500000" and st["bin"] == "AP8Q+w=="
    assert st["days"] == ["0001-01-01", "1582-10-10", "1969-12-31", "9999-12-31"]
    assert st["deep"] == {"a": {"b": None}, "c": []}
    assert row["by_int"] == {"1": "a", "-2": None, "2147483647": "max"}
    assert row["by_long"] == {"9223372036854775807": 1}
    assert row["by_bool"] == {"true": ["t"], "false": None}
    assert row["by_text"] == {'k"\\\n': {"v": None}, "é": {"v": 1}}
    assert row["arr"] == [[1, None], [], None] and row["missing"] is None
    assert row["doubles"] == ["NaN", 1e16, 0.1, None] and row["by_date"] == {"2024-03-10": 1}


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_foreach_partition_sends_what_the_data_source_sends(
    tricky: Any,
    keeper: Any,  # noqa: F811
) -> None:
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    options = {"url": url, "bodyFormat": "ndjson"}
    assert foreach_partition(tricky, "http", options).delivered == 2
    through_foreach = sorted(keeper.entries)
    keeper.entries.clear()
    tricky.write.format("asyncsink-http").options(**options).mode("append").save()
    assert sorted(keeper.entries) == through_foreach


@pytest.mark.spark
def test_runs_of_columns_spark_writes_as_the_contract_does_become_json_text(spark: Any) -> None:
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(
        "i long, a struct<t: timestamp>, b array<decimal(10,2)>, c map<string, float>, "
        "d map<date, int>, e array<timestamp_ntz>, f string, g struct<i: interval day>, "
        "h array<binary>, j long, k double, l long"
    )
    utc = json_plan(schema, JsonContract())
    assert utc.segments == ((0, 1, 2), (3,), (4,), (5, 6), (7,), (8, 9), (10,), (11,))
    assert utc.runs == {0, 3, 5}
    paris = json_plan(schema, JsonContract(time_zone="Europe/Paris"))
    assert paris.segments == ((0,), (1,), (2,), (3,), (4,), (5, 6), (7,), (8, 9), (10,), (11,))
    assert paris.runs == {2, 5, 7}
    strings = json_plan(schema, JsonContract(decimal_as="string"))
    assert strings.runs == {0, 4, 6} and strings.segments[:2] == ((0, 1), (2,))
    keyed = json_plan(schema, JsonContract(), plain=frozenset({"i"}))
    assert keyed.segments[:2] == ((0,), (1, 2)) and 1 in keyed.runs  # an ordering key
    flat = json_plan(_parse_datatype_string("i long, s string, t timestamp"), JsonContract())
    assert not flat.any  # flat columns are cheaper through Arrow
    assert utc.projection(["_0", "_1", "_2"] + [f"_{i}" for i in range(3, 12)])[:2] == [
        "to_json(struct(_0 AS `i`, _1 AS `a`, _2 AS `b`), "
        + utc.projection.__globals__["TO_JSON_OPTIONS"]
        + ") AS _0",
        "_3",
    ]


def test_capital_escapes_become_the_contracts_and_escaped_backslashes_stay() -> None:
    texts = pa.array(['"\\u001F\\u000B"', '"\\\\u001F"', '"\\\\\\u001A"', None, '"plain \\u0001"'])
    assert contract_text(texts).to_pylist() == [
        '"\\u001f\\u000b"',
        '"\\\\u001F"',
        '"\\\\\\u001a"',
        None,
        '"plain \\u0001"',
    ]


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_odd_column_names_and_an_ordering_key_give_the_data_sources_bytes(
    spark: Any,
    keeper: Any,  # noqa: F811
) -> None:
    df = spark.sql(
        "SELECT id, named_struct('x', id) AS `a.b`, array(id) AS `q``x`, "
        "map('k', id) AS `é \"z\"` FROM range(6)"
    ).repartition(2)
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    options = {"url": url, "bodyFormat": "ndjson"}
    sent = {}
    for keyed in ({}, {"orderingKey": "id"}, {"orderingKey": "a.b"}):
        assert foreach_partition(df, "http", {**options, **keyed}).delivered == 6
        sent[str(keyed)] = sorted(keeper.entries)
        keeper.entries.clear()
    df.write.format("asyncsink-http").options(**options).mode("append").save()
    expected = sorted(keeper.entries)
    assert all(entries == expected for entries in sent.values())
    assert b'{"id":0,"a.b":{"x":0},"q`x":[0],"\xc3\xa9 \\"z\\"":{"k":0}}' in expected
