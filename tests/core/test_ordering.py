"""Delivery in order per key (``orderingKey``): a destination that answers out of order,
fails items inside its answers and whole requests, still applies each key's changes in
input order; entries of other keys go on meanwhile; a dead-lettered entry takes the rest
of its key with it. Without ordering, the same destination reorders (the control)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import anyio
import pytest

from asyncsink import DeadLetter, RetryableError, SinkOptions, SubmitResult
from asyncsink.policies.ordering import KeyOrder, key_reader, ordering_for

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio


def changes(keys: int, per_key: int, seed: int = 7) -> list[dict[str, Any]]:
    """``per_key`` changes of each key, interleaved at random, each key's in order."""
    rng = random.Random(seed)
    pending = {k: 0 for k in range(keys)}
    out = []
    while pending:
        key = rng.choice(list(pending))
        out.append({"key": f"k{key}", "v": pending[key]})
        pending[key] += 1
        if pending[key] == per_key:
            del pending[key]
    return out


class Applier:
    """A destination that applies each delivered change, answers after 0-20 ms, fails
    20% of items inside its answers and 5% of requests whole."""

    def __init__(self, seed: int = 3) -> None:
        self.rng = random.Random(seed)
        self.applied: dict[str, list[int]] = defaultdict(list)
        self.two_of_a_key = 0

    async def __call__(self, entries: list[Any], call: Any) -> SubmitResult:
        await anyio.sleep(self.rng.random() * 0.02)
        if self.rng.random() < 0.05:
            raise RetryableError("503 from the fault injector")
        keys = [entry["key"] for entry in entries]
        self.two_of_a_key += len(keys) - len(set(keys))
        retry = [i for i in range(len(entries)) if self.rng.random() < 0.2]
        for index, entry in enumerate(entries):
            if index not in retry:
                self.applied[entry["key"]].append(entry["v"])
        return SubmitResult(retry=retry)


def options(**more: Any) -> SinkOptions:
    return SinkOptions(max_batch_size=20, max_in_flight_requests=8, max_time_in_buffer_ms=5,
                       initial_backoff_ms=1, max_backoff_ms=5, max_retries=50, **more)  # fmt: skip


async def deliver(rows: list[dict[str, Any]], applier: Applier, **more: Any) -> FakeWriter:
    writer = FakeWriter(Destination(applier), options=options(**more))
    with anyio.fail_after(60):
        async with writer:
            await writer.write_all(rows)
    stats = writer.statistics()
    assert stats.delivered + stats.dead_lettered == stats.written == len(rows)  # none lost
    return writer


async def test_each_keys_changes_are_applied_in_input_order() -> None:
    rows, applier = changes(200, 10), Applier()
    writer = await deliver(rows, applier, ordering_key="key")
    assert writer.statistics().delivered == len(rows)
    assert all(values == list(range(10)) for values in applier.applied.values())
    assert len(applier.applied) == 200
    assert applier.two_of_a_key == 0  # a request never holds two entries of one key


async def test_without_ordering_the_same_destination_reorders() -> None:
    rows, applier = changes(200, 10), Applier()
    await deliver(rows, applier)
    out_of_order = [k for k, values in applier.applied.items() if values != sorted(values)]
    assert out_of_order, "the control must show the reordering the ordering prevents"


async def test_other_keys_go_on_while_a_key_waits() -> None:
    """One slow key does not hold up the rest: its second entry waits, the others leave."""
    slow, sent = anyio.Event(), anyio.Event()
    order: list[str] = []

    async def handler(entries: list[Any], call: Any) -> None:
        if any(e["key"] == "hot" and e["v"] == 0 for e in entries):
            sent.set()
            with anyio.fail_after(10):
                await slow.wait()
        order.extend(f"{e['key']}{e['v']}" for e in entries)

    rows = [{"key": "hot", "v": 1}] + [{"key": f"c{i}", "v": 0} for i in range(50)]
    writer = FakeWriter(Destination(handler), options=options(ordering_key="key"))
    async with writer:
        await writer.write({"key": "hot", "v": 0})
        with anyio.fail_after(10):
            await sent.wait()  # alone in its request, which hangs
        await writer.write_all(rows)
        with anyio.fail_after(10):
            while len(order) < 50:
                await anyio.sleep(0.005)
        assert "hot1" not in order and writer.statistics().buffered == 1  # parked, counted
        assert [seq for seq, _ in writer.snapshot().entries].count(1) == 1
        slow.set()
    assert order[-2:] == ["hot0", "hot1"]


async def test_a_hot_key_is_delivered_in_order_under_backpressure() -> None:
    rows = [{"key": "one", "v": i} for i in range(120)]
    applier = Applier(seed=11)
    writer = await deliver(rows, applier, ordering_key="key", max_buffered_requests=30)
    assert applier.applied["one"] == list(range(120))
    assert writer.statistics().requests >= 120  # one entry of the key at a time


