"""The docs' own writer ("Writing a sink"), run from Spark as the page
says: through its factory and as a registered sink, rows read through Arrow (dicts)
and rows read through ``df.rdd`` (``Row`` objects) alike reach the endpoint as JSON
objects with their field names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from asyncsink.sinks import register_sink, registry
from asyncsink.spark import foreach_partition, register_data_sources
from asyncsink.testing import FaultServer
from tests.test_docs_sink_example import code_blocks

ROWS = 600

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def webhook(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The docs page's two modules, shipped to the Python workers; the factory's name."""
    folder: Path = tmp_path_factory.mktemp("readme-writer")
    program, factory = code_blocks("writing-a-sink.md")[:2]
    for name, code in (("webhook.py", program), ("webhook_spark.py", factory)):
        (folder / name).write_text(code)
    # The factory module first: the workers import it, and it imports the program.
    spark.sparkContext.addPyFile(str(folder / "webhook.py"))
    spark.sparkContext.addPyFile(str(folder / "webhook_spark.py"))
    return "webhook_spark:create_writer"


def frame(spark: Any, *, with_timestamp: bool) -> Any:
    columns = ["concat('row-', cast(id AS string)) AS id", "id AS value"]
    if with_timestamp:  # not read through Arrow: the writer gets Row objects
        columns.append("timestamp '2026-11-23 10:00:00' AS at")
    return spark.range(0, ROWS, 1, 2).selectExpr(*columns)


@pytest.mark.parametrize("with_timestamp", [False, True], ids=["arrow-dicts", "rows"])
def test_the_readme_writer_delivers_rows_with_their_field_names(
    webhook: str, spark: Any, server: FaultServer, with_timestamp: bool
) -> None:
    options = {"url": server.ingest_url, "maxBatchSize": "200"}
    stats = foreach_partition(frame(spark, with_timestamp=with_timestamp), webhook, options)
    assert stats.delivered == ROWS
    held = server.stats()
    assert held.entries_rejected == 0  # every entry a JSON object with its fields
    assert sorted(server.applied_ids()) == sorted(f"row-{i}" for i in range(ROWS))


def test_the_readme_writer_as_a_registered_sink_and_data_source(
    webhook: str, spark: Any, server: FaultServer
) -> None:
    with pytest.MonkeyPatch.context() as patch:  # registered for this test only
        patch.setattr(registry, "_SINKS", dict(registry._SINKS))
        register_sink("webhook", webhook)
        register_data_sources(spark)
        df = frame(spark, with_timestamp=False)
        df.write.format("asyncsink-webhook").option("url", server.ingest_url).mode("append").save()
    assert sorted(server.applied_ids()) == sorted(f"row-{i}" for i in range(ROWS))
    assert server.stats().entries_rejected == 0


def test_a_row_and_its_dict_encode_alike(webhook: str, spark: Any) -> None:
    import webhook as program  # the docs page's module, importable here too
    from pyspark.sql import Row

    writer = program.WebhookWriter("http://127.0.0.1:9/")
    row = Row(id="row-1", value=1, at=dt.date(2026, 11, 23))
    assert writer.convert(row) == writer.convert(row.asDict())
    assert writer.convert(row) == b'{"id": "row-1", "value": 1, "at": "2026-11-23"}'
