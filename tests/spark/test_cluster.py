"""Completion on a cluster: records written by two executor JVMs into DynamoDB, the scopes
completed by the driver once Spark committed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink.stores import open_store
from asyncsink.testing import FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.emulator, pytest.mark.timeout(600)]

JOB = Path(__file__).with_name("cluster_job.py")


def test_records_of_two_executors_are_completed_by_the_driver(
    moto_endpoint: str, server: FaultServer
) -> None:
    store = f"dynamodb://cluster-records?region=us-east-1&endpoint_url={moto_endpoint}"
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [sys.executable, str(JOB), server.ingest_url, store],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats["executors"] == 2
    ids = server.applied_ids()
    assert len(ids) == 4000 and len(set(ids)) == 4000
    assert stats["delivered"] + stats["skipped"] == 4000  # the retry replayed the records
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    scopes = anyio.run(_scopes, store)
    assert sorted(info.scope.partition_id for info in scopes) == [0, 1]
    # each its summary; partition 0 also how many partitions its batch completed
    assert [(info.completed, info.record_count) for info in scopes] == [(True, 2), (True, 1)]


async def _scopes(url: str) -> list[Any]:
    async with open_store(url) as store:
        return await store.scopes("cluster")
