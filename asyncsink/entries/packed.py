"""Entries laid end to end in one buffer: a run of entries with no object per entry.

A sink whose entries are bytes, and whose request body is its entries joined by one
separator byte (a JSON array, a comma between objects), can encode a whole run at once
into one buffer and return it from ``convert_all`` as ``PackedEntries``: each entry is a
span of the buffer followed by one byte, and between two entries that byte is the
separator. The writer keeps the run packed while it cuts batches from it, so a request's
entries reach ``submit_request_entries`` as a slice of the same buffer, and ``joined()``
is the body's inside in one copy. Anything that needs the entries one by one (a retry of
some of them, a dead letter, a digest) gets each as ``bytes``, built when asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import eq, sub
from typing import Any, overload

import numpy as np

__all__ = ["PackedEntries"]


class PackedEntries(Sequence[bytes]):
    """``bytes`` entries stored as spans of one buffer.

    Entry ``i`` is ``buffer[starts[i]:ends[i]]``; ``ends[i]`` is followed by one byte of
    the buffer, which is ``separator`` where entry ``i + 1`` starts right after it.
    ``starts`` and ``ends`` are lists of ``int`` or numpy integer arrays (the cheaper to
    build from a scan of the buffer, and their sizes are then one numpy subtraction).
    Slicing (step 1) gives a view of the same buffer; an entry is built only when it is
    read. Compares equal to any sequence of the same ``bytes``.

    Raises:
        ValueError: the spans do not fit the buffer or do not line up as described
            (``check=True``, for spans computed by hand).
    """

    __slots__ = ("buffer", "separator", "_starts", "_ends", "_lo", "_hi")

    def __init__(
        self,
        buffer: bytes,
        starts: Sequence[int] | np.ndarray[Any, Any],
        ends: Sequence[int] | np.ndarray[Any, Any],
        separator: bytes = b",",
        *,
        check: bool = False,
    ) -> None:
        if len(starts) != len(ends):
            raise ValueError(f"{len(starts)} starts for {len(ends)} ends")
        if len(separator) != 1:
            raise ValueError(f"the separator must be one byte, not {separator!r}")
        self.buffer = buffer
        self.separator = separator
        self._starts = starts
        self._ends = ends
        self._lo = 0
        self._hi = len(starts)
        if check:
            self._check()

    def _check(self) -> None:
        buffer, starts, ends, code = self.buffer, self._starts, self._ends, self.separator[0]
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            if not 0 <= start <= end < len(buffer):
                raise ValueError(f"entry {i} spans [{start}, {end}) of {len(buffer)} bytes")
            if i + 1 < len(starts) and (starts[i + 1] != end + 1 or buffer[end] != code):
                raise ValueError(f"entry {i} is not followed by the separator and entry {i + 1}")

    def _view(self, lo: int, hi: int) -> PackedEntries:
        view = PackedEntries.__new__(PackedEntries)
        view.buffer, view.separator = self.buffer, self.separator
        view._starts, view._ends = self._starts, self._ends
        view._lo, view._hi = lo, hi
        return view

    def __len__(self) -> int:
        return self._hi - self._lo

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            span = range(self._lo, self._hi)[index]
            if span.step != 1:
                return [self.buffer[int(self._starts[i]) : int(self._ends[i])] for i in span]
            return self._view(span.start, max(span.start, span.stop))
        count = self._hi - self._lo
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("PackedEntries index out of range")
        index += self._lo
        return self.buffer[int(self._starts[index]) : int(self._ends[index])]

    def __iter__(self) -> Iterator[bytes]:
        starts, ends = self._spans()
        buffer = self.buffer
        return iter([buffer[start:end] for start, end in zip(starts, ends, strict=True)])

    def _spans(self) -> tuple[Sequence[int], Sequence[int]]:
        """The starts and ends of this view's entries, as sequences of ``int``."""
        lo, hi = self._lo, self._hi
        starts, ends = self._starts[lo:hi], self._ends[lo:hi]
        if isinstance(starts, np.ndarray) and isinstance(ends, np.ndarray):
            return starts.tolist(), ends.tolist()
        return starts, ends  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes | bytearray):
            return len(self) == len(other) and all(map(eq, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<PackedEntries: {len(self)} entries, {self.joined_size()} bytes>"

    def sizes(self) -> list[int]:
        """The length of each entry."""
        lo, hi = self._lo, self._hi
        starts, ends = self._starts[lo:hi], self._ends[lo:hi]
        if isinstance(starts, np.ndarray):
            sizes: list[int] = (ends - starts).tolist()
            return sizes
        return list(map(sub, ends, starts))

    def joined(self, prefix: bytes = b"", suffix: bytes = b"") -> bytes:
        """The entries joined by the separator, between ``prefix`` and ``suffix``:
        ``prefix + separator.join(self) + suffix``, in one copy."""
        if self._lo == self._hi:
            return prefix + suffix
        start, end = int(self._starts[self._lo]), int(self._ends[self._hi - 1])
        return b"".join((prefix, memoryview(self.buffer)[start:end], suffix))

    def joined_size(self) -> int:
        if self._hi == self._lo:
            return 0
        return int(self._ends[self._hi - 1]) - int(self._starts[self._lo])
