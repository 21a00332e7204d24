"""Every entry point works from a notebook cell: notebooks built here run on a real IPython
kernel, whose running asyncio loop every cell executes in, in a classic session and under
Spark Connect.

The notebooks hold the README's three snippets (pointed at the fault-injecting endpoint,
kinesalite and the Elasticsearch-compatible endpoint), every program of ``examples/``, a
``foreach_batch`` stream with ``sink_id`` and a data source write with ``sinkId``. Each
destination then holds every row exactly once. A second test interrupts a durable
``foreach_partition`` mid-way, as the notebook's interrupt button does, and runs the same
cell again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from asyncsink.testing import Faults, FaultServer
from tests.servers.elasticsearch import ElasticsearchServer

from .notebook import Kernel, errors, run_notebook, session_cell, text_of
from .test_docs_snippets import kinesis_stream, readme_snippet, stream_ids  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.emulator, pytest.mark.timeout(900)]

ROWS = 300


def swapped(code: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        assert old in code, old
        code = code.replace(old, new)
    return code


def write_events(folder: Path) -> None:
    folder.mkdir(parents=True)
    lines = (orjson.dumps({"id": f"e{i}", "user_id": f"u{i % 9}", "n": i}) for i in range(ROWS))
    (folder / "part-0.json").write_bytes(b"\n".join(lines) + b"\n")


def drained(name: str) -> str:
    return f"{name}.processAllAvailable()\n{name}.stop()"


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_every_entry_point_delivers_each_row_once_from_a_notebook(
    mode: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kinesis_stream: tuple[Any, str],  # noqa: F811 - the fixture
    kinesalite_endpoint: str,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remote = request.getfixturevalue("connect_server").url if mode == "connect" else None
    # the kernel, and the Python workers its Spark starts, take these from the environment
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    client, stream = kinesis_stream
    write_events(tmp_path / "in")
    store = f"sqlite://{tmp_path / 'records.db'}"
    with (
        FaultServer(require_auth="Bearer t0ken") as api,
        FaultServer(Faults(latency_ms=2)) as source_api,
        ElasticsearchServer() as es,
    ):
        cells = [
            session_cell(remote),
            f"""
            events = spark.readStream.schema("id STRING, user_id STRING, n LONG").json(
                {str(tmp_path / "in")!r})
            orders = spark.range({ROWS}).selectExpr(
                "concat('o', id) AS order_id", "id * 2 AS amount")
            token, api_key = "t0ken", "a2V5OnNlY3JldA=="
            """,
            swapped(
                readme_snippet("http"),
                {
                    "https://api.example.com/ingest": api.ingest_url,
                    "/checkpoints/events": str(tmp_path / "checkpoint-http"),
                    "postgresql://etl@db.internal/pipelines": store,
                },
            ),  # fmt: skip
            drained("query"),
            "sink  # a BatchSink shows its batches as a table",
            swapped(
                readme_snippet("kinesis"),
                {
                    '"streamName": "events"': f'"streamName": "{stream}"',
                    '"region": "eu-west-1"': f'"region": "us-east-1", "endpointUrl": '
                    f'"{kinesalite_endpoint}", "awsAccessKeyId": "nb", "awsSecretAccessKey": "nb"',
                    "/checkpoints/kinesis": str(tmp_path / "checkpoint-kinesis"),
                    "dynamodb://asyncsink-records?region=eu-west-1": store,
                },
            ),  # fmt: skip
            drained("query"),
            swapped(
                readme_snippet("elasticsearch"),
                {
                    "https://es.internal:9200": es.url,
                    "postgresql://etl@db.internal/pipelines": store,
                },
            )
            + "\nstats",  # fmt: skip
            f"""
            (orders.write.format("asyncsink-http").option("url", {source_api.ingest_url!r})
                .option("sinkId", "nb-source").option("batchId", "4")
                .option("recordStore", {store!r}).mode("append").save())
            """,
            *example_cells(remote, source_api.ingest_url, es.url, store, tmp_path),
            f"""
            import kinesis_stream, pathlib
            kevents = spark.readStream.schema("id STRING, user STRING").json(
                {str(tmp_path / "kin")!r})
            kinesis_stream.run(kevents, {stream!r}, "us-east-1", "nb-{uuid.uuid4().hex[:6]}",
                               pathlib.Path({str(tmp_path / "checkpoint-example")!r}),
                               {kinesalite_endpoint!r}, {moto_endpoint!r})
            """,
        ]
        if remote is None:  # a sink of one's own needs its module on the executors
            cells.append(custom_sink_cell(source_api.ingest_url))
        (tmp_path / "kin").mkdir()
        lines = (orjson.dumps({"id": f"k{i}", "user": f"u{i % 5}"}) for i in range(100))
        (tmp_path / "kin" / "part-0.json").write_bytes(b"\n".join(lines))
        notebook = run_notebook(cells, tmp_path)
        assert errors(notebook) == []
        http = api.stats()
        assert (http.entries_received, http.unique_ids, http.duplicates) == (ROWS, ROWS, 0)
        orders = ROWS if remote is None else 800  # the example indexes 800 under Connect
        assert set(es.documents("orders")) == {f"o{i}" for i in range(orders)}
        source = source_api.stats()
        extra = 1200 if remote is None else 999  # the custom sink's rows, or the example's
        assert (source.unique_ids, source.duplicates) == (ROWS + extra, 0)
    ids = stream_ids(client, stream)
    assert sorted(ids) == sorted([f"e{i}" for i in range(ROWS)] + [f"k{i}" for i in range(100)])
    shown = {number: text_of(cell) for number, cell in enumerate(notebook.cells)}
    # under Spark Connect the batches run on the server: the client's sink counts none
    assert (
        "<table>" in shown[4]
        and ("all 1 batch<" if remote is None else "all 0 batches<") in shown[4]
    )
    assert "<table>" in shown[7] and f"{ROWS:,}" in shown[7]
    assert "1 dead letter(s)" in shown[9]  # and the endpoint holds the 999 others
    assert remote is not None or "999 rows delivered" in shown[9]  # on_batch runs on a server
    indexed = 5000 if remote is None else 800
    assert f"{indexed} documents indexed; 0 sent by the re-run" in shown[10]


def example_cells(remote: str | None, url: str, es_url: str, store: str, tmp: Path) -> list[str]:
    """The programs of ``examples/``: run as programs in a classic session; under Spark
    Connect, where a program's own ``SparkSession.builder.master`` cannot start, through
    the functions they run on the cell's session."""
    if remote is None:
        return [
            "import http_stream; assert http_stream.main() == 0",
            "import elasticsearch_backfill; assert elasticsearch_backfill.main() == 0",
        ]
    return [
        f"""
        import http_stream, pathlib
        workdir = pathlib.Path({str(tmp / "example-http")!r})
        http_stream.write_input(workdir / "in", 1000)
        batches = http_stream.run(spark, {url!r}, "t0ken", workdir)
        print(sum(s.delivered for s in batches.values()), "rows delivered")
        print((workdir / "dead-letters.jsonl").read_text().count("\\n"), "dead letter(s)")
        """,
        f"""
        import elasticsearch_backfill as example
        orders_800 = example.orders_frame(spark, 800)
        first = example.backfill(orders_800, {es_url!r}, {store!r}, batch_id=7)
        again = example.backfill(orders_800, {es_url!r}, {store!r}, batch_id=7)
        print(first.delivered, "documents indexed;", again.delivered, "sent by the re-run")
        """,
    ]


