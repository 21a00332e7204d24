"""The writer uses asyncio alone (see ``asyncsink.writer._tasks``): it runs the same under
``asyncio.run`` and ``anyio.run``, and closes cleanly inside a cancelled anyio scope."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from asyncsink import CallInfo, SinkOptions, WriterStatistics

from .fakes import Destination, FakeWriter


def asyncio_run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


RUNNERS: list[Callable[..., Any]] = [asyncio_run, anyio.run]


def slow_once() -> Callable[[list[Any], CallInfo], Any]:
    """A handler whose first answer comes after requestTimeoutMs: cancelled, sent again."""
    calls = itertools.count()

    async def wait() -> None:
        if next(calls) == 0:
            await anyio.sleep(1)

    return lambda entries, call: wait()


@pytest.mark.parametrize("runner", RUNNERS, ids=["asyncio.run", "anyio.run"])
def test_a_writer_delivers_under_asyncio_run_and_anyio_run(runner: Callable[..., Any]) -> None:
    destination = Destination(slow_once(), latency=0.001)
    options = SinkOptions(
        max_batch_size=10, request_timeout_ms=100, initial_backoff_ms=1, max_backoff_ms=5
    )

    async def deliver() -> WriterStatistics:
        async with FakeWriter(destination, options=options) as writer:
            await writer.write_all(range(200))
            for element in range(200, 250):
                await writer.write(element)
        return writer.statistics()

    stats = runner(deliver)
    assert sorted(set(destination.accepted)) == list(range(250))
    assert stats.delivered == 250 and stats.timeouts >= 1


@pytest.mark.parametrize("runner", RUNNERS, ids=["asyncio.run", "anyio.run"])
def test_a_writer_in_a_cancelled_anyio_scope_awaits_its_requests(
    runner: Callable[..., Any],
) -> None:
    ended: list[int] = []

    class Slow(FakeWriter):
        async def submit_request_entries(self, entries: list[Any]) -> None:
            try:
                await anyio.sleep(30)
            finally:
                await asyncio.sleep(0)  # its clean-up awaits, and still runs to the end
                ended.extend(entries)

    async def cancelled() -> None:
        with anyio.move_on_after(0.1) as scope:
            async with Slow(Destination(), options=SinkOptions(max_batch_size=1)) as writer:
                for element in range(3):
                    await writer.write(element)
                await anyio.sleep(30)
        assert scope.cancelled_caught

    runner(cancelled)
    assert sorted(ended) == [0, 1, 2]  # each request ended before the writer did
