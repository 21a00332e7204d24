"""``write_all`` takes elements in runs (``convert_all``): it must behave exactly like a
loop of ``write`` calls, bad records and backpressure included."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from asyncsink import BadRecordError, DeadLetter, SinkOptions, SubmitResult

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio


def mixed_input(count: int, seed: int) -> list[Any]:
    """Entries of varied sizes, with a few too large and a few that cannot convert."""
    rng = random.Random(seed)
    elements: list[Any] = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.02:
            elements.append({"unconvertible": True, "i": i})
        elif roll < 0.04:
            elements.append(b"L" * 200 + str(i).encode())
        else:
            elements.append(f"{i}:".encode() * rng.randint(1, 8))
    return elements


async def run(elements: list[Any], *, runs: bool) -> tuple[Destination, list[DeadLetter], Any]:
    letters: list[DeadLetter] = []
    dest = Destination()
    options = SinkOptions(
        max_batch_size=50,
        max_batch_size_in_bytes=400,
        max_record_size_in_bytes=150,
        max_buffered_requests=120,
        max_in_flight_requests=3,
        dead_letter=letters.append,
    )
    writer = FakeWriter(dest, options=options)
    with anyio.fail_after(10):
        async with writer:
            if runs:
                await writer.write_all(elements)
            else:
                for element in elements:
                    await writer.write(element)
    return dest, letters, writer.statistics()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_write_all_delivers_and_dead_letters_as_a_loop_of_writes(seed: int) -> None:
    elements = mixed_input(3000, seed)
    by_loop = await run(elements, runs=False)
    by_runs = await run(elements, runs=True)
    for dest, _, stats in (by_loop, by_runs):
        good = [e for e in elements if isinstance(e, bytes) and len(e) <= 150]
        assert sorted(dest.accepted) == sorted(good) and dest.duplicates() == 0
        assert stats.written == len(elements) and stats.delivered == len(good)
        assert all(sum(map(len, request)) <= 400 or len(request) == 1 for request in dest.requests)
    positions = [[d.position for d in letters] for _, letters, _ in (by_loop, by_runs)]
    assert positions[0] == positions[1]
    assert positions[0] == [i for i, e in enumerate(elements) if not isinstance(e, bytes)
                            or len(e) > 150]  # fmt: skip


async def test_a_bad_record_in_a_run_fails_at_its_position_after_the_ones_before() -> None:
    dest = Destination()
    writer = FakeWriter(dest, options=SinkOptions(max_batch_size=100))
    async with writer:
        with pytest.raises(BadRecordError) as caught:
            await writer.write_all([b"a", b"b", {"unconvertible": True}, b"c"])
        assert caught.value.position == 2
        await writer.write(b"d")  # the writer goes on; the bad element was not accepted
    assert dest.accepted == [b"a", b"b", b"d"]
    assert [request for request in dest.requests] == [[b"a", b"b", b"d"]]


async def test_convert_all_must_return_one_entry_per_element() -> None:
    class Dropping(FakeWriter):
        def convert_all(self, elements: list[Any]) -> list[Any]:
            return elements[1:]

    writer = Dropping(Destination())
    async with writer:
        with pytest.raises(TypeError, match="convert_all returned 1 entries for 2 elements"):
            await writer.write_all([b"a", b"b"])


async def test_write_all_waits_for_room_in_the_buffer() -> None:
    dest = Destination(latency=0.01)
    options = SinkOptions(max_batch_size=10, max_buffered_requests=25, max_in_flight_requests=1)
    writer = FakeWriter(dest, options=options)
    peak = 0

    def sizes() -> Any:
        nonlocal peak
        for i in range(200):
            peak = max(peak, writer.statistics().buffered)
            yield str(i).encode()

    async with writer:
        await writer.write_all(sizes())
    assert peak <= 25
    assert len(dest.accepted) == 200


class Columns(Sequence[bytes]):
    """A sequence type of its own, as an Arrow batch's rows are: slicing keeps the type."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return Columns(self.values[index])
        return self.values[index]


async def test_a_sequence_reaches_convert_all_as_slices_of_itself() -> None:
    seen: list[tuple[type, int]] = []

    class Recording(FakeWriter):
        def convert_all(self, elements: Sequence[Any]) -> list[Any]:
            seen.append((type(elements), len(elements)))
            return [bytes(element) for element in elements]

    dest = Destination()
    options = SinkOptions(max_batch_size=100, max_buffered_requests=10_000)
    writer = Recording(dest, options=options)
    values = [str(i).encode() for i in range(5000)]
    async with writer:
        await writer.write_all(Columns(values))
    assert {kind for kind, _ in seen} == {Columns}
    assert sum(count for _, count in seen) == 5000
    assert max(count for _, count in seen) > options.max_batch_size  # runs beyond a batch
    assert sorted(dest.accepted, key=lambda e: int(e)) == values
    assert writer.statistics().delivered == 5000


async def test_entries_backing_off_for_a_retry_do_not_hold_up_fresh_ones() -> None:
    """``write_all`` waits for room for a whole batch only while a whole batch of fresh
    entries waits in the buffer: entries backing off for a retry are not about to leave,
    and waiting for them would stall the input for their whole backoff."""

    def handler(entries: list[Any], call: Any) -> SubmitResult | None:
        if call.call_id == 0:  # its entries back off 3 s (a hint, not jittered)
            return SubmitResult(retry=range(len(entries)), retry_after=3.0)
        return None

    dest = Destination(handler)
    options = SinkOptions(max_batch_size=500, max_buffered_requests=900)
    writer = FakeWriter(dest, options=options)
    with anyio.fail_after(15):
        async with writer:
            started = time.monotonic()
            await writer.write_all([f"{i}".encode() for i in range(5000)])
            took = time.monotonic() - started
            assert took < 1.5  # not the 3 s backoff of the first request's entries
    assert sorted(dest.accepted) == sorted(f"{i}".encode() for i in range(5000))
