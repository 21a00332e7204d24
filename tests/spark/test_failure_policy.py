"""The failure policy in Spark jobs: status-code rules through ``foreach_batch`` and the
data source, a stream that diverts entries out of retries and goes on, one that fails when
the destination goes away, and ``maxDeadLetters``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from asyncsink.spark import foreach_batch
from tests.servers.answering import AnsweringServer

pytestmark = pytest.mark.spark

FAST = {"maxRetries": "2", "initialBackoffMs": "1", "maxBackoffMs": "10", "maxBatchSize": "20"}
ROWS = 200


def answers(spark: Any) -> Any:
    """Rows ``id`` 0..199; every 17th asks for 409, every 23rd (not also a 17th) for 422."""
    return spark.range(ROWS, numPartitions=2).selectExpr(
        "id", "CASE WHEN id % 17 = 0 THEN 409 WHEN id % 23 = 0 THEN 422 END AS answer"
    )


def letters(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def ids_of(found: list[dict[str, Any]]) -> list[int]:
    return sorted(orjson.loads(letter["record"])["id"] for letter in found)


CONFLICTS = {i for i in range(ROWS) if i % 17 == 0}
REFUSED = {i for i in range(ROWS) if i % 23 == 0 and i % 17 != 0}


def test_409_delivers_and_422_is_a_bad_record_in_foreach_batch_and_the_data_source(
    spark: Any, tmp_path: Path
) -> None:
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "successStatusCodes": "200-299,409",
                   "badRecordStatusCodes": "422"}  # fmt: skip
        sink = foreach_batch("http", {**options, "deadLetter": str(tmp_path / "fb.jsonl")})
        sink(answers(spark), 0)  # as foreachBatch calls it
        assert sink.totals.delivered == ROWS - len(REFUSED)
        assert sink.totals.dead_lettered == len(REFUSED)
        assert ids_of(letters(tmp_path / "fb.jsonl")) == sorted(REFUSED)
        assert server.ids_with(409) == CONFLICTS  # each answered once: not retried
        assert len(server.answered) == ROWS

        (
            answers(spark)
            .write.format("asyncsink-http")
            .options(**options, deadLetter=str(tmp_path / "ds.jsonl"))
            .mode("append")
            .save()
        )
        assert ids_of(letters(tmp_path / "ds.jsonl")) == sorted(REFUSED)
        assert len(server.answered) == 2 * ROWS


def test_max_dead_letters_fails_the_job_saying_how_many_went_where(
    spark: Any, tmp_path: Path
) -> None:
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "badRecordStatusCodes": "422",
                   "maxDeadLetters": "2", "deadLetter": str(tmp_path / "dl.jsonl")}  # fmt: skip
        refused = spark.range(40, numPartitions=1).selectExpr(
            "id", "CASE WHEN id % 4 = 0 THEN 422 END AS answer"
        )
        with pytest.raises(Exception, match=r"maxDeadLetters \(2\)"):
            refused.write.format("asyncsink-http").options(**options).mode("append").save()


def stream_of(spark: Any, poisoned: set[int]) -> Any:
    """A rate stream whose rows ``poisoned`` ask for 503, every time."""
    listed = ",".join(map(str, sorted(poisoned)))
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "100")
        .option("numPartitions", "2")
        .load()
        .selectExpr("value AS id", f"CASE WHEN value IN ({listed}) THEN 503 END AS answer")
    )


def test_a_stream_diverts_entries_out_of_retries_and_keeps_running(
    spark: Any, tmp_path: Path
) -> None:
    poisoned = set(range(7, 200, 20))
    assert len(poisoned) == 10
    path = tmp_path / "dl.jsonl"
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "onRetriesExhausted": "deadLetter",
                   "deadLetter": str(path)}  # fmt: skip
        sink = foreach_batch("http", options)
        query = (
            stream_of(spark, poisoned)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 60
            while len(server.ids_with(201)) < 300 or len(letters(path)) < 10:
                assert query.isActive, query.exception()
                assert time.monotonic() < deadline, "the stream did not get past the 503s"
                time.sleep(0.2)
            assert query.isActive
        finally:
            query.stop()
    assert ids_of(letters(path)) == sorted(poisoned)
    assert all(letter["reason"].startswith("out of retries") for letter in letters(path))
    delivered = server.ids_with(201)
    assert set(range(300)) - poisoned <= delivered


def test_a_stream_fails_when_the_destination_goes_away(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "dl.jsonl"
    server = AnsweringServer()
    options = {"url": server.url, **FAST, "onRetriesExhausted": "deadLetter",
               "deadLetter": str(path)}  # fmt: skip
    with server:
        query = (
            stream_of(spark, set(range(5)))
            .writeStream.foreachBatch(foreach_batch("http", options))
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 60
        while len(server.ids_with(201)) < 50:
            assert query.isActive, query.exception()
            assert time.monotonic() < deadline
            time.sleep(0.1)
    # The port is closed now: every request is refused, as a whole.
    try:
        # Refused connections are whole-request failures: never diverted, they fail the
        # task (a writer that never delivered from its process fails at once, one that
        # did after its retries), and the query with it.
        with pytest.raises(Exception, match="refused|Connect call failed") as failure:
            query.awaitTermination(60)
        assert "dead" not in str(failure.value).lower()
        assert not query.isActive
    finally:
        query.stop()
    # Only entries the endpoint answered 503 went to the dead letters, none of the refused.
    assert set(ids_of(letters(path))) <= {0, 1, 2, 3, 4}
    assert all("HTTP 503" in letter["reason"] for letter in letters(path))
