"""Change data capture into the Elasticsearch test endpoint through Spark, with
``versionField`` and no ordering: 2,000 keys x 25 changes (index and delete), requests
answered out of order (0-50 ms), 20% of items failed inside 2xx answers, 5% of requests
failed whole, and a task killed mid-batch. Every key ends with its last change, and
deleted keys are absent: through ``foreach_batch`` on a stream (the snippet of
docs/sinks/elasticsearch.md, run as written but for its endpoints) and through the data
source ``asyncsink-elasticsearch``."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.servers.elasticsearch import ElasticsearchServer, EsFaults
from tests.sinks.cdc import FAULTS, changes, final_state, wrong_keys
from tests.sinks.test_elasticsearch_cdc import create_index

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
ROWS = changes()
EXPECTED = final_state(ROWS)
SCHEMA = "id STRING, op STRING, lsn LONG, name STRING, amount DOUBLE"
FAST = {"maxBatchSize": "200", "maxRetries": "40", "initialBackoffMs": "1",
        "maxBackoffMs": "50", "rateLimiting": "false", "adaptiveConcurrency": "false"}  # fmt: skip


@pytest.fixture(scope="module")
def es_server() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer() as server:
        yield server


@pytest.fixture
def es(es_server: ElasticsearchServer) -> ElasticsearchServer:
    es_server.set_faults(EsFaults())
    es_server.reset()
    for index in ("customers", "events"):
        create_index(es_server.url, index)
    es_server.set_faults(FAULTS)
    return es_server


def write_changes(folder: Path, files: int) -> None:
    """The changes in log order, cut into ``files`` files (one micro-batch each)."""
    folder.mkdir(parents=True)
    size = -(-len(ROWS) // files)
    for f in range(files):
        part = ROWS[f * size : (f + 1) * size]
        (folder / f"part-{f}.json").write_bytes(b"\n".join(map(orjson.dumps, part)) + b"\n")


def versioned_writes_snippet() -> str:
    page = (ROOT / "docs" / "sinks" / "elasticsearch.md").read_text(encoding="utf-8")
    section = page.split("## Versioned writes", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_foreach_batch_on_a_stream_ends_with_every_keys_last_change(
    spark: Any, es: ElasticsearchServer, tmp_path: Path
) -> None:
    write_changes(tmp_path / "in", files=2)
    source = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    )
    code = versioned_writes_snippet()
    killed = tmp_path / "killed"
    extra = {**FAST, "killAfterRequests": "20", "killMarker": str(killed)}
    for old, new in [
        ('"elasticsearch"', '"tests.spark.es_writers:create_killing_es_writer"'),
        ("https://es.internal:9200", es.url),
        ("postgresql://etl@db.internal/pipelines", f"sqlite:///{tmp_path}/records.db"),
        ('"customers-cdc"', f'"customers-cdc-{uuid.uuid4().hex[:6]}"'),
        ('"excludeFields": "op",', f'"excludeFields": "op", **{extra!r},'),
    ]:
        assert old in code
        code = code.replace(old, new)
    scope: dict[str, Any] = {
        "changes": source.repartition(2, "id"),  # a key's changes stay in one partition
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    exec(compile(code, "docs/sinks/elasticsearch.md", "exec"), scope)
    query, sink = scope["query"], scope["sink"]
    try:
        deadline = time.monotonic() + 400
        while len(query.recentProgress) < 2 or query.status["isDataAvailable"]:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline
            query.processAllAvailable()
    finally:
        query.stop()
    assert wrong_keys(EXPECTED, es.documents("customers")) == []
    totals = sink.totals
    assert totals.skipped_stale > 0 and totals.retried > 0  # the faults were felt
    assert killed.exists()
    assert totals.skipped > 0  # the killed task's retry skipped what it had delivered


def test_the_data_source_with_a_task_failed_mid_batch_ends_with_every_keys_last_change(
    spark: Any, es: ElasticsearchServer, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    write_changes(tmp_path / "in", files=1)
    fail_at = ROWS[len(ROWS) // 3]["lsn"]
    failed = str(tmp_path / "failed")

    def checked(lsn: int) -> int:
        from pyspark import TaskContext

        context = TaskContext.get()
        if lsn == fail_at and context is not None and context.attemptNumber() == 0:
            with open(failed, "w"):
                pass
            raise ValueError("task failed mid-batch")
        return lsn

    flaky = F.udf(checked, "long", useArrow=False)
    df = spark.read.schema(SCHEMA).json(str(tmp_path / "in")).repartition(2, "id")
    (
        df.withColumn("lsn", flaky("lsn"))
        .write.format("asyncsink-elasticsearch")
        .options(
            hosts=es.url,
            index="events",
            idField="id",
            operationField="op",
            versionField="lsn",
            excludeFields="op",
            **FAST,
        )  # fmt: skip
        .option("recordStore", f"sqlite:///{tmp_path}/records.db")
        .option("sinkId", "cdc-ds")
        .option("batchId", "1")
        .mode("append")
        .save()
    )
    assert Path(failed).exists()
    assert wrong_keys(EXPECTED, es.documents("events")) == []
    assert es.stats().items_by_status.get(409, 0) > 0  # reordered writes refused as stale
