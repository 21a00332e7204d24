"""Dead letters in a directory from ``foreach_batch``: each micro-batch publishes its
tasks' letters once, a micro-batch run again adds nothing, and ``spark.read.json`` reads
them back with the batch they belong to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from asyncsink.spark import foreach_batch
from tests.servers.answering import AnsweringServer
from tests.spark.test_failure_policy import FAST, REFUSED, answers

pytestmark = pytest.mark.spark


def test_a_micro_batch_run_again_publishes_its_letters_once(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "letters").as_uri()
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "successStatusCodes": "200-299,409",
                   "badRecordStatusCodes": "422", "deadLetter": url}  # fmt: skip
        sink = foreach_batch("http", options)
        for batch_id in (0, 0, 1):  # batch 0 replayed, as a restarted query runs it again
            sink(answers(spark), batch_id)
    assert sink.totals.dead_lettered == 3 * len(REFUSED)  # each run hands them over
    found = [row.asDict() for row in spark.read.json(url).collect()]
    by_batch = {b: sorted(json.loads(x["record"])["id"] for x in found if x["batch_id"] == b)
                for b in (0, 1)}  # fmt: skip
    assert by_batch == {0: sorted(REFUSED), 1: sorted(REFUSED)}
    assert {(x["cause"], x["status"], x["sink"], x["sink_id"]) for x in found} == {
        ("rejected", 422, "http", None)
    }
    assert list((tmp_path / "letters" / "_pending").iterdir()) == []
