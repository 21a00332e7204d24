"""Dead letters on a cluster: two executor JVMs write them into one ``file://`` directory,
a task killed mid-batch is retried on the other executor, and ``spark.read.json`` gives
each bad record exactly once, with every field; a replay of the same ``batchId`` adds
nothing; a plain path is refused before any job runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncsink.testing import Faults, FaultServer
from tests.spark.cluster_letters_job import ROWS

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).parents[2]
REFUSED = {f"r{i}" for i in range(ROWS) if i % 100 == 7}
TOO_LARGE = {f"r{i}" for i in range(ROWS) if i % 100 == 42}


def test_dead_letters_of_a_cluster_appear_once_across_a_killed_task_and_a_replay(
    tmp_path: Path,
) -> None:
    with FaultServer(Faults(latency_ms=2, bad_record_field="bad")) as server:
        done = subprocess.run(
            [sys.executable, "-m", "tests.spark.cluster_letters_job", server.ingest_url,
             str(tmp_path)],
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
                 "SPARK_LOCAL_IP": "127.0.0.1"},
            cwd=ROOT, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        applied = server.applied_ids()
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["executors"] == 2

    refusal = result["refusal"]
    assert "option 'deadLetter'" in refusal and "recordStoreScope=machine" in refusal
    assert result["refused_jobs"] == [], "refused before any Spark job ran"

    letters = result["letters"]
    by_id = {json.loads(letter["record"])["id"]: letter for letter in letters}
    assert len(letters) == len(by_id) == len(REFUSED) + len(TOO_LARGE), "each letter once"
    assert {i for i, x in by_id.items() if x["cause"] == "rejected"} == REFUSED
    assert {i for i, x in by_id.items() if x["cause"] == "bad_record"} == TOO_LARGE
    for letter in letters:
        rejected = letter["cause"] == "rejected"
        assert letter["status"] == (400 if rejected else None)
        assert letter["error_type"] == ("Rejected" if rejected else "RecordTooLarge")
        assert ("mapping error" if rejected else "maxRecordSizeInBytes") in letter["error"]
        assert (letter["sink_id"], letter["batch_id"], letter["record_base64"]) == (
            "letters", 1, None)  # fmt: skip
        assert letter["sink"].endswith("create_killing_http_writer")
        assert letter["partition"] in (0, 1) and letter["time"].endswith("Z")
    attempts = {(x["partition"], x["attempt"]) for x in letters}
    assert attempts == {(0, 1), (1, 0)}, "partition 0's letters are its retry's"
    assert result["first"]["dead_lettered"] == len(letters)
    assert result["first"]["skipped"] > 0, "the retry skipped what the killed attempt recorded"

    assert result["again"] == {"dead_lettered": 0, "skipped": ROWS}
    assert sorted(map(str, result["letters_after_replay"])) == sorted(map(str, letters))
    pending = tmp_path / "letters" / "_pending"
    assert list(pending.iterdir()) == [], "the killed attempt left nothing staged"

    source = {json.loads(x["record"])["id"]: x for x in result["source_letters"]}
    assert len(source) == len(result["source_letters"]) == len(REFUSED) + len(TOO_LARGE)
    assert {x["sink_id"] for x in source.values()} == {None}
    delivered = [i for i in applied if i not in REFUSED]
    assert len(delivered) == 2 * (ROWS - len(REFUSED) - len(TOO_LARGE))
    assert len(set(delivered)) == ROWS - len(REFUSED) - len(TOO_LARGE)
