"""A sink's own code gets something wrong: the writer fails loudly, never returns from the
barrier with entries unsettled, and never waits forever.

Each case is a mistake a sink author can make: a ``classify_error`` that raises, a
``Retry-After`` passed on as text, ``SubmitResult`` indexes that are not the request's,
a stray ``CancelledError``, a ``serialize_entry`` or an ``entry_size`` that fails, an
exception whose message cannot be read."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import anyio
import numpy as np
import pytest

from asyncsink import (
    BadRecordError,
    CallInfo,
    DeadLetter,
    ErrorKind,
    FatalError,
    RetryableError,
    SinkOptions,
    SubmitResult,
    ThrottledError,
)
from asyncsink.durable import CallLog
from asyncsink.policies.retry import Backoff
from asyncsink.stores.base import Scope
from asyncsink.stores.memory import MemoryStore

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio

FAST = {"initial_backoff_ms": 1, "max_backoff_ms": 20}


def fails_once(error: BaseException) -> Any:
    """A handler whose second request fails once with ``error``."""
    calls = itertools.count()

    def handler(entries: list[Any], call: CallInfo) -> None:
        if next(calls) == 1:
            raise error

    return handler


async def run(writer: FakeWriter, elements: Any) -> BaseException | None:
    """Write ``elements`` and leave the writer; what it raised, if anything."""
    with anyio.fail_after(10):
        try:
            async with writer:
                await writer.write_all(elements)
        except BaseException as exc:  # noqa: BLE001 - what the writer ended with is the result
            return exc
    return None


async def test_a_classify_error_that_raises_fails_the_writer() -> None:
    class Careless(FakeWriter):
        def classify_error(self, exc: BaseException) -> ErrorKind:
            return ErrorKind.RETRYABLE if exc.status >= 500 else ErrorKind.FATAL  # type: ignore[attr-defined]

    destination = Destination(fails_once(ConnectionResetError("reset")))
    writer = Careless(destination, options=SinkOptions(max_batch_size=10, **FAST))
    raised = await run(writer, range(100))
    assert isinstance(raised, FatalError)
    assert str(raised) == (
        "request 1 failed: AttributeError: 'ConnectionResetError' object has no attribute 'status'"
    )
    assert len(destination.accepted) < 100  # not all delivered, and the writer said so


@pytest.mark.parametrize("hint", ["0.01", b"0.01", 0.01, "soon", float("nan"), -1, None])
@pytest.mark.parametrize("how", ["raised", "returned"])
async def test_a_retry_after_of_any_kind_is_a_hint_or_none(hint: object, how: str) -> None:
    failed: set[int] = set()

    def handler(entries: list[int], call: CallInfo) -> SubmitResult | None:
        if entries[0] in failed:
            return None
        failed.add(entries[0])
        if how == "raised":
            raise ThrottledError("HTTP 429", retry_after=hint)  # type: ignore[arg-type]
        return SubmitResult(retry=[0], throttled=True, retry_after=hint)  # type: ignore[arg-type]

    destination = Destination(handler)
    writer = FakeWriter(destination, options=SinkOptions(max_batch_size=10, **FAST))
    assert await run(writer, range(100)) is None
    assert sorted(destination.accepted) == list(range(100))
    assert writer.statistics().delivered == 100


def test_a_retry_hint_is_read_as_seconds_and_capped_by_the_longest_backoff() -> None:
    policy = Backoff(initial_ms=1, max_ms=2000)
    assert 0.5 <= policy.delay(1, "0.5") <= 2.0
    assert policy.delay(1, "7") == 2.0  # capped
    assert policy.delay(1, float("inf")) == 2.0
    for no_hint in ("Wed, 21 Oct 2015 07:28:00 GMT", "", float("nan"), -3, True, object()):
        assert policy.delay(1, no_hint) <= 0.001  # the backoff alone: under 1 ms


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (SubmitResult(retry=[10]), "SubmitResult.retry holds index 10, but the request has 10"),
        (SubmitResult(retry=[-1]), "SubmitResult.retry holds index -1, but the request has 10"),
        (SubmitResult(retry="0"), "SubmitResult.retry must hold entry indexes, not be str"),
        (SubmitResult(retry=[True]), "SubmitResult.retry holds True, not an entry index"),
        (SubmitResult(rejected={99: "bad"}), "SubmitResult.rejected holds index 99"),
        (SubmitResult(rejected=[0]), "SubmitResult.rejected must map entry indexes to reasons"),  # type: ignore[arg-type]
        (
            SubmitResult(retry=[2], rejected={2: "bad"}),
            "SubmitResult names entry 2 both to retry and as rejected",
        ),
    ],
)
async def test_submit_result_indexes_that_are_not_the_requests_fail_the_writer(
    answer: SubmitResult, message: str
) -> None:
    dead: list[DeadLetter] = []
    destination = Destination(lambda entries, call: answer)
    options = SinkOptions(max_batch_size=10, dead_letter=dead.append, **FAST)
    writer = FakeWriter(destination, options=options)
    raised = await run(writer, range(10))
    assert isinstance(raised, FatalError)
    assert message in str(raised)
    stats = writer.statistics()
    assert (stats.delivered, stats.dead_lettered, dead) == (0, 0, [])


async def test_numpy_indexes_in_a_submit_result_are_indexes() -> None:
    failed: set[int] = set()

    def handler(entries: list[int], call: CallInfo) -> SubmitResult:
        retry = np.flatnonzero([e % 3 == 0 and e not in failed for e in entries])
        failed.update(entries[i] for i in retry)
        return SubmitResult(retry=retry)

    destination = Destination(handler)
    writer = FakeWriter(destination, options=SinkOptions(max_batch_size=10, **FAST))
    assert await run(writer, range(50)) is None
    assert sorted(destination.accepted) == list(range(50))


class Lenient(FakeWriter):
    def classify_error(self, exc: BaseException) -> ErrorKind:
        return ErrorKind.RETRYABLE  # everything: the writer's own checks still hold


async def test_a_lenient_classify_error_does_not_turn_a_malformed_answer_into_retries() -> None:
    destination = Destination(lambda entries, call: SubmitResult(retry=[len(entries)]))
    writer = Lenient(destination, options=SinkOptions(max_batch_size=10, **FAST))
    raised = await run(writer, range(10))
    assert isinstance(raised, FatalError)
    assert "SubmitResult.retry holds index 10" in str(raised)
    assert len(destination.requests) == 1  # not sent again


@pytest.mark.parametrize("empty", [(), []])
async def test_an_empty_rejected_of_any_kind_rejects_nothing(empty: Any) -> None:
    destination = Destination(lambda entries, call: SubmitResult(rejected=empty))
    writer = FakeWriter(destination, options=SinkOptions(max_batch_size=10))
    assert await run(writer, range(30)) is None
    assert writer.statistics().delivered == 30


async def test_a_stray_cancelled_error_from_a_sink_fails_the_writer() -> None:
    destination = Destination(fails_once(asyncio.CancelledError("from the client library")))
    options = SinkOptions(max_batch_size=10, request_timeout_ms=500, **FAST)
    raised = await run(Lenient(destination, options=options), range(30))
    assert isinstance(raised, FatalError)
    assert str(raised) == "request 1 failed: CancelledError: from the client library"


async def test_a_request_task_cancelled_by_the_sink_fails_the_writer() -> None:
    def handler(entries: list[Any], call: CallInfo) -> Any:
        if entries[0] == 10:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # as a careless timeout helper does, never uncancelled

            async def wait() -> None:
                try:
                    await asyncio.sleep(1)
                except asyncio.CancelledError:
                    pass  # swallowed: the task's cancel count stays raised
                raise asyncio.CancelledError("pool closed")

            return wait()
        return None

    options = SinkOptions(max_batch_size=10, request_timeout_ms=500, **FAST)
    raised = await run(FakeWriter(Destination(handler), options=options), range(30))
    assert isinstance(raised, FatalError)
    assert "cancelled, not by the writer" in str(raised)


async def test_an_exception_whose_message_cannot_be_read_still_fails_the_writer() -> None:
    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    destination = Destination(fails_once(Unreadable()))
    raised = await run(FakeWriter(destination, options=SinkOptions(max_batch_size=10)), range(30))
    assert isinstance(raised, FatalError)
    assert str(raised) == "request 1 failed: Unreadable: <its message cannot be read>"


async def test_a_serialize_entry_that_fails_fails_the_writer_before_the_request_leaves() -> None:
    class Unserializable(FakeWriter):
        def serialize_entry(self, entry: Any) -> bytes:
            if entry == 37:
                raise ValueError("cannot serialize entry 37")
            return str(entry).encode()

    destination = Destination()
    log = CallLog(MemoryStore(), Scope("mistakes", 1, 0))
    writer = Unserializable(destination, options=SinkOptions(max_batch_size=10), call_log=log)
    raised = await run(writer, range(100))
    assert isinstance(raised, FatalError)
    assert str(raised) == (
        "recording a request of 10 entries failed: ValueError: cannot serialize entry 37"
    )
    assert 37 not in destination.accepted


class Sized(FakeWriter):
    """``entry_size`` answers what ``sizes`` holds for an entry (or raises it)."""

    def __init__(self, destination: Destination, sizes: dict[int, Any], **kwargs: Any) -> None:
        super().__init__(destination, **kwargs)
        self.sizes = sizes

    def entry_size(self, entry: Any) -> Any:
        size = self.sizes.get(entry, 10)
        if isinstance(size, Exception):
            raise size
        return size


@pytest.mark.parametrize("bulk", [True, False])
async def test_an_entry_size_that_raises_makes_a_bad_record(bulk: bool) -> None:
    dead: list[DeadLetter] = []
    destination = Destination()
    options = SinkOptions(max_batch_size=10, dead_letter=dead.append)
    writer = Sized(destination, {3: ValueError("no size for 3")}, options=options)
    async with writer:
        if bulk:
            await writer.write_all(range(10))
        else:
            for element in range(10):
                await writer.write(element)
    assert [letter.position for letter in dead] == [3]
    assert dead[0].reason == "entry_size failed: ValueError: no size for 3"
    assert sorted(destination.accepted) == [0, 1, 2, 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize(
    ("size", "shown"),
    [("12", "'12' (str)"), (None, "None (NoneType)"), (12.0, "12.0 (float)"),
     (float("nan"), "nan (float)"), (-5, "-5 (int)")],
)  # fmt: skip
@pytest.mark.parametrize("bulk", [True, False])
async def test_an_entry_size_that_is_no_size_in_bytes_fails_the_writer(
    size: Any, shown: str, bulk: bool
) -> None:
    destination = Destination()
    writer = Sized(destination, {3: size}, options=SinkOptions(max_batch_size=10))
    rows = iter(range(100))
    message = f"entry_size returned {shown} for entry 3: an entry's size in bytes is an int >= 0"
    with anyio.fail_after(10), pytest.raises(FatalError, match=re.escape(message)):
        async with writer:
            try:
                if bulk:
                    await writer.write_all(rows)
                else:
                    for element in rows:
                        await writer.write(element)
            except FatalError:
                pass  # a caller that carries on: the writer stays failed
            await writer.write(1000)
    assert 3 not in destination.accepted
    assert writer.statistics().bytes_sent >= 0


async def test_a_numpy_integer_entry_size_is_a_size() -> None:
    destination = Destination()
    writer = Sized(destination, {3: np.int64(7)}, options=SinkOptions(max_batch_size=10))
    assert await run(writer, range(10)) is None
    assert writer.statistics().bytes_sent == 9 * 10 + 7


class NumpySized(FakeWriter):
    """Sizes a run at once as numpy integers, as a sink reading Arrow lengths would."""

    converted = 0

    def convert(self, element: Any) -> Any:
        self.converted += 1
        return element

    def convert_all(self, elements: Any) -> Any:
        return list(elements)

    def entry_sizes(self, entries: list[Any]) -> Any:
        return np.full(len(entries), 10, dtype=np.int64)


async def test_numpy_entry_sizes_keep_runs_converted_at_once() -> None:
    destination = Destination()
    writer = NumpySized(destination, options=SinkOptions(max_batch_size=100))
    assert await run(writer, range(5000)) is None
    assert sorted(destination.accepted) == list(range(5000))
    assert writer.converted == 0  # never one element at a time
    assert writer.statistics().bytes_sent == 50_000


async def test_write_all_from_an_iterator_hands_back_what_it_took_past_a_bad_record() -> None:
    bad = {3, 2500}
    rows = ({"n": n, "unconvertible": n in bad} for n in range(5000))
    destination = Destination()
    positions = []
    writer = FakeWriter(destination, options=SinkOptions(max_batch_size=100))
    async with writer:
        pending: Any = rows
        while True:
            try:
                await writer.write_all(pending)
                break
            except BadRecordError as exc:  # skip the bad row, go on with the rest
                positions.append(exc.position)
                pending = itertools.chain(exc.unwritten, rows)
    assert positions == sorted(bad)  # its position in the input, however it was cut
    delivered = [row["n"] for row in destination.accepted]
    assert sorted(delivered) == sorted(set(range(5000)) - bad)  # each once


async def test_write_all_from_a_sequence_hands_back_nothing() -> None:
    elements = [{"n": 0}, {"n": 1, "unconvertible": True}, {"n": 2}]
    writer = FakeWriter(Destination(), options=SinkOptions(max_batch_size=10))
    with pytest.raises(BadRecordError) as caught:
        async with writer:
            await writer.write_all(elements)
    assert (caught.value.position, caught.value.unwritten) == (1, ())


async def test_a_sink_raising_a_retryable_error_is_unaffected() -> None:
    destination = Destination(fails_once(RetryableError("HTTP 503")))
    writer = FakeWriter(destination, options=SinkOptions(max_batch_size=10, **FAST))
    assert await run(writer, range(50)) is None
    assert sorted(destination.accepted) == list(range(50))


async def test_a_durable_writers_bad_record_names_its_scope() -> None:
    log = CallLog(MemoryStore(), Scope("orders", 7, 3))
    writer = FakeWriter(Destination(), options=SinkOptions(max_batch_size=10), call_log=log)
    with pytest.raises(BadRecordError) as caught:
        async with writer:
            await writer.write_all([{"n": 0}, {"n": 1, "unconvertible": True}])
    assert caught.value.scope == "orders/7/3"
    assert str(caught.value) == (
        "bad record at position 1 of scope orders/7/3: conversion failed: ValueError: "
        "cannot convert this one"
    )
