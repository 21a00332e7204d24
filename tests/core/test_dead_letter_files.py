"""Dead letters in a directory (``deadLetter`` as a URL): one JSON-lines file per writer
flush, staged under ``_pending`` and published by a move; a replayed scope publishes
nothing twice; a size cap per task; a plain path refused on a cluster."""

from __future__ import annotations

import base64
import json
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink import (
    CallInfo,
    CallLog,
    DeadLetterError,
    OptionError,
    SinkOptions,
    SubmitResult,
)
from asyncsink.policies.dead_letter_files import (
    PENDING,
    DeadLetterFiles,
    LetterScope,
    publish,
)
from asyncsink.spark.spec import SinkSpec
from asyncsink.stores.memory import MemoryStore
from asyncsink.telemetry import record_committed
from tests.core.fakes import Destination, FakeWriter
from tests.durable.harness import SCOPE
from tests.metrics import data_points, total

pytestmark = pytest.mark.anyio


def rejecting(entries: list[Any], call: CallInfo) -> SubmitResult:
    """Refuses the entries ``b"bad..."`` with an item status, as the HTTP sink words it."""
    refused = {i: "HTTP 422: unprocessable" for i, e in enumerate(entries) if e.startswith(b"bad")}
    return SubmitResult(rejected=refused)


def lines_in(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted(folder.glob("*.json"))
        for line in f.read_text().splitlines()
    ]


def scope(attempt: int, partition: int = 0, batch: int = 3) -> LetterScope:
    return LetterScope("http", "orders", "run-1", batch, partition, attempt)


async def write(folder: Path, letters: Any, elements: list[bytes], **options: Any) -> FakeWriter:
    writer = FakeWriter(
        Destination(rejecting),
        options=SinkOptions(max_record_size_in_bytes=50, dead_letter=letters, **options),
    )
    async with writer:
        await writer.write_all(elements)
    return writer


async def test_a_writer_outside_spark_publishes_one_file_at_its_barrier(tmp_path: Path) -> None:
    url = (tmp_path / "letters").as_uri()
    elements = [b'{"n": 1}', b"bad \xff", b"x" * 60, b'{"n": 2}', b"bad two"]
    writer = await write(tmp_path, url, elements)
    assert writer.statistics().dead_lettered == 3
    (published,) = (tmp_path / "letters").glob("*.json")
    assert list((tmp_path / "letters" / PENDING).iterdir()) == []
    lines = {line["position"]: line for line in lines_in(tmp_path / "letters")}
    assert sorted(lines) == [1, 2, 4] and published.name.startswith("letters-")
    assert lines[1]["record"] is None
    assert base64.b64decode(lines[1]["record_base64"]) == b"bad \xff"
    assert (lines[1]["cause"], lines[1]["status"], lines[1]["error_type"]) == (
        "rejected",
        422,
        "Rejected",
    )
    assert "HTTP 422: unprocessable" in lines[1]["error"]
    assert (lines[2]["cause"], lines[2]["status"], lines[2]["error_type"]) == (
        "bad_record",
        None,
        "RecordTooLarge",
    )
    assert lines[2]["record"] == "x" * 60 and lines[4]["record"] == "bad two"
    assert lines[4]["time"].endswith("Z") and "T" in lines[4]["time"]