def custom_sink_cell(url: str) -> str:
    return f"""
        import custom_sink
        from asyncsink.spark import foreach_batch, register_data_sources
        custom_sink.register()
        register_data_sources(spark)
        spark.sparkContext.addPyFile(custom_sink.__file__)
        rows = spark.range(600).selectExpr("concat('c', id) AS id", "id % 3 AS kind")
        rows.write.format("asyncsink-collector").option("endpoint", {url!r}).mode("append").save()
        more = spark.range(600).selectExpr("concat('d', id) AS id")
        foreach_batch("collector", {{"endpoint": {url!r}}})(more, 0)
    """


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    running = Kernel(tmp_path)
    yield running
    running.close()


def test_an_interrupted_durable_write_cancels_its_jobs_and_a_rerun_delivers_the_rest_once(
    kernel: Kernel, tmp_path: Path
) -> None:
    rows = 200_000
    with FaultServer(Faults(latency_ms=20)) as server:
        kernel.run(session_cell(None))
        kernel.run(f"""
            from asyncsink.spark import foreach_partition
            df = spark.range({rows}).selectExpr("concat('e', id) AS id", "id AS n").repartition(4)
        """)
        cell = f"""
            stats = foreach_partition(df, "http", {{
                "url": {server.ingest_url!r}, "maxInFlightRequests": "2",
                "recordStore": "sqlite://{tmp_path / "records.db"}",
            }}, sink_id="nb-backfill", batch_id=1)
        """
        running = kernel.start(cell)
        deadline = time.monotonic() + 120
        while server.stats().entries_received < 10_000:
            assert time.monotonic() < deadline, "the write did not start sending"
            time.sleep(0.05)
        kernel.interrupt()
        error, text = kernel.outcome(running)
        assert error == "KeyboardInterrupt", text
        assert "interrupted; cancelling its Spark jobs" in text
        assert kernel.run("print(spark.sparkContext.statusTracker().getActiveJobsIds())") == "[]\n"
        stopped = server.stats().entries_received
        assert stopped < rows, "the interrupt came too late to prove anything"
        time.sleep(3)  # past spark.python.task.killTimeout: no writer sends any more
        assert server.stats().entries_received == stopped
        kernel.run(cell)
        assert "delivered" in kernel.run("print(stats.summary())")
        done = server.stats()
    assert (done.unique_ids, done.duplicates) == (rows, 0)
