"""The JSON contract, end to end: one DataFrame holding every Spark SQL type with edge
values goes through every path (``foreach_partition``, ``foreach_batch``, the batch and
streaming data sources) and every sink's encoding; all give the same bytes, each value
as the contract's table says, and every timestamp names the instant Spark holds, in a
session whose zone is not the Python workers' own."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest

from asyncsink.encoding import JsonContract, encode_batch
from asyncsink.entries.arrow_rows import ArrowRows
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, ElasticsearchWriter
from asyncsink.sinks.kinesis import KinesisOptions, KinesisWriter
from asyncsink.spark import foreach_batch, foreach_partition
from asyncsink.spark.arrow import map_partitions_in_arrow
from tests.spark.test_arrow_http import keeper  # noqa: F401 - the endpoint that keeps bodies

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

EDGES = """
SELECT * FROM VALUES
 (0, true, 127Y, 32767S, 2147483647, 9223372036854775807L, cast('NaN' as float),
  cast('Infinity' as double), 12345678901234567890123456789012345678BD,
  'é"\\\\ \u0001 日本', X'', date'1969-12-31', timestamp'1899-12-31 23:59:59.123456',
  timestamp_ntz'9999-12-31 23:59:59.999999', interval '1 02:03:04.000005' day to second,
  array(array(1, null), array()), map(1, 'a', 2, null),
  named_struct('a', cast(null as int), 'b', named_struct('c', cast(null as string))),
  time'23:59:59.999999', cast('-0.0' as double)),
 (1, null, -128Y, -32768S, -2147483648, -9223372036854775808L, cast('-Infinity' as float),
  cast(null as double), -99999999999999999999999999999999999999BD, null, X'00FF',
  date'9999-12-31', timestamp'2024-03-10 07:30:00', null, null, null, null, null, null,
  cast('-0.0' as double))
AS t(id, b, t8, t16, t32, t64, f32, f64, dec, s, bin, day, ts, ntz, dti, arr, m, st, tm, z)
"""


def each_sink(chunks: Any) -> list[list[bytes]]:
    """In a Python worker: each record batch's entries as the contract encodes them, and
    as the Kinesis and Elasticsearch sinks make their records' data and documents."""
    kinesis = KinesisWriter(KinesisOptions(stream_name="s", partition_key_field="id"))
    elastic = ElasticsearchWriter(ElasticsearchOptions(hosts="http://127.0.0.1:9", index="i"))
    out = []
    for rows in chunks:
        assert isinstance(rows, ArrowRows)
        entries = list(encode_batch(rows.batch, JsonContract(), list(rows.names)))
        assert [record.data for record in kinesis.convert_all(rows)] == entries
        assert [entry.source for entry in elastic.convert_all(rows)] == entries
        out.append(entries)
    return out


@pytest.fixture
def edges(spark: Any) -> Any:
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # workers: UTC
    try:
        yield spark.sql(EDGES).repartition(2)
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_every_path_and_sink_gives_the_contracts_bytes(edges: Any, keeper: Any) -> None:  # noqa: F811
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    options = {"url": url, "bodyFormat": "ndjson"}
    assert foreach_partition(edges, "http", options).delivered == 2
    through_foreach = sorted(keeper.entries)
    keeper.entries.clear()
    edges.write.format("asyncsink-http").options(**options).mode("append").save()
    assert sorted(keeper.entries) == through_foreach
    keeper.entries.clear()
    foreach_batch("http", options)(edges, 0)  # what foreachBatch calls for each micro-batch
    assert sorted(keeper.entries) == through_foreach

    encoded = sum(map_partitions_in_arrow(edges, each_sink, as_dicts=True, chunked=True), [])
    assert sorted(entry for entries in encoded for entry in entries) == through_foreach

    first, second = (orjson.loads(entry) for entry in through_foreach)
    assert first["t64"] == 9223372036854775807 and second["t64"] == -9223372036854775808
    assert first["f32"] == "NaN" and second["f32"] == "-Infinity" and first["f64"] == "Infinity"
    assert b'"dec":12345678901234567890123456789012345678,' in through_foreach[0]
    assert b'"dec":-99999999999999999999999999999999999999,' in through_foreach[1]
    assert first["s"] == 'é"\\ \u0001 日本' and first["bin"] == "" and second["bin"] == "AP8="
    assert first["day"] == "1969-12-31" and second["day"] == "9999-12-31"
    assert first["ntz"] == "9999-12-31T23:59:59.999999" and second["ntz"] is None
    assert first["dti"] == "PT93784.000005S"
    assert first["arr"] == [[1, None], []] and first["m"] == {"1": "a", "2": None}
    assert first["st"] == {"a": None, "b": {"c": None}} and second["st"] is None
    assert first["tm"] == "23:59:59.999999" and first["z"] == -0.0
    assert b'"z":-0.0' in through_foreach[0]
    # The instants Spark holds (its own to_json, with the session's offset).
    spark_text = {
        row.id: orjson.loads(row.j)["ts"]
        for row in edges.selectExpr(
            "id",
            "to_json(struct(ts), map('timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\")) AS j",
        ).collect()
    }
    for entry in (first, second):
        assert entry["ts"].endswith("Z")
        ours = dt.datetime.fromisoformat(entry["ts"])
        assert ours == dt.datetime.fromisoformat(spark_text[entry["id"]])
    assert second["ts"] == "2024-03-10T11:30:00.000000Z"  # 07:30 EDT in New York


def test_a_stream_through_the_data_source_gives_the_same_bytes(
    edges: Any,
    keeper: Any,  # noqa: F811
    tmp_path: Any,
) -> None:
    # A file stream of the edge rows (Parquet holds every column but the intervals and
    # times), written by the streaming data source and by foreach_partition.
    rows = edges.drop("dti", "tm")
    rows.write.parquet(str(tmp_path / "in"))
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    options = {"url": url, "bodyFormat": "ndjson"}
    assert foreach_partition(rows, "http", options).delivered == 2
    expected = sorted(keeper.entries)
    keeper.entries.clear()
    stream = edges.sparkSession.readStream.schema(rows.schema).parquet(str(tmp_path / "in"))
    query = (
        stream.writeStream.format("asyncsink-http")
        .options(**options)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(keeper.entries) == expected