def test_a_task_attempt_stages_its_file_where_spark_does_not_read(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    letters = DeadLetterFiles(url, scope(attempt=1, partition=2))
    anyio.run(write, tmp_path, letters, [b"ok", b"bad"])
    assert [p.name for p in tmp_path.iterdir()] == [PENDING]  # spark.read skips "_..."
    staged = letters.staged()
    assert staged is not None and len(staged.files) == 1
    pending, final = staged.files[0]
    assert (tmp_path / pending).exists() and ".a1-" in pending
    assert final == "letters-orders-run-1-b3-p2-0.json"
    (line,) = lines_in(tmp_path / PENDING)
    assert {k: line[k] for k in ("sink", "sink_id", "run", "batch_id", "partition")} == {
        "sink": "http",
        "sink_id": "orders",
        "run": "run-1",
        "batch_id": 3,
        "partition": 2,
    }
    assert line["attempt"] == 1 and line["position"] == 1


async def test_publishing_keeps_one_file_per_scope_across_attempts_and_replays(
    tmp_path: Path,
) -> None:
    url = tmp_path.as_uri()
    staged = []
    for attempt in (0, 1):  # a speculative copy that also passed its barrier, and the taken one
        letters = DeadLetterFiles(url, scope(attempt))
        await write(tmp_path, letters, [b"ok", b"bad"])
        staged.append(letters.staged())
    other = DeadLetterFiles(url, scope(0, batch=30))  # another batch's attempt: not touched
    await write(tmp_path, other, [b"bad"])
    assert publish([staged[1]]) == (1, 1)  # the other attempt of batch 3 is deleted
    assert [line["attempt"] for line in lines_in(tmp_path)] == [1]
    replay = DeadLetterFiles(url, scope(0))
    await write(tmp_path, replay, [b"ok", b"bad"])
    assert publish([replay.staged()]) == (0, 1)  # published before: nothing added
    assert [line["attempt"] for line in lines_in(tmp_path)] == [1]
    assert len(list((tmp_path / PENDING).iterdir())) == 1  # batch 30's, until its commit


async def test_a_directory_that_cannot_be_written_fails_the_barrier(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DeadLetterError, match="writing the dead letters") as caught:
        await write(tmp_path, (blocker / "letters").as_uri(), [b"bad"])
    assert "retry writes them again" in str(caught.value)


def test_the_size_cap_fails_the_task_naming_the_option_and_counts(tmp_path: Path) -> None:
    elements = [b"bad-" + bytes(20) for _ in range(5)]
    with pytest.raises(DeadLetterError) as caught:
        anyio.run(partial(write, tmp_path, tmp_path.as_uri(), elements, max_dead_letter_bytes=60))
    message = str(caught.value)
    assert "maxDeadLetterBytes (60)" in message and "2 records went" in message
    assert "2 rejected" in message and "48 bytes of records" in message
    assert not list(tmp_path.glob("*.json"))  # nothing published by a failed writer
    assert SinkOptions.from_options({"maxDeadLetterBytes": "1mb"}).max_dead_letter_bytes == 2**20


def test_a_url_of_a_file_system_pyarrow_does_not_open_is_refused() -> None:
    with pytest.raises(OptionError, match="deadLetter.*s3://"):
        SinkOptions(dead_letter="ftp://user:secret@host/letters")
    try:
        SinkOptions(dead_letter="ftp://user:secret@host/letters")
    except OptionError as exc:
        assert "secret" not in str(exc)


@pytest.mark.parametrize("master", ["local-cluster[2,1,1024]", "yarn", "spark://h:7077"])
def test_a_plain_dead_letter_path_is_refused_on_a_cluster(master: str) -> None:
    options = {"url": "http://127.0.0.1:1/in", "deadLetter": "/tmp/letters.jsonl"}
    with pytest.raises(OptionError) as caught:
        SinkSpec("http", options).check_master(master)
    message = str(caught.value)
    assert "option 'deadLetter'" in message and "recordStoreScope=machine" in message
    assert "s3://" in message
    SinkSpec("http", {**options, "recordStoreScope": "machine"}).check_master(master)
    SinkSpec("http", {**options, "deadLetter": "file:///shared/letters"}).check_master(master)
    SinkSpec("http", options).check_master("local[2]")


async def test_a_retry_hands_over_again_what_an_earlier_attempt_rejected() -> None:
    """The first attempt's letters die with it; its call records say which entries were
    rejected, so the attempt Spark takes holds every letter of the scope."""
    store = MemoryStore()
    elements = [b"ok0", b"bad1", b"ok2", b"bad3", b"ok4", b"ok5"]
    first: list[Any] = []
    writer = FakeWriter(
        Destination(rejecting),
        options=SinkOptions(max_batch_size=2, dead_letter=first.append),
        call_log=CallLog(store, SCOPE),
    )
    with pytest.raises(RuntimeError, match="killed"):
        async with writer:
            await writer.write_all(elements[:4])
            await writer.flush()
            raise RuntimeError("killed after two requests")
    assert [letter.position for letter in first] == [1, 3]
    again: list[Any] = []
    writer = FakeWriter(
        Destination(rejecting),
        options=SinkOptions(max_batch_size=2, dead_letter=again.append),
        call_log=CallLog(store, SCOPE),
    )
    async with writer:
        await writer.write_all(elements)
    assert [(x.position, x.cause, x.status, x.record) for x in again] == [
        (1, "rejected", 422, b"bad1"),
        (3, "rejected", 422, b"bad3"),
    ]
    assert "rejected by the destination: HTTP 422" in again[0].reason
    stats = writer.statistics()
    assert (stats.skipped, stats.dead_lettered, stats.delivered) == (2, 2, 2)
    assert stats.written == stats.skipped + stats.dead_lettered + stats.delivered


def test_dead_letters_are_counted_by_cause(metric_reader: Any, tmp_path: Path) -> None:
    writer = anyio.run(write, tmp_path, [].append, [b"ok", b"bad", b"x" * 60, b"bad"])
    stats = writer.statistics()
    assert stats.dead_letter_causes.counts == (("bad_record", 1), ("rejected", 2))
    assert (stats + stats).dead_letter_causes.counts == (("bad_record", 2), ("rejected", 4))
    record_committed([(stats, writer.metric_attributes())])
    points = data_points(metric_reader)
    name = "asyncsink.entries.dead_lettered"
    for report in ("live", "committed"):
        by_cause = {"asyncsink.report": report, "asyncsink.dead_letter.cause": "rejected"}
        assert total(points, name, **by_cause) == 2
        assert total(points, name, **{"asyncsink.report": report}) == 3


@pytest.mark.emulator
def test_an_s3_directory_gets_the_published_file(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyarrow import fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    host = moto_endpoint.removeprefix("http://")
    s3 = fs.S3FileSystem(endpoint_override=host, scheme="http", region="us-east-1",
                         allow_bucket_creation=True)  # fmt: skip
    s3.create_dir("letters-bucket")
    url = f"s3://letters-bucket/orders?endpoint_override={host}&scheme=http&region=us-east-1"
    letters = DeadLetterFiles(url, scope(attempt=0))
    anyio.run(write, Path("."), letters, [b"ok", b"bad one"])
    staged = letters.staged()
    assert staged is not None
    assert publish([staged]) == (1, 0)
    names = [info.base_name for info in s3.get_file_info(fs.FileSelector("letters-bucket/orders"))]
    assert "letters-orders-run-1-b3-p0-0.json" in names
    with s3.open_input_stream("letters-bucket/orders/letters-orders-run-1-b3-p0-0.json") as f:
        (line,) = [json.loads(x) for x in f.read().splitlines()]
    assert (line["record"], line["cause"], line["status"]) == ("bad one", "rejected", 422)
