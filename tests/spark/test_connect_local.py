"""A user's own ``remote("local[2]")`` session: the entry points work in a process that
runs Spark Connect sessions only, and a foreachBatch sinkId without its checkpoint is
refused there at once, on the client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncsink.testing import FaultServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JOB = Path(__file__).with_name("connect_local_job.py")


def test_every_entry_point_under_remote_local(server: FaultServer, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [sys.executable, str(JOB), server.ingest_url, f"sqlite:///{tmp_path}/r.db"],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["session"] == "pyspark.sql.connect.session"
    assert seen["flat"] == 1000 and seen["events"] == 1000
    assert "checkpoint_location=" in seen["refused"]
    ids = server.applied_ids()
    assert len(ids) == len(set(ids))  # each row once
    prefixes = {prefix: sum(i.startswith(prefix) for i in ids) for prefix in "fed"}
    assert prefixes == {"f": 1000, "e": 1000, "d": 1000}
