"""The writer reports every request to its call recorder, through one path whether or not
the records are durable."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pytest

from asyncsink import CallInfo, SinkOptions, SubmitResult
from asyncsink.durable.recorder import CallLookUp, NoRecords, Serializer

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio


class Spy(NoRecords):
    """Remembers nothing, like ``NoRecords``, but notes what the writer told it."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []

    async def open(self, serialize: Serializer, reconcile: CallLookUp) -> None:
        self.events.append(("open", None))

    def new_call(self, seqs: Sequence[int], entries: Sequence[Any]) -> CallInfo:
        info = super().new_call(seqs, entries)
        self.events.append(("call", info.seqs))
        return info

    def record_result(
        self, call: CallInfo, acked: Collection[int], rejected: dict[int, str], detail: Any
    ) -> None:
        self.events.append(("result", tuple(sorted(acked))))

    async def sync(self, through: int | None = None) -> None:
        self.events.append(("sync", None))

    def finish_input(self, entries: int) -> None:
        self.events.append(("end", entries))


async def test_every_request_is_numbered_and_settled_through_the_recorder() -> None:
    def handler(entries: list[int], call: CallInfo) -> SubmitResult | None:
        return SubmitResult(retry=[0]) if call.call_id == 0 else None  # entry 0 fails once

    spy = Spy()
    writer = FakeWriter(
        Destination(handler),
        options=SinkOptions(max_batch_size=5, max_in_flight_requests=1, initial_backoff_ms=1),
        call_log=spy,
    )
    async with writer:
        await writer.write_all(range(10))
    calls = [seqs for kind, seqs in spy.events if kind == "call"]
    results = [acked for kind, acked in spy.events if kind == "result"]
    # how the retry of entry 0 and the second batch are cut depends on timing
    assert calls[0] == range(5) and results[0] == (1, 2, 3, 4)  # a range: no tuple built
    assert sorted(seq for seqs in calls for seq in seqs) == [0, 0, *range(1, 10)]
    assert sorted(seq for acked in results for seq in acked) == list(range(10))
    assert len(results) == len(calls)
    assert spy.events[0] == ("open", None) and ("end", 10) in spy.events
    assert spy.events.index(("sync", None)) < spy.events.index(("result", (1, 2, 3, 4)))


async def test_without_call_records_keys_are_unique_to_the_writer() -> None:
    first, second = Destination(), Destination()
    for destination in (first, second):
        async with FakeWriter(destination, options=SinkOptions(max_batch_size=5)) as writer:
            await writer.write_all(range(10))
    assert len(first.keys) == 2 and not set(first.keys) & set(second.keys)
    assert writer.statistics().skipped == 0