async def test_a_dead_lettered_entry_takes_the_rest_of_its_key_with_it() -> None:
    letters: list[DeadLetter] = []

    def handler(entries: list[Any], call: Any) -> SubmitResult:
        bad = {i: "mapping error" for i, e in enumerate(entries) if (e["key"], e["v"]) == ("a", 1)}
        return SubmitResult(rejected=bad)

    destination = Destination(handler)
    rows = [{"key": k, "v": v} for v in range(4) for k in ("a", "b")]
    writer = FakeWriter(
        destination, options=options(ordering_key="key", dead_letter=letters.append)
    )
    async with writer:
        await writer.write_all(rows)
    assert [(e["key"], e["v"]) for e in destination.accepted if e["key"] == "a"] == [("a", 0)]
    assert [e["v"] for e in destination.accepted if e["key"] == "b"] == [0, 1, 2, 3]
    assert [letter.position for letter in letters] == [2, 4, 6]  # a1, then a2 and a3 follow it
    assert "earlier entry of its orderingKey" in letters[1].reason
    stats = writer.statistics()
    assert (stats.dead_lettered, stats.delivered, stats.written) == (3, 5, 8)  # none lost


async def test_keys_of_several_fields_and_of_arrow_rows() -> None:
    pyarrow = pytest.importorskip("pyarrow")
    from asyncsink.entries.arrow_rows import ArrowRows

    key_of = key_reader(["a", "b"])
    batch = pyarrow.record_batch({"a": [1, 1, 2], "b": ["x", "y", "x"], "c": [0, 0, 0]})
    assert key_of(ArrowRows(batch)[1:]) == [(1, "y"), (2, "x")]
    assert key_of([{"a": 1, "b": "x"}]) == [(1, "x")]
    assert isinstance(ordering_for(" a , b "), KeyOrder)


def test_a_blank_field_in_the_ordering_key_is_an_option_error() -> None:
    from asyncsink import OptionError

    with pytest.raises(OptionError, match="orderingKey"):
        SinkOptions(ordering_key="a,,b")


async def test_a_missing_key_field_names_the_option() -> None:
    from asyncsink import OptionError

    writer = FakeWriter(Destination(), options=options(ordering_key="id"))
    with pytest.raises(OptionError, match="orderingKey"):
        async with writer:
            await writer.write({"key": "a"})


def keyed(*keys: str) -> KeyOrder:
    """A ``KeyOrder`` that has noted entries 0.. with ``keys``."""
    order = KeyOrder(key_reader(["k"]))
    order.note(range(len(keys)), [{"k": key} for key in keys])
    return order


def admitted(order: KeyOrder, seqs: range) -> list[int]:
    verdict = order.admit(seqs, [f"e{seq}" for seq in seqs], [1] * len(seqs))
    return list(seqs) if verdict is None else [seqs[i] for i in verdict[0]]


def test_a_key_met_several_times_in_one_run_forms_a_chain() -> None:
    order = keyed("a", "b", "a", "c", "a", "b")
    assert admitted(order, range(6)) == [0, 1, 3]
    assert order.parked == 3 and sorted(order) == [(2, "e2"), (4, "e4"), (5, "e5")]
    freed, letters = order.release([0, 1])
    assert (list(freed[0]), freed[1], letters[0]) == ([2, 5], ["e2", "e5"], ())
    assert list(order.release([2])[0][0]) == [4]  # the third "a" only after the second
    assert list(order.release([3, 4, 5])[0][0]) == [] and order.parked == 0
    assert admitted(order, range(6, 6)) == []  # nothing left out: every key is free


def test_a_later_run_waits_for_the_keys_out_and_an_ended_key_is_free() -> None:
    order = keyed("a", "b", "a", "b", "c")
    assert admitted(order, range(2)) == [0, 1]
    order.release([1])  # "b" ends before its next entry comes in
    assert admitted(order, range(2, 5)) == [3, 4]  # "a" is still out by 0
    assert list(order.release([0])[0][0]) == [2]


def test_entries_not_written_through_the_writer_wait_for_nothing() -> None:
    order = keyed("a")
    assert admitted(order, range(100, 103)) == [100, 101, 102]  # a restored snapshot
    assert admitted(order, range(1)) == [0]
    assert order.release([100, 0]) == (((), [], []), ((), [], []))


def test_an_earlier_attempts_call_holds_its_key() -> None:
    order = keyed("a", "a", "b")
    order.hold(0)
    assert admitted(order, range(1, 3)) == [2]
    assert list(order.release([0])[0][0]) == [1]


def test_after_a_dead_letter_the_rest_of_its_key_are_letters() -> None:
    order = keyed("a", "a", "a", "b")
    assert admitted(order, range(2)) == [0]
    order.dead_lettered(0)
    freed, letters = order.release([0])
    assert (list(freed[0]), list(letters[0])) == ([], [1])  # parked before it died
    assert order.admit(range(2, 4), ["e2", "e3"], [1, 1]) == ([1], [])  # "a" waits for 1
    freed, letters = order.release([1])
    assert (list(freed[0]), list(letters[0])) == ([], [2])
    order.release([2])
    order.note(range(4, 5), [{"k": "a"}])
    assert order.admit(range(4, 5), ["e4"], [1]) == ([], [0])  # a fresh one too
