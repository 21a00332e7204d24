"""The Kinesis sink settles a lost attempt's calls by reading the shards: a task killed with
requests in flight is replayed, and every row is in the stream once.

The emulator tests kill a writer process (``tests/sinks/kinesis_crash.py``, ``os._exit``)
at each point where a request's fate is unknown to its records, replay the scope in this
process and read every shard back from TRIM_HORIZON. Another producer writes to every
open shard all along, as on a live stream; its records must never be taken for the lost
ones. (It also keeps kinesalite answering: kinesalite never answers an AT_TIMESTAMP
GetShardIterator on a shard that holds no record at or after that time, where Kinesis
returns an iterator at the tip.)
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from asyncsink import CallInfo, CallLog, OptionError, Scope, WriterStatistics
from asyncsink.sinks.kinesis import KinesisEntry, KinesisOptions, KinesisWriter, create_writer
from asyncsink.sinks.kinesis.reconcile import (
    ReconcileSettings,
    StreamScan,
    acknowledged_detail,
    safe_starts,
)
from asyncsink.sinks.kinesis.shards import hash_key
from asyncsink.stores.memory import MemoryStore
from asyncsink.stores.sqlite import SQLiteStore

from .kinesis_crash import REGION, rows, spark_options

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
MAX_HASH = 2**128 - 1


# ---------------------------------------------------------------------------- units


def test_an_answer_keeps_the_highest_sequence_number_per_shard_and_the_calls_sent() -> None:
    results = [
        {"SequenceNumber": "99", "ShardId": "shardId-000000000001"},
        {"SequenceNumber": "100", "ShardId": "shardId-000000000001"},
        {"ErrorCode": "InternalFailure", "ErrorMessage": "x"},
        {"SequenceNumber": "7", "ShardId": "shardId-000000000002"},
        {"SequenceNumber": "98", "ShardId": "shardId-000000000001"},
    ]
    assert acknowledged_detail(results, 12) == {
        "n": 12, "s": {"shardId-000000000001": "100", "shardId-000000000002": "7"}}  # fmt: skip


def test_only_calls_answered_before_a_lost_call_was_sent_give_it_a_starting_point() -> None:
    details = [
        {"n": 3, "s": {"a": "10", "b": "20"}},  # answered when calls 0..2 had been sent
        {"n": 5, "s": {"a": "30"}},
        {"n": 9, "s": {"a": "90", "b": "95"}},  # call 5 may have landed before these
        {"errorCodes": {"x": 1}},  # from a writer that kept no sequence numbers
        None,
    ]
    assert safe_starts(details, 2) == {}
    assert safe_starts(details, 3) == {"a": "10", "b": "20"}
    assert safe_starts(details, 5) == {"a": "30", "b": "20"}
    assert safe_starts(details, 9) == {"a": "90", "b": "95"}


def test_a_record_is_placed_by_its_explicit_hash_key_else_the_md5_of_its_key() -> None:
    assert hash_key(KinesisEntry(b"d", "k", "12345")) == 12345
    digest = hashlib.md5(b"k\xc3\xa9").hexdigest()
    assert hash_key(KinesisEntry(b"d", "k\u00e9")) == int(digest, 16)


def test_reading_is_on_by_default_and_its_budgets_parse_from_spark_options() -> None:
    defaults = KinesisOptions(stream_name="s")
    assert defaults.reconcile_by_reading is True
    assert defaults.reconcile_time_budget_ms == 30_000
    assert defaults.reconcile_byte_budget == 64 * 1024 * 1024
    assert defaults.reconcile_clock_skew_ms == 5_000
    options = {"streamName": "s", "reconcileTimeBudgetMs": "2s", "reconcileByteBudget": "1mb",
               "reconcileClockSkewMs": "250ms"}  # fmt: skip
    log = CallLog(MemoryStore(), Scope("s", 0, 0))
    reconciler = create_writer(options, call_log=log).stream_scan
    assert reconciler is not None
    assert reconciler.settings == ReconcileSettings(
        request_timeout=60.0, clock_skew=0.25, time_budget=2.0, byte_budget=1024 * 1024
    )
    assert create_writer({"streamName": "s"}).stream_scan is None, "nothing to settle without logs"
    off = create_writer({"streamName": "s", "reconcileByReading": "false"}, call_log=log)
    assert off.stream_scan is None
    with pytest.raises(OptionError, match="reconcileByteBudget"):
        create_writer({"streamName": "s", "reconcileByteBudget": "0"})


class Answering:
    """PutRecords that stores everything, with growing sequence numbers per shard."""

    def __init__(self) -> None:
        self.next = 10**20

    async def put_records(self, **params: Any) -> dict[str, Any]:
        results = []
        for record in params["Records"]:
            self.next += 1
            shard = f"shardId-00000000000{hash_key(KinesisEntry(b'', record['PartitionKey'])) % 2}"
            results.append({"SequenceNumber": str(self.next), "ShardId": shard})
        return {"FailedRecordCount": 0, "Records": results}


async def test_acknowledged_calls_record_their_shards_only_with_call_records() -> None:
    store = MemoryStore()
    writer = KinesisWriter(
        KinesisOptions(stream_name="s", partition_key_field="id"),
        call_log=CallLog(store, Scope("s", 0, 0)),
        client=Answering(),
    )
    async with writer:
        await writer.write_all([{"id": i} for i in range(1200)])
    details = writer.recorded_results()
    assert len(details) == 3
    for detail in details:
        assert set(detail) == {"n", "s"} and 1 <= detail["n"] <= 3
        assert set(detail["s"]) <= {"shardId-000000000000", "shardId-000000000001"}
    assert int(details[-1]["s"]["shardId-000000000000"]) > 10**20
    plain = KinesisWriter(KinesisOptions(stream_name="s"), client=Answering())
    async with plain:
        await plain.write_all([{"id": i} for i in range(10)])
    assert plain.recorded_results() == []


def test_the_summary_says_how_many_lost_calls_were_settled_and_how_many_re_sent() -> None:
    assert "lost" not in WriterStatistics(written=5).summary()
    line = WriterStatistics(written=5, reconciled=3, resent_calls=2).summary()
    assert "3 settled by looking them up" in line and "2 re-sent unsettled" in line


class FakeStream:
    """Shards held in memory, read through ListShards/GetShardIterator/GetRecords; the
    first ``throttle`` GetRecords calls are throttled."""

    def __init__(self, shards: list[dict[str, Any]], throttle: int = 0, time_out: int = 0) -> None:
        self.shards = shards
        self.records: dict[str, list[dict[str, Any]]] = {s["ShardId"]: [] for s in shards}
        self.throttle = throttle
        self.time_out = time_out
        self.calls: Counter[str] = Counter()
        self.seq = 1000

    def add(self, shard: str, key: str, data: bytes, at: float) -> str:
        self.seq += 1
        arrival = datetime.datetime.fromtimestamp(at, datetime.UTC)
        record = {"SequenceNumber": str(self.seq), "PartitionKey": key, "Data": data}
        self.records[shard].append({**record, "ApproximateArrivalTimestamp": arrival})
        return str(self.seq)

    async def list_shards(self, **params: Any) -> dict[str, Any]:
        self.calls["ListShards"] += 1
        return {"Shards": self.shards}

    async def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        self.calls[params["ShardIteratorType"]] += 1
        records = self.records[params["ShardId"]]
        if params["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER":
            after = int(params["StartingSequenceNumber"])
            index = next((i for i, r in enumerate(records) if int(r["SequenceNumber"]) > after),
                         len(records))  # fmt: skip
        else:
            at = params["Timestamp"]
            index = next((i for i, r in enumerate(records)
                          if r["ApproximateArrivalTimestamp"] >= at), len(records))  # fmt: skip
        return {"ShardIterator": f"{params['ShardId']}|{index}"}

    async def get_records(self, **params: Any) -> dict[str, Any]:
        self.calls["GetRecords"] += 1
        if self.time_out:
            self.time_out -= 1
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1:1/")
        if self.throttle:
            self.throttle -= 1
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": ""}}
            raise ClientError(error, "GetRecords")  # type: ignore[arg-type]
        shard, index = params["ShardIterator"].split("|")
        page = self.records[shard][int(index) : int(index) + params["Limit"]]
        following = f"{shard}|{int(index) + len(page)}"
        return {"Records": page, "NextShardIterator": following, "MillisBehindLatest": 0}


def shard(index: int, first: int, last: int, *, parent: str | None = None,
          closed: bool = False) -> dict[str, Any]:  # fmt: skip
    value: dict[str, Any] = {
        "ShardId": f"shardId-{index:012d}",
        "HashKeyRange": {"StartingHashKey": str(first), "EndingHashKey": str(last)},
        "SequenceNumberRange": {"StartingSequenceNumber": "1"},
    }
    if parent:
        value["ParentShardId"] = parent
    if closed:
        value["SequenceNumberRange"]["EndingSequenceNumber"] = "2"
    return value


def reconciler_for(stream: FakeStream, **settings: Any) -> StreamScan:
    async def client() -> Any:
        return stream

    values = {"request_timeout": 2.0, "clock_skew": 0.0, "time_budget": 10.0,
              "byte_budget": 10**9, **settings}  # fmt: skip
    return StreamScan(client, {"StreamName": "s"}, "s", ReconcileSettings(**values))


def lost_call(call_id: int, count: int, since: float) -> CallInfo:
    return CallInfo(call_id, "key", "s/0/0", tuple(range(100, 100 + count)), since)


async def test_identical_records_count_once_each_and_other_producers_are_ignored() -> None:
    stream = FakeStream([shard(0, 0, MAX_HASH)])
    since = time.time() - 5
    entries = [KinesisEntry(b"same", "k"), KinesisEntry(b"same", "k"), KinesisEntry(b"b", "k")]
    stream.add("shardId-000000000000", "k", b"same", since - 60)  # before the call: not it
    stream.add("shardId-000000000000", "other", b"same", since + 1)  # another key
    stream.add("shardId-000000000000", "k", b"same", since + 1)  # one of the two copies
    stream.add("shardId-000000000000", "k", b"b", since + 1)
    held = await reconciler_for(stream).held(lost_call(7, 3, since), entries, [])
    assert held == {100, 102}, "one 'same' landed, the other must be sent again"


async def test_throttled_or_timed_out_reads_back_off_and_the_scan_still_settles_the_call() -> None:
    stream = FakeStream([shard(0, 0, MAX_HASH)], throttle=2, time_out=1)
    since = time.time() - 5
    stream.add("shardId-000000000000", "k", b"a", since + 1)
    reconciler = reconciler_for(stream)
    assert await reconciler.held(lost_call(1, 1, since), [KinesisEntry(b"a", "k")], []) == {100}
    (report,) = reconciler.reports
    assert (report.cost.throttled, report.cost.retried, report.cost.get_records) == (2, 1, 4)
    assert (report.settled, report.unsettled, report.found) == (1, 0, 1)


async def test_a_parent_closed_before_the_call_was_sent_is_not_read() -> None:
    half = 2**127
    stream = FakeStream([
        shard(0, 0, MAX_HASH, closed=True),
        shard(1, 0, half - 1, parent="shardId-000000000000"),
        shard(2, half, MAX_HASH, parent="shardId-000000000000"),
    ])  # fmt: skip
    since = time.time() - 5
    acked = stream.add("shardId-000000000001", "k0", b"acked", since - 1)
    entries = [KinesisEntry(b"x", "k", "1"), KinesisEntry(b"y", "k", str(half + 1))]
    stream.add("shardId-000000000001", "k", b"x", since + 1)
    details = [{"n": 4, "s": {"shardId-000000000001": acked}}]
    reconciler = reconciler_for(stream)
    assert await reconciler.held(lost_call(5, 2, since), entries, details) == {100}
    assert stream.calls["AFTER_SEQUENCE_NUMBER"] == 1  # the child with a known record
    assert stream.calls["AT_TIMESTAMP"] == 1  # its sibling; never the parent
    assert reconciler.reports[0].shards_read == 2


async def test_calls_left_pending_together_are_looked_up_in_one_scan() -> None:
    stream = FakeStream([shard(0, 0, MAX_HASH)])
    since = time.time() - 0.2  # the calls can land for another 0.2 s
    for i in range(3):
        stream.add("shardId-000000000000", "k", b"%d" % i, since + 0.1)
    reconciler = reconciler_for(stream, request_timeout=0.3, clock_skew=0.1)
    async with anyio.create_task_group() as tg:
        for i in range(3):
            call = lost_call(i, 1, since)
            tg.start_soon(reconciler.held, call, [KinesisEntry(b"%d" % i, "k")], [])
    assert len(reconciler.reports) == 1 and reconciler.reports[0].settled == 3


async def test_a_scan_out_of_budget_leaves_the_call_unsettled() -> None:
    stream = FakeStream([shard(0, 0, MAX_HASH)])
    since = time.time() - 5
    for i in range(20):
        stream.add("shardId-000000000000", "k", b"other %d" % i, since + 1)
    reconciler = reconciler_for(stream, byte_budget=10)
    assert await reconciler.held(lost_call(1, 1, since), [KinesisEntry(b"a", "k")], []) is None
    assert reconciler.reports[0].reason == "reconcileByteBudget (10)"
    cost = reconciler.reports[0].cost
    assert (cost.get_records, cost.records) == (1, 5), "a page of budget / record size"


# ---------------------------------------------------------------------------- kinesalite


@pytest.fixture
async def admin(kinesalite_endpoint: str) -> AsyncIterator[Any]:
    async with get_session().create_client(
        "kinesis",
        region_name=REGION,
        endpoint_url=kinesalite_endpoint,
        aws_access_key_id="admin",
        aws_secret_access_key="admin",
        config=AioConfig(retries={"mode": "standard", "total_max_attempts": 5}),
    ) as client:
        yield client


@pytest.fixture
async def stream(admin: Any) -> AsyncIterator[str]:
    """A 4-shard stream (deleted afterwards)."""
    name = f"rec-{uuid.uuid4().hex[:10]}"
    deadline = time.monotonic() + 20
    while True:
        try:
            await admin.create_stream(StreamName=name, ShardCount=4)
            break
        except ClientError as exc:  # kinesalite allows 10 shards at once
            if exc.response["Error"]["Code"] != "LimitExceededException":
                raise
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.2)
    await until_active(admin, name)
    yield name
    await admin.delete_stream(StreamName=name)


async def until_active(admin: Any, name: str) -> None:
    while True:
        summary = await admin.describe_stream_summary(StreamName=name)
        if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
            return
        await anyio.sleep(0.02)


async def other_producer(admin: Any, name: str, stop: anyio.Event) -> None:
    """Writes a record to every open shard every 100 ms until ``stop``."""
    round_ = 0
    while not stop.is_set():
        shards = (await admin.list_shards(StreamName=name))["Shards"]
        records = [
            {"Data": b"noise %d %d" % (round_, i), "PartitionKey": "noise",
             "ExplicitHashKey": s["HashKeyRange"]["StartingHashKey"]}
            for i, s in enumerate(shards)
            if "EndingSequenceNumber" not in s["SequenceNumberRange"]
        ]  # fmt: skip
        await admin.put_records(StreamName=name, Records=records)
        round_ += 1
        with anyio.move_on_after(0.1):
            await stop.wait()


async def read_ids(admin: Any, name: str) -> tuple[list[str], set[str]]:
    """The ``id`` of every record of the job in the stream, over every shard from
    TRIM_HORIZON, and the shards that hold them."""
    ids: list[str] = []
    shards_used: set[str] = set()
    for shard_ in (await admin.list_shards(StreamName=name))["Shards"]:
        iterator = (
            await admin.get_shard_iterator(
                StreamName=name, ShardId=shard_["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )
        )["ShardIterator"]
        while iterator:
            page = await admin.get_records(ShardIterator=iterator, Limit=10_000)
            for record in page["Records"]:
                if record["PartitionKey"] != "noise":
                    ids.append(orjson.loads(record["Data"])["id"])
                    shards_used.add(shard_["ShardId"])
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return ids, shards_used


Crash = Callable[..., Awaitable[dict[str, Any]]]


@pytest.fixture
def crash(tmp_path: Path, kinesalite_endpoint: str, stream: str) -> Crash:
    """Runs the dying writer in its own process; returns its settings (marker read)."""

    async def run(point: str, at: int, **extra: Any) -> dict[str, Any]:
        settings = {"endpoint": kinesalite_endpoint, "stream": stream, "sink_id": "crash",
                    "store": str(tmp_path / "records.db"), "marker": str(tmp_path / "died.json"),
                    "rows": 1500, "point": point, "at": at, **extra}  # fmt: skip
        argv = [sys.executable, "-m", "tests.sinks.kinesis_crash", orjson.dumps(settings).decode()]
        done = await anyio.run_process(argv, cwd=ROOT, check=False)
        died = anyio.Path(settings["marker"])
        assert done.returncode == 1 and await died.exists(), done.stderr.decode()[-3000:]
        return {**settings, "died": orjson.loads(await died.read_bytes())}

    return run


async def replay(settings: dict[str, Any], **options: str) -> KinesisWriter:
    """The retry: the same scope and rows, in this process."""
    store = SQLiteStore(settings["store"])
    call_log = CallLog(store, Scope(settings["sink_id"], 0, 0))
    writer = create_writer({**spark_options(settings), **options}, call_log=call_log)
    async with writer:
        await writer.write_all(rows(settings["rows"]))
    return writer


def assert_each_row_once(ids: list[str], count: int) -> None:
    held = Counter(ids)
    lost = count - len(held)
    duplicates = sum(n - 1 for n in held.values())
    assert (lost, duplicates) == (0, 0), f"{lost} lost, {duplicates} duplicates"
    assert set(held) == {row["id"] for row in rows(count)}


@pytest.mark.emulator
@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("point", "at", "keys"),
    [
        ("before_send", 12, "id"),
        ("after_apply", 12, "id"),
        ("before_succeeded", 10, "id"),
        ("after_apply", 12, "random"),  # spread keys: the retry draws the same ones
    ],
)
async def test_a_writer_killed_with_calls_in_flight_is_replayed_without_loss_or_duplicates(
    admin: Any,
    stream: str,
    crash: Crash,
    point: str,
    at: int,
    keys: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = anyio.Event()
    extra = {"options": {"partitionKeyMode": "random"}} if keys == "random" else {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(other_producer, admin, stream, stop)
        settings = await crash(point, at, **extra)
        caplog.set_level(logging.INFO, logger="asyncsink.kinesis")
        writer = await replay(settings)
        stop.set()
    ids, shards_used = await read_ids(admin, stream)
    assert_each_row_once(ids, settings["rows"])
    assert len(shards_used) == 4
    stats = writer.statistics()
    assert stats.reconciled >= 1 and stats.resent_calls == 0, stats.summary()
    assert stats.skipped + stats.delivered == settings["rows"]
    assert writer.stream_scan is not None
    (report,) = writer.stream_scan.reports  # the lost calls were looked up together
    assert report.unsettled == 0 and report.settled == stats.reconciled
    if point != "before_send":  # the call applied before the death is found, not re-sent
        assert report.found >= 50
    assert report.cost.get_records <= 4 * report.calls + 8, "reads stop once calls are found"
    assert "until their requests can no longer land" in caplog.text
    assert "by reading Kinesis stream" in caplog.text


@pytest.mark.emulator
@pytest.mark.timeout(120)
async def test_calls_lost_across_shard_splits_are_found_in_parents_and_children(
    admin: Any, stream: str, crash: Crash
) -> None:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(other_producer, admin, stream, stop)
        # shard 0 splits while the first attempt writes; it dies 10 requests later
        settings = await crash(
            "after_apply", 16, split_at=6, split_shard="shardId-000000000000", rows=2000
        )
        # shard 1, where the lost calls' records went, splits before the retry
        await until_active(admin, stream)
        listed = (await admin.list_shards(StreamName=stream))["Shards"]
        one = next(s for s in listed if s["ShardId"] == "shardId-000000000001")["HashKeyRange"]
        middle = (int(one["StartingHashKey"]) + int(one["EndingHashKey"])) // 2
        await admin.split_shard(
            StreamName=stream, ShardToSplit="shardId-000000000001", NewStartingHashKey=str(middle)
        )
        await until_active(admin, stream)
        writer = await replay(settings)
        stop.set()
    ids, shards_used = await read_ids(admin, stream)
    assert_each_row_once(ids, settings["rows"])
    assert len(shards_used) == 8, "rows in both split parents and all four children"
    stats = writer.statistics()
    assert stats.reconciled >= 1 and stats.resent_calls == 0, stats.summary()
    assert writer.stream_scan is not None
    (report,) = writer.stream_scan.reports
    assert report.shards_listed == 8 and report.found >= 50 and report.unsettled == 0


@pytest.mark.emulator
@pytest.mark.timeout(90)
async def test_a_scan_out_of_budget_re_sends_the_calls_and_says_how_many(
    admin: Any, stream: str, crash: Crash, caplog: pytest.LogCaptureFixture
) -> None:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(other_producer, admin, stream, stop)
        settings = await crash("after_apply", 12)
        writer = await replay(settings, reconcileByteBudget="1")
        stop.set()
    ids, _ = await read_ids(admin, stream)
    held = Counter(ids)
    assert len(held) == settings["rows"], "nothing lost"
    assert sum(held.values()) - len(held) >= 1, "the applied call was re-sent: at least once"
    stats = writer.statistics()
    assert stats.resent_calls >= 1 and stats.reconciled == 0
    assert f"{stats.resent_calls} re-sent unsettled" in stats.summary()
    assert "could not settle" in caplog.text and "reconcileByteBudget (1)" in caplog.text


# An answer that fails a call: HTTP status, AWS error code, and whether the records were
# stored before it came (a gateway's timeout, a server-side failure) or not (a throttle).
FAILED_ANSWERS = {
    "gateway": (504, "504", True),
    "internal": (500, "InternalFailure", True),
    "throttled": (400, "ProvisionedThroughputExceededException", False),
}


class LosingAnswers:
    """A Kinesis client whose ``put_records`` loses the answer to the calls numbered in
    ``lose`` (counting from 0): ``"after"`` stores the records, then the connection
    closes without an answer; ``"never"`` cannot connect at all; a name of
    ``FAILED_ANSWERS`` answers with that error, having stored the records or not."""

    def __init__(self, real: Any, lose: dict[int, str]) -> None:
        self.real = real
        self.lose = lose
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def put_records(self, **params: Any) -> Any:
        number, self.calls = self.calls, self.calls + 1
        how = self.lose.get(number)
        if how == "never":
            refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1", error=refused)
        if how in FAILED_ANSWERS:
            status, code, stored = FAILED_ANSWERS[how]
            if stored:
                await self.real.put_records(**params)
            error = {"Error": {"Code": code, "Message": how},
                     "ResponseMetadata": {"HTTPStatusCode": status}}  # fmt: skip
            raise ClientError(error, "PutRecords")  # type: ignore[arg-type]
        answer = await self.real.put_records(**params)
        if how == "after":
            raise ConnectionClosedError(endpoint_url="http://127.0.0.1:1")
        return answer


async def deliver_with_records(
    admin: Any, stream: str, endpoint: str, lose: dict[int, str]
) -> KinesisWriter:
    """600 rows, with call records, through a client that loses the answers ``lose``
    names (see ``LosingAnswers``); each row must be in the stream once."""
    settings = {"endpoint": endpoint, "stream": stream, "rows": 600}
    call_log = CallLog(MemoryStore(), Scope("lost-answers", 0, 0))
    client = LosingAnswers(admin, lose)
    writer = create_writer(spark_options(settings), call_log=call_log, client=client)
    async with writer:
        await writer.write_all(rows(settings["rows"]))
    ids, _ = await read_ids(admin, stream)
    assert_each_row_once(ids, settings["rows"])
    return writer


@pytest.mark.emulator
@pytest.mark.timeout(90)
async def test_answers_lost_within_an_attempt_are_settled_by_reading_the_stream(
    admin: Any, stream: str, kinesalite_endpoint: str
) -> None:
    lose = {1: "after", 4: "after", 6: "never"}
    writer = await deliver_with_records(admin, stream, kinesalite_endpoint, lose)
    stats = writer.statistics()
    assert (stats.reconciled, stats.resent_calls) == (2, 0), stats.summary()
    assert stats.delivered == 600 and stats.skipped == 0
    assert stats.requests_failed == 3 and stats.retried == 50  # only the unsent call again
    assert (
        writer.stream_scan is not None and sum(r.found for r in writer.stream_scan.reports) == 100
    )


@pytest.mark.emulator
@pytest.mark.timeout(90)
async def test_server_side_failures_are_settled_by_reading_and_refusals_are_sent_again(
    admin: Any, stream: str, kinesalite_endpoint: str
) -> None:
    """A 5xx may come after the records were stored (a gateway that timed out waiting for
    Kinesis, an internal failure): the stream is read before they are sent again. A
    throttle stored nothing: sent again at once."""
    lose = {1: "gateway", 3: "internal", 5: "throttled"}
    writer = await deliver_with_records(admin, stream, kinesalite_endpoint, lose)
    stats = writer.statistics()
    assert (stats.reconciled, stats.resent_calls) == (2, 0), stats.summary()
    assert stats.requests_failed == 3 and stats.retried == 50  # only the throttled call
    assert (
        writer.stream_scan is not None and sum(r.found for r in writer.stream_scan.reports) == 100
    )


@pytest.mark.emulator
@pytest.mark.timeout(90)
async def test_without_call_records_an_answer_lost_within_an_attempt_is_sent_again(
    admin: Any, stream: str, kinesalite_endpoint: str
) -> None:
    settings = {"endpoint": kinesalite_endpoint, "stream": stream, "rows": 200}
    client = LosingAnswers(admin, {1: "after"})
    writer = create_writer(spark_options(settings), client=client)
    async with writer:
        await writer.write_all(rows(settings["rows"]))
    ids, _ = await read_ids(admin, stream)
    held = Counter(ids)
    assert len(held) == settings["rows"] and sum(held.values()) == settings["rows"] + 50
