"""PackedEntries: entries as spans of one buffer, read like a list of bytes."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from asyncsink import AsyncSinkWriter, PackedEntries, SinkOptions, SubmitResult


def packed(
    entries: list[bytes], separator: bytes = b",", close: bytes = b"]", *, arrays: bool = False
) -> PackedEntries:
    """``entries`` laid out as ``[e1,e2,...]`` (or with another separator); with
    ``arrays``, the spans as numpy arrays."""
    buffer = bytearray(b"[")
    starts, ends = [], []
    for i, entry in enumerate(entries):
        starts.append(len(buffer))
        buffer += entry
        ends.append(len(buffer))
        buffer += separator if i + 1 < len(entries) else close
    if arrays:
        return PackedEntries(bytes(buffer), np.array(starts), np.array(ends), separator, check=True)
    return PackedEntries(bytes(buffer), starts, ends, separator, check=True)


ENTRIES = [b'{"a":1}', b"{}", b'{"b":"x,y"}', b'{"c":[1,2]}', b'{"d":null}']


@pytest.mark.parametrize("arrays", [False, True])
def test_reads_like_the_list_it_packs(arrays: bool) -> None:
    entries = packed(ENTRIES, arrays=arrays)
    assert len(entries) == 5
    assert list(entries) == ENTRIES and entries == ENTRIES and ENTRIES == entries
    assert [entries[i] for i in range(-5, 5)] == ENTRIES + ENTRIES
    assert entries.sizes() == [len(e) for e in ENTRIES]
    assert {type(n) for n in entries.sizes()} == {int} and type(entries[1]) is bytes
    assert entries.joined() == b",".join(ENTRIES)
    with pytest.raises(IndexError):
        entries[5]
    with pytest.raises(IndexError):
        entries[-6]
    assert entries != ENTRIES[:4] and entries != [*ENTRIES[:4], b"{}"]
    assert entries != b",".join(ENTRIES)


@pytest.mark.parametrize("arrays", [False, True])
def test_slices_are_views_that_slice_again(arrays: bool) -> None:
    entries = packed(ENTRIES, arrays=arrays)
    rng = random.Random(3)
    for _ in range(300):
        a, b = rng.randrange(-7, 8), rng.randrange(-7, 8)
        view = entries[a:b]
        assert isinstance(view, PackedEntries) and view.buffer is entries.buffer
        assert list(view) == ENTRIES[a:b] and view.sizes() == [len(e) for e in ENTRIES[a:b]]
        assert view.joined() == b",".join(ENTRIES[a:b])
        c, d = rng.randrange(-4, 5), rng.randrange(-4, 5)
        assert list(view[c:d]) == ENTRIES[a:b][c:d]
    assert entries[::2] == ENTRIES[::2] and type(entries[::-1]) is list
    assert entries[3:1].joined() == b"" and len(entries[3:1]) == 0
    assert entries[1:3].joined(b"[", b"]") == b"[" + b",".join(ENTRIES[1:3]) + b"]"
    assert entries[3:1].joined(b"[", b"]") == b"[]"


def test_repr_shows_no_content() -> None:
    entries = packed([b'{"password":"hunter2"}'])
    assert "hunter2" not in repr(entries) and "1 entries" in repr(entries)


def test_spans_that_do_not_line_up_are_refused() -> None:
    with pytest.raises(ValueError, match="not followed by the separator"):
        PackedEntries(b"[{},{}]", [1, 3], [3, 6], check=True)
    with pytest.raises(ValueError, match="spans"):
        PackedEntries(b"[{}]", [1], [9], check=True)
    with pytest.raises(ValueError, match="one byte"):
        PackedEntries(b"", [], [], b"\r\n")
    with pytest.raises(ValueError, match="starts"):
        PackedEntries(b"[{}]", [1], [])


class PackingWriter(AsyncSinkWriter[bytes, bytes]):
    """Packs each run into ``[e1,e2,...]``; fails entry 1 of its first request once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[tuple[type, bytes, list[bytes]]] = []

    def convert(self, element: bytes) -> bytes:
        return element

    def convert_all(self, elements: Sequence[bytes]) -> Sequence[bytes]:
        return packed(list(elements))

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    def entry_sizes(self, entries: Sequence[bytes]) -> list[int]:
        return (
            entries.sizes()
            if isinstance(entries, PackedEntries)
            else super().entry_sizes(list(entries))
        )

    async def submit_request_entries(self, entries: Sequence[bytes]) -> SubmitResult | None:
        body = entries.joined() if isinstance(entries, PackedEntries) else b",".join(entries)
        self.requests.append((type(entries), body, list(entries)))
        return SubmitResult(retry=[1]) if len(self.requests) == 1 else None


