"""Rows read through Arrow reach the HTTP endpoint as the very bytes ``JsonEntryEncoder``
gives for each row's dict, whether the sink encodes the record batch's columns at once
or, when that cannot be proven exact, the dicts."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from asyncsink.encoding import JsonContract, encode_batch
from asyncsink.spark import foreach_partition

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SCHEMA = (
    "id string, s string, b boolean, i int, l long, f float, d double, m decimal(10,2), "
    "big decimal(38,18), day date, t tinyint, h smallint"
)


class _Keep(BaseHTTPRequestHandler):
    """Keeps each request body's lines (NDJSON entries, byte for byte); answers 200."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["content-length"]))
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.entries.extend(body.splitlines())  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def keeper() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Keep)
    server.entries, server.lock = [], threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def rows() -> list[tuple[Any, ...]]:
    tricky = ["", 'q"uote', "back\\", 'x",', '","', "line\nbreak\t\x01", "é日本\U0001f600", None]
    out = []
    for i in range(60):
        out.append((
            f"r{i}", tricky[i % len(tricky)], i % 3 == 0 if i % 5 else None, i - 30,
            (i - 30) * 2**40 if i % 6 else -(2**63), i / 7,
            [float("nan"), float("inf"), -0.0, 1e300, None, 0.1][i % 6],
            decimal.Decimal(i * 37 - 1000) / 100 if i % 4 else None,
            decimal.Decimal(i - 30).scaleb(-18) if i % 7 else decimal.Decimal(0),
            dt.date(1, 1, 1) + dt.timedelta(days=i * 60000) if i % 9 else None,
            [-128, 127, 0][i % 3], [-32768, 32767, None][i % 3],
        ))  # fmt: skip
    return out


def expected(df: Any) -> list[bytes]:
    """The contract's bytes of each row (a FLOAT written as its own shortest text, not
    widened as PySpark's rows widen it)."""
    return sorted(
        entry for batch in df.toArrow().to_batches() for entry in encode_batch(batch, CONTRACT)
    )


CONTRACT = JsonContract()


def options(url: str) -> dict[str, str]:
    return {"url": url, "bodyFormat": "ndjson", "maxBatchSize": "7"}


def test_entries_through_arrow_are_the_bytes_of_each_rows_dict(spark: Any, keeper: Any) -> None:
    df = spark.createDataFrame(rows(), SCHEMA).repartition(3)
    for batch in df.toArrow().to_batches():  # the columns are encoded at once, not the dicts
        assert len(encode_batch(batch, CONTRACT)) == batch.num_rows
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    stats = foreach_partition(df, "http", options(url))
    assert stats.delivered == 60
    assert sorted(keeper.entries) == expected(df)
    keeper.entries.clear()
    df.write.format("asyncsink-http").options(**options(url)).mode("append").save()
    assert sorted(keeper.entries) == expected(df)


def test_columns_named_with_dots_or_spaces_are_read_through_arrow(spark: Any, keeper: Any) -> None:
    df = spark.createDataFrame(rows(), SCHEMA).selectExpr("id AS `a.b`", "i AS `c d`")
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    assert foreach_partition(df, "http", options(url)).delivered == 60
    assert sorted(keeper.entries) == expected(df)
    assert b'"a.b":' in keeper.entries[0] and b'"c d":' in keeper.entries[0]


def test_columns_of_one_name_are_refused_before_anything_is_sent(spark: Any, keeper: Any) -> None:
    # Rows are sent by field name: one of the two values would be lost.
    df = spark.createDataFrame(rows(), SCHEMA).selectExpr("id", "s", "i AS s", "l")
    assert df.columns == ["id", "s", "s", "l"]
    url = f"http://127.0.0.1:{keeper.server_port}/ingest"
    with pytest.raises(ValueError, match="two columns named 's'"):
        foreach_partition(df, "http", options(url))
    assert keeper.entries == []
