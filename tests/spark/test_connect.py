"""Every entry point with the same guarantees in a classic session and under Spark Connect,
where ``foreachBatch`` runs on the server and there is no ``sparkContext`` or ``df.rdd``.

Each test taking ``session`` runs twice: against the classic session, then against a
Connect session on a local Connect server (see ``conftest``).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from asyncsink import SparkSetupError
from asyncsink.spark import foreach_batch, foreach_partition, preflight
from asyncsink.spark.connect import is_connect
from asyncsink.testing import FaultServer

from .test_arrow_http import keeper  # noqa: F401 - the endpoint that keeps bodies
from .test_json_contract import EDGES
from .test_spark import assert_exactly_once, file_stream, http_options, rows
from .writers import LoggedBatches, StatsFile

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def event_rows(session: Any, n: int) -> Any:
    """Rows with the columns events have: a timestamp, a struct and an array."""
    return session.range(0, n, 1, 2).selectExpr(
        "concat('r', id) AS id",
        "timestamp_seconds(1764300000 + id) AS ts",
        "named_struct('n', id, 'tag', concat('t', id % 7)) AS s",
        "array(id, id * 2) AS a",
    )


def run_stream(writer: Any, checkpoint: Path) -> None:
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()


@pytest.mark.parametrize("columns", ["flat", "events"])
def test_foreach_partition_delivers_every_row_once_and_returns_its_statistics(
    session: Any, server: FaultServer, tmp_path: Path, columns: str
) -> None:
    df = rows(session, 1000) if columns == "flat" else event_rows(session, 1000)
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    stats = foreach_partition(df, "http", options, sink_id=f"fp-{columns}", batch_id=1)
    assert_exactly_once(server, 1000)
    assert stats.delivered == 1000 and stats.skipped == 0
    again = foreach_partition(df, "http", options, sink_id=f"fp-{columns}", batch_id=1)
    assert again.skipped == 1000 and again.delivered == 0
    assert_exactly_once(server, 1000)


def test_connect_and_classic_sessions_send_the_same_bytes(
    spark: Any,
    connect: Any,
    keeper: Any,  # noqa: F811
) -> None:
    """Every Spark type with edge values, in a session zone unlike the workers', through
    ``foreach_partition`` and the data source: a Connect session sends what a classic
    one sends, byte for byte."""
    options = {"url": f"http://127.0.0.1:{keeper.server_port}/ingest", "bodyFormat": "ndjson"}
    sent = {}
    for name, session in (("classic", spark), ("connect", connect)):
        session.conf.set("spark.sql.session.timeZone", "America/New_York")
        try:
            edges = session.sql(EDGES).repartition(2)
            assert foreach_partition(edges, "http", options).delivered == 2
            edges.write.format("asyncsink-http").options(**options).mode("append").save()
        finally:
            session.conf.unset("spark.sql.session.timeZone")
        sent[name] = sorted(keeper.entries)
        keeper.entries.clear()
    assert len(sent["classic"]) == 4 and sent["connect"] == sent["classic"]


def test_the_batch_data_source_delivers_every_row_once(
    session: Any, server: FaultServer, tmp_path: Path
) -> None:
    (
        event_rows(session, 1000)
        .write.format("asyncsink-http")
        .options(**http_options(server, f"sqlite:///{tmp_path}/r.db"))
        .option("sinkId", "ds-batch")
        .option("batchId", "1")
        .mode("append")
        .save()
    )
    assert_exactly_once(server, 1000)


def test_the_streaming_data_source_delivers_every_row_once_per_checkpoint(
    session: Any, server: FaultServer, tmp_path: Path
) -> None:
    source = file_stream(session, tmp_path / "in", files=2, per_file=300)
    writer = (
        source.writeStream.format("asyncsink-http")
        .options(**http_options(server, f"sqlite:///{tmp_path}/r.db"))
        .option("sinkId", f"ds-stream-{uuid.uuid4().hex[:6]}")
    )
    run_stream(writer, tmp_path / "ck")
    assert_exactly_once(server, 600)
    run_stream(writer, tmp_path / "ck")  # nothing new on the same checkpoint
    assert_exactly_once(server, 600)
    run_stream(writer, tmp_path / "new")  # a new checkpoint is a new run
    ids = server.applied_ids()
    assert len(ids) == 1200 and len(set(ids)) == 600


def test_foreach_batch_restarted_on_its_checkpoint_sends_nothing_twice(
    session: Any, server: FaultServer, tmp_path: Path
) -> None:
    """The first run fails part way through a batch; the restart on the same checkpoint
    replays it and skips what landed; a new checkpoint delivers everything again."""
    source = file_stream(session, tmp_path / "in", files=2, per_file=600)
    checkpoint = str(tmp_path / "ck")
    options = http_options(server, f"sqlite:///{tmp_path}/r.db", maxBatchSize=20)
    doomed = foreach_batch(
        "tests.spark.writers:create_killing_writer",
        {**options, "killAfterRequests": "5", "killMode": "raise-always"},
        sink_id="restart",
        checkpoint_location=checkpoint,
    )
    first = source.writeStream.foreachBatch(doomed).option("checkpointLocation", checkpoint)
    query = first.start()
    with pytest.raises(Exception, match="injected task failure"):
        query.awaitTermination(300)
    landed = len(server.applied_ids())
    assert 0 < landed < 1200  # the batch failed part way

    stats = StatsFile(str(tmp_path / "stats.jsonl"))
    healthy = foreach_batch(
        "http", options, sink_id="restart", checkpoint_location=checkpoint, on_batch=stats
    )
    run_stream(source.writeStream.foreachBatch(healthy), Path(checkpoint))
    assert_exactly_once(server, 1200)
    seen = stats.read()
    assert seen[0]["skipped"] >= 5 * 20  # the replayed batch skipped what landed
    assert sum(batch["delivered"] + batch["skipped"] for batch in seen) == 1200

    server.reset()
    renewed = str(tmp_path / "new")
    again = foreach_batch("http", options, sink_id="restart", checkpoint_location=renewed)
    run_stream(source.writeStream.foreachBatch(again), Path(renewed))
    assert_exactly_once(server, 1200)  # a new checkpoint is a new run: everything again


def test_a_task_killed_mid_batch_is_retried_and_sends_only_the_rest(
    session: Any, server: FaultServer, tmp_path: Path
) -> None:
    source = file_stream(session, tmp_path / "in", files=1, per_file=1000)
    checkpoint = str(tmp_path / "ck")
    options = http_options(server, f"sqlite:///{tmp_path}/r.db", killAfterRequests=4)
    stats = StatsFile(str(tmp_path / "stats.jsonl"))
    sink = foreach_batch(
        "tests.spark.writers:create_killing_writer",
        options,
        sink_id="killed",
        checkpoint_location=checkpoint,
        on_batch=stats,
    )
    log = tmp_path / "driver.log"
    run_stream(source.writeStream.foreachBatch(LoggedBatches(sink, str(log))), Path(checkpoint))
    assert_exactly_once(server, 1000)
    (batch,) = [seen for seen in stats.read() if seen["delivered"] + seen["skipped"]]
    assert batch["delivered"] + batch["skipped"] == 1000 and batch["skipped"] > 0
    assert "of killed (run " in log.read_text() and "1000 rows" in log.read_text()


def test_foreach_batch_checks_the_checkpoint_belongs_to_the_query(
    session: Any, server: FaultServer, tmp_path: Path
) -> None:
    source = file_stream(session, tmp_path / "in", files=1, per_file=100)
    options = http_options(server, f"sqlite:///{tmp_path}/r.db")
    other = tmp_path / "other"
    plain = foreach_batch("http", {"url": server.ingest_url})
    run_stream(source.writeStream.foreachBatch(plain), other)
    server.reset()
    sink = foreach_batch("http", options, sink_id="wrong", checkpoint_location=str(other))
    query = source.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
    with pytest.raises(Exception, match="checkpointLocation of the query that runs this"):
        query.start().awaitTermination(300)
    assert server.stats().requests == 0


def test_under_connect_a_sink_id_without_the_checkpoint_fails_saying_what_to_use(
    connect: Any, server: FaultServer, tmp_path: Path
) -> None:
    source = file_stream(connect, tmp_path / "in", files=1, per_file=100)
    sink = foreach_batch("http", http_options(server, f"sqlite:///{tmp_path}/r.db"), sink_id="s")
    query = source.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
    with pytest.raises(Exception, match="checkpoint_location=") as caught:
        query.start().awaitTermination(300)
    assert "SparkSetupError" in str(caught.value)
    assert "writeStream.format('asyncsink-http')" in str(caught.value)
    assert server.stats().requests == 0


def test_under_connect_the_worker_check_is_skipped_with_one_log_line(
    connect: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    df = connect.range(3).selectExpr("id AS master", "id AS sparkContext")
    assert is_connect(df) and is_connect(connect)
    monkeypatch.setattr(preflight, "_said_connect", False)
    with caplog.at_level(logging.INFO, logger="asyncsink.spark"):
        for spark in (df, connect, df):
            preflight.check_workers(spark)
    said = [r.getMessage() for r in caplog.records if "Spark Connect session" in r.getMessage()]
    assert len(said) == 1 and "installed in the server's Python" in said[0]


def test_a_classic_dataframe_is_not_taken_for_a_connect_one(spark: Any) -> None:
    df = spark.range(3).selectExpr("id AS master", "id AS getConf")
    assert not is_connect(df) and not is_connect(spark)
    preflight.check_workers(df)  # finds the context behind the session, not a column


def test_foreach_batch_on_a_remote_only_client_needs_the_checkpoint_for_a_sink_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asyncsink.spark import foreach

    monkeypatch.setattr(foreach, "remote_only", lambda: True)
    with pytest.raises(SparkSetupError, match="checkpoint_location="):
        foreach_batch("http", {"url": "http://127.0.0.1:9/in"}, sink_id="s")
    foreach_batch("http", {"url": "http://127.0.0.1:9/in"})  # without records: no run
    foreach_batch("http", {"url": "http://127.0.0.1:9/in"}, sink_id="s", checkpoint_location="/ck")