@pytest.mark.anyio
async def test_a_writer_gets_its_packed_runs_back_as_slices_and_retries_as_lists() -> None:
    writer = PackingWriter(options=SinkOptions(max_batch_size=2, initial_backoff_ms=1))
    async with writer:
        await writer.write_all(ENTRIES)
    first_type, first_body, first = writer.requests[0]
    assert first_type is PackedEntries and first == ENTRIES[:2]
    assert first_body == b",".join(ENTRIES[:2])  # the body inside, one slice
    # The failed entry goes again as a list: alone, or ahead of fresh entries when its
    # backoff ended before they were all sent.
    retried = [(kind, entries) for kind, _, entries in writer.requests[1:] if ENTRIES[1] in entries]
    assert len(retried) == 1 and retried[0][0] is list and retried[0][1][0] == ENTRIES[1]
    later = [entry for _, _, entries in writer.requests[1:] for entry in entries]
    assert sorted([first[0], *later]) == sorted(ENTRIES)  # each accepted once
    assert all(body == b",".join(entries) for _, body, entries in writer.requests)
    assert [kind for kind, _, _ in writer.requests].count(PackedEntries) >= 2
    assert writer.statistics().delivered == 5


class ListingPackingWriter(PackingWriter):
    """Names the failed entries as the docs' writers do: the entries themselves."""

    async def submit_request_entries(self, entries: Sequence[bytes]) -> list[bytes]:
        self.requests.append((type(entries), b"", list(entries)))
        if len(self.requests) == 1:
            return [entry for entry in entries if entry == ENTRIES[1]]
        return []


@pytest.mark.anyio
async def test_failed_packed_entries_may_be_returned_as_the_entries_themselves() -> None:
    # A packed entry is built anew each time it is read: it is matched by its bytes.
    writer = ListingPackingWriter(options=SinkOptions(max_batch_size=2, initial_backoff_ms=1))
    async with writer:
        await writer.write_all(ENTRIES)
    sent = [entry for _, _, entries in writer.requests for entry in entries]
    assert sorted(sent) == sorted([*ENTRIES, ENTRIES[1]])  # only the failed one again
    assert writer.statistics().delivered == 5 and writer.statistics().retried == 1


class SlicePackingWriter(PackingWriter):
    async def submit_request_entries(self, entries: Sequence[bytes]) -> SubmitResult | None:
        self.requests.append((type(entries), b"", list(entries)))
        return None


@pytest.mark.anyio
@pytest.mark.parametrize("batch", [3, 7, 500, 3000])
async def test_write_all_cuts_runs_at_whole_batches(batch: int) -> None:
    """Runs of ``write_all`` hold whole batches, so that no request is two pieces of
    two runs joined entry by entry: each is one slice of a run's buffer."""
    entries = [b'{"n":%d}' % i for i in range(10 * batch + 3)]
    for buffered in (4 * batch + batch // 2, 10_000):
        options = SinkOptions(max_batch_size=batch, max_buffered_requests=buffered)
        writer = SlicePackingWriter(options=options)
        async with writer:
            await writer.write_all(entries)
        assert [entry for _, _, sent in writer.requests for entry in sent] == entries
        assert {kind for kind, _, _ in writer.requests} == {PackedEntries}
        assert [len(sent) for _, _, sent in writer.requests] == [batch] * 10 + [3]
