"""Each driver-side entry point works when the calling thread runs an asyncio loop: called
from inside ``asyncio.run`` and ``anyio.run``, as a notebook cell or an async application
calls it. Before, each durable one raised ``Already running asyncio in this thread``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink.cli.records_command import main as records_main
from asyncsink.spark import foreach_batch, foreach_partition
from asyncsink.testing import FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def inside(runner: str, body: Callable[[], Any]) -> Any:
    async def call() -> Any:
        asyncio.get_running_loop()  # a loop runs on this thread, as in a notebook cell
        return body()

    return asyncio.run(call()) if runner == "asyncio.run" else anyio.run(call)


@pytest.fixture(params=["asyncio.run", "anyio.run"])
def runner(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_foreach_partition_with_a_sink_id_runs_and_reruns(
    runner: str, session: Any, server: FaultServer, tmp_path: Path
) -> None:
    rows = session.range(400).selectExpr("concat('r', id) AS id")
    options = {"url": server.ingest_url, "recordStore": f"sqlite://{tmp_path / 'r.db'}"}

    def write() -> Any:
        return foreach_partition(rows, "http", options, sink_id="loop", batch_id=3)

    first, again = inside(runner, write), inside(runner, write)
    assert (first.delivered, again.delivered, again.skipped) == (400, 0, 400)
    assert server.stats().unique_ids == 400


def test_foreach_batch_with_a_sink_id_is_built_and_runs(
    runner: str, spark: Any, server: FaultServer, tmp_path: Path
) -> None:
    rows = spark.range(300).selectExpr("concat('b', id) AS id")
    options = {"url": server.ingest_url, "recordStore": f"sqlite://{tmp_path / 'r.db'}"}

    def stream() -> Any:
        sink = foreach_batch("http", options, sink_id="loop-stream")
        sink(rows, 0)  # outside a query a BatchSink is one run of its own
        return sink

    sink = inside(runner, stream)
    assert sink.totals.delivered == 300 and server.stats().unique_ids == 300


def test_a_bad_record_store_is_still_an_option_error(runner: str, spark: Any) -> None:
    from asyncsink import OptionError

    missing = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"
    options = {"url": "http://127.0.0.1:9/x", "recordStore": missing}
    with pytest.raises(OptionError, match="recordStore"):
        inside(runner, lambda: foreach_batch("http", options, sink_id="bad"))


def test_the_data_source_writes_with_a_sink_id(
    runner: str, session: Any, server: FaultServer, tmp_path: Path
) -> None:
    rows = session.range(200).selectExpr("concat('d', id) AS id")

    def write() -> None:
        (rows.write.format("asyncsink-http").option("url", server.ingest_url)
         .option("sinkId", "loop-source").option("batchId", "1")
         .option("recordStore", f"sqlite://{tmp_path / 'r.db'}").mode("append").save())  # fmt: skip

    inside(runner, write)
    assert server.stats().unique_ids == 200


def test_the_records_command_lists_and_purges(
    runner: str, spark: Any, server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite://{tmp_path / 'r.db'}"
    rows = spark.range(50).selectExpr("concat('c', id) AS id")
    foreach_partition(rows, "http", {"url": server.ingest_url, "recordStore": store},
                      sink_id="loop-cli", batch_id=1)  # fmt: skip
    assert inside(runner, lambda: records_main(["list", store])) == 0
    assert "loop-cli" in capsys.readouterr().out
    assert inside(runner, lambda: records_main(["purge", store, "loop-cli", "--all"])) == 0
    assert "purged 2 scopes" in capsys.readouterr().out
    assert inside(runner, lambda: records_main(["list", store])) == 0
    assert "loop-cli" not in capsys.readouterr().out
