"""A cluster with two executor JVMs and PostgreSQL records: a task killed after some of
its requests were answered is retried on the other executor, which skips what the first
attempt recorded, and every row is held once; the default SQLite store is refused on that
master before any task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink.stores import open_store
from asyncsink.testing import FaultServer
from tests.spark.cluster_postgres_job import KILL_AFTER_ANSWERS

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.timeout(600)]

JOB = Path(__file__).with_name("cluster_postgres_job.py")


def test_a_killed_task_on_a_cluster_delivers_each_row_once_with_postgresql_records(
    postgres_url: str, server: FaultServer, tmp_path: Path
) -> None:
    store = f"{postgres_url}?table=cluster_{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "XDG_STATE_HOME": str(tmp_path / "state"),  # the default store, refused anyway
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_postgres_job", server.ingest_url, store],
        env=env,
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["executors"] == 2

    refusal = result["refusal"]
    assert "the default record store" in refusal and "local-cluster[2,1,1024]" in refusal
    assert "postgresql://" in refusal and "recordStoreScope=machine" in refusal
    assert result["refused_jobs"] == [], "refused before any Spark job ran"

    ids = server.applied_ids()
    assert len(ids) == 4000 and len(set(ids)) == 4000, "every row held once"
    assert result["delivered"] + result["skipped"] == 4000
    # The killed attempt's five answered requests left with durable records: the retry
    # skipped those recorded SUCCEEDED and re-sent those still PENDING, as they were.
    recovered = result["skipped"] // 100 + result["resent_calls"]
    assert recovered >= KILL_AFTER_ANSWERS, result
    assert server.stats().duplicates == 0

    scopes = anyio.run(_scopes, store)
    assert [(info.scope.partition_id, info.completed) for info in scopes] == [(0, True), (1, True)]
    assert [info.record_count for info in scopes] == [2, 1], "summaries; the batch on 0"


async def _scopes(url: str) -> list[Any]:
    async with open_store(url) as store:
        return await store.scopes("cluster-pg")
