"""The docs' own writer ("Writing a sink"), run from Spark as the page says: as a
registered sink, through foreach_partition and as a data source, rows read through Arrow
(dicts) and rows converted by PySpark (``Row`` objects) alike reach the endpoint as JSON
objects with their field names."""

from __future__ import annotations

import datetime as dt
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncsink.plugins import sinks as registry
from asyncsink.spark import foreach_partition, register_data_sources
from asyncsink.testing import FaultServer
from tests.test_docs_sink_example import code_blocks

ROWS = 600

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def webhook(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The docs page's two modules, shipped to the Python workers, and its sink
    registered (for this module's tests only); the sink's name."""
    folder: Path = tmp_path_factory.mktemp("readme-writer")
    program, spark_module = code_blocks("writing-a-sink.md")[:2]
    for name, code in (("webhook.py", program), ("webhook_spark.py", spark_module)):
        (folder / name).write_text(code)
    spark.sparkContext.addPyFile(str(folder / "webhook.py"))
    spark.sparkContext.addPyFile(str(folder / "webhook_spark.py"))
    sys.path.insert(0, str(folder))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "_SINKS", registry._SINKS.copy())
        importlib.import_module("webhook_spark").register()
        register_data_sources(spark)
        yield "webhook"
    sys.path.remove(str(folder))
    for name in ("webhook", "webhook_spark"):
        sys.modules.pop(name, None)


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
    df = frame(spark, with_timestamp=False)
    df.write.format(f"asyncsink-{webhook}").option("url", server.ingest_url).mode("append").save()
    assert sorted(server.applied_ids()) == sorted(f"row-{i}" for i in range(ROWS))
    assert server.stats().entries_received == ROWS
    assert server.stats().entries_rejected == 0


def test_a_row_and_its_dict_encode_alike(webhook: str, spark: Any) -> None:
    import webhook as program  # the docs page's module, importable here too
    from pyspark.sql import Row

    writer = program.WebhookWriter("http://127.0.0.1:9/")
    row = Row(id="row-1", value=1, at=dt.date(2026, 11, 23))
    assert writer.convert(row) == writer.convert(row.asDict())
    assert writer.convert(row) == b'{"id": "row-1", "value": 1, "at": "2026-11-23"}'
