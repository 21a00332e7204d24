"""PackedEntries: entries as spans of one buffer, read like a list of bytes."""

from __future__ import annotations

import random

import pytest

from asyncsink import PackedEntries


def packed(entries: list[bytes], separator: bytes = b",", close: bytes = b"]") -> PackedEntries:
    """``entries`` laid out as ``[e1,e2,...]`` (or with another separator)."""
    buffer = bytearray(b"[")
    starts, ends = [], []
    for i, entry in enumerate(entries):
        starts.append(len(buffer))
        buffer += entry
        ends.append(len(buffer))
        buffer += separator if i + 1 < len(entries) else close
    return PackedEntries(bytes(buffer), starts, ends, separator, check=True)


ENTRIES = [b'{"a":1}', b"{}", b'{"b":"x,y"}', b'{"c":[1,2]}', b'{"d":null}']


def test_reads_like_the_list_it_packs() -> None:
    entries = packed(ENTRIES)
    assert len(entries) == 5
    assert list(entries) == ENTRIES and entries == ENTRIES and ENTRIES == entries
    assert [entries[i] for i in range(-5, 5)] == ENTRIES + ENTRIES
    assert entries.sizes() == [len(e) for e in ENTRIES]
    assert entries.joined() == b",".join(ENTRIES)
    with pytest.raises(IndexError):
        entries[5]
    with pytest.raises(IndexError):
        entries[-6]
    assert entries != ENTRIES[:4] and entries != [*ENTRIES[:4], b"{}"]
    assert entries != b",".join(ENTRIES)


def test_slices_are_views_that_slice_again() -> None:
    entries = packed(ENTRIES)
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
