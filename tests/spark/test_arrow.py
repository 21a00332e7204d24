"""Partitions read through Arrow give writers the rows ``df.rdd`` would give them."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable
from typing import Any

import pytest

from asyncsink.spark import SinkSpec, foreach_partition
from asyncsink.spark.arrow import arrow_readable, map_partitions_in_arrow
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


def test_rows_through_arrow_equal_the_rows_of_rdd(spark: Any) -> None:
    df = flat_rows(spark)
    assert arrow_readable(df.schema)
    expected = described(df.rdd.collect())
    through_arrow = map_partitions_in_arrow(df, lambda rows: described(rows))
    assert sorted(sum(through_arrow, []), key=repr) == expected
    as_dicts = map_partitions_in_arrow(df, lambda rows: described(rows), as_dicts=True)
    assert sorted(sum(as_dicts, []), key=repr) == [("dict", fields) for _, fields in expected]


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
    ],  # fmt: skip
)
def test_other_columns_are_read_through_rdd(spark: Any, server: FaultServer, column: str) -> None:
    df = spark.range(0, 200, 1, 2).selectExpr("concat('r', id) AS id", column)
    assert not arrow_readable(df.schema)
    stats = foreach_partition(df, "http", {"url": server.ingest_url, "maxBatchSize": "50"})
    assert stats.delivered == 200
    assert sorted(server.applied_ids()) == sorted(f"r{i}" for i in range(200))


def test_a_writer_declares_whether_it_takes_dicts_for_rows(server: FaultServer) -> None:
    url = server.ingest_url
    assert SinkSpec("http", {"url": url}).reads_mappings
    # a user's encoder may expect a Row: the HTTP writer then asks for rows
    assert not SinkSpec("http", {"url": url, "entryEncoder": lambda row: b"{}"}).reads_mappings
    assert SinkSpec("tests.spark.fourth_sink:create_writer", {"url": url}).reads_mappings
    assert not SinkSpec("tests.spark.test_commit:ListWriter", {}).reads_mappings


def test_data_sources_take_arrow_batches_when_the_columns_allow(server: FaultServer) -> None:
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from asyncsink.sinks import sink_entry
    from asyncsink.spark.datasource import data_source_for

    source = data_source_for(sink_entry("http"))({"url": server.ingest_url})
    flat = StructType([StructField("id", StringType()), StructField("v", LongType())])
    other = StructType([StructField("id", StringType()), StructField("t", TimestampType())])
    assert isinstance(source.writer(flat, False), DataSourceArrowWriter)
    assert isinstance(source.streamWriter(flat, False), DataSourceStreamArrowWriter)
    assert not isinstance(source.writer(other, False), DataSourceArrowWriter)
    assert not isinstance(source.streamWriter(other, False), DataSourceStreamArrowWriter)
