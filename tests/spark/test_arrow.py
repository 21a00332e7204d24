"""Partitions read through Arrow give writers the rows ``df.collect()`` gives, for every
column type, and ``df.rdd`` is never used."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable
from typing import Any

import pytest

from asyncsink.spark import SinkSpec, foreach_partition
from asyncsink.spark.arrow import map_partitions_in_arrow
from asyncsink.testing import FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

FLAT = (
    "s string, b boolean, i int, l long, f float, d double, m decimal(10,2), day date, "
    "t tinyint, h smallint"
)


def flat_rows(spark: Any) -> Any:
    data = [
        ("a", True, 1, 2**40, 0.1, 1.5, decimal.Decimal("12.50"), dt.date(2024, 2, 29), 7, 300),
        (None, None, None, None, None, None, None, None, None, None),
        ("é\n\"q\"", False, -1, -(2**63), 3.0e38, float("inf"), decimal.Decimal("-0.01"),
         dt.date(1970, 1, 1), -128, -32768),
    ]  # fmt: skip
    return spark.createDataFrame(data, FLAT).repartition(2)


def described(rows: Iterable[Any]) -> list[Any]:
    """Each row's type, fields and values with their types (sorted: partition order)."""
    out = []
    for row in rows:
        fields = row.asDict() if hasattr(row, "asDict") else row
        out.append(
            (type(row).__name__, [(k, repr(v), type(v).__name__) for k, v in fields.items()])
        )
    return sorted(out, key=repr)


EVENTS = (
    "id long, ts timestamp, day date, kind string, user struct<id:long,name:string>, "
    "tags array<string>, attrs map<string,string>, amount decimal(12,2), blob binary"
)


def test_rows_of_every_type_through_arrow_equal_the_collected_rows(spark: Any) -> None:
    data = [
        (1, dt.datetime(2024, 3, 10, 3, 30, 0, 123456), dt.date(1899, 1, 2), "k", (7, "ada"),
         ["a", None], {"x": "1", "y": None}, decimal.Decimal("12.50"), b"\x00"),
        (2, None, None, None, None, None, None, None, None),
        (3, dt.datetime(1899, 12, 31, 23, 59, 59), dt.date(9999, 12, 31), "", (None, None),
         [], {}, decimal.Decimal("-0.01"), b""),
    ]  # fmt: skip
    df = spark.createDataFrame(data, EVENTS).repartition(2)
    expected = described(df.collect())
    through_arrow = map_partitions_in_arrow(df, lambda rows: described(rows))
    assert sorted(sum(through_arrow, []), key=repr) == expected


def test_rows_through_arrow_equal_the_collected_rows(spark: Any) -> None:
    df = flat_rows(spark)
    expected = described(df.collect())
    through_arrow = map_partitions_in_arrow(df, lambda rows: described(rows))
    assert sorted(sum(through_arrow, []), key=repr) == expected
    as_dicts = map_partitions_in_arrow(df, lambda rows: described(rows), as_dicts=True)
    assert sorted(sum(as_dicts, []), key=repr) == [("ArrowRow", fields) for _, fields in expected]


def test_field_access_works_on_rows_read_through_arrow(spark: Any) -> None:
    df = spark.range(0, 10, 1, 2).selectExpr("id", "concat('n', id) AS name")
    names = map_partitions_in_arrow(df, lambda rows: [r.name + r["name"] for r in rows])
    assert sorted(sum(names, [])) == sorted(f"n{i}n{i}" for i in range(10))


@pytest.mark.parametrize(
    "column",
    [
        "current_timestamp() AS ts",
        "array(id) AS a",
        "map('k', id) AS m",
        "named_struct('x', id) AS s",
        "encode(concat('b', id), 'utf-8') AS bin",
        "parse_json('[1, 2]') AS v",
        "make_interval(0, 0, 0, 1) AS iv",
    ],  # fmt: skip
)
def test_every_column_type_is_read_through_arrow(
    spark: Any, server: FaultServer, column: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    df = spark.range(0, 200, 1, 2).selectExpr("concat('r', id) AS id", column)
    monkeypatch.setattr(type(df), "rdd", property(lambda _: pytest.fail("df.rdd was used")))
    stats = foreach_partition(df, "http", {"url": server.ingest_url, "maxBatchSize": "50"})
    assert stats.delivered == 200
    assert sorted(server.applied_ids()) == sorted(f"r{i}" for i in range(200))


def test_a_year_month_interval_is_refused_on_the_driver_with_the_cast(
    spark: Any, server: FaultServer
) -> None:
    df = spark.range(0, 10).selectExpr("id", "interval '1-2' year to month AS age")
    with pytest.raises(ValueError, match=r"column 'age'.*cast\(age as string\)"):
        foreach_partition(df, "http", {"url": server.ingest_url})
    assert server.applied_ids() == []


def test_a_writer_declares_whether_it_takes_dicts_for_rows(server: FaultServer) -> None:
    url = server.ingest_url
    assert SinkSpec("http", {"url": url}).reads_mappings
    # a user's encoder may expect a Row: the HTTP writer then asks for rows
    assert not SinkSpec("http", {"url": url, "entryEncoder": lambda row: b"{}"}).reads_mappings
    # a factory's writer is not built on the driver, so it is handed rows
    assert not SinkSpec("tests.spark.fourth_sink:create_writer", {"url": url}).reads_mappings
    assert not SinkSpec("tests.spark.test_commit:ListWriter", {}).reads_mappings


def test_data_sources_take_arrow_batches_whatever_the_columns(server: FaultServer) -> None:
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from asyncsink.sinks import sink_entry
    from asyncsink.spark.datasource import data_source_for

    source = data_source_for(sink_entry("http"))({"url": server.ingest_url})
    flat = StructType([StructField("id", StringType()), StructField("v", LongType())])
    other = StructType([StructField("id", StringType()), StructField("t", TimestampType())])
    for schema in (flat, other):
        assert isinstance(source.writer(schema, False), DataSourceArrowWriter)
        assert isinstance(source.streamWriter(schema, False), DataSourceStreamArrowWriter)
