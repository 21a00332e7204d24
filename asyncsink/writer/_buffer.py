"""The writer's buffer: fresh entries in write order, behind groups of entries to retry.

Entries are held in runs, not one by one: a ``Run`` is three parallel sequences
(sequence numbers, entries, sizes) of entries that travel together, and the writer
touches a run as a whole wherever it can. Entries written together (``write_all``) stay
one run until the batches cut from it; a batch is a slice of a run, and in the common
case the whole request takes one slice with no Python work per entry: sequence numbers
of entries written in order are a ``range``, sizes are summed in C, and an entry's bytes
are never copied (``PackedEntries`` are sliced as views of their buffer).

Entries that failed go back to the *front* of the buffer in their original order, as a
group with the time before which they must not be sent again (their backoff). A group
that is a whole request to re-send as it was (same call, same idempotency key) is
*pinned*: it leaves the buffer as one batch, never merged with other entries.

Batches are cut here, under a count and a byte limit, from the ready groups first and
then the fresh entries; a group still backing off is stepped over, not waited on. Only
the oldest fresh entry's time matters (it sets the deadline of the next batch), so
times are kept per run of entries written together, not per entry.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain
from typing import Any, Generic, TypeVar, cast

__all__ = ["RequestBuffer", "Run", "joined"]

E = TypeVar("E")


class Run(Generic[E]):
    """Entries that travel together: ``entries[i]`` has sequence number ``seqs[i]`` and
    size ``sizes[i]``; ``size`` is the sum of ``sizes``."""

    __slots__ = ("seqs", "entries", "sizes", "size")

    def __init__(
        self, seqs: Sequence[int], entries: Sequence[E], sizes: list[int], size: int
    ) -> None:
        self.seqs = seqs
        self.entries = entries
        self.sizes = sizes
        self.size = size

    @classmethod
    def of(cls, items: Sequence[tuple[int, E, int]]) -> Run[E]:
        """A run of ``(seq, entry, size)`` triples."""
        sizes = [item[2] for item in items]
        return cls([item[0] for item in items], [item[1] for item in items], sizes, sum(sizes))

    def __len__(self) -> int:
        return len(self.entries)

    def pick(self, indexes: Sequence[int]) -> Run[E]:
        """The run of the entries at ``indexes`` (in that order)."""
        seqs, entries, sizes = self.seqs, self.entries, self.sizes
        picked = [sizes[i] for i in indexes]
        return Run([seqs[i] for i in indexes], [entries[i] for i in indexes], picked, sum(picked))


class _Chunk(Generic[E]):
    """A run in the buffer, of which the entries from ``start`` on are still there."""

    __slots__ = ("seqs", "entries", "sizes", "start", "size", "time", "call", "grows")

    def __init__(self, run: Run[E], time: float, call: Any = None, grows: bool = False) -> None:
        self.seqs = run.seqs
        self.entries = run.entries
        self.sizes = run.sizes
        self.size = run.size  # of the entries still there
        self.start = 0
        self.time = time  # fresh: when written; a retry group: not before when
        self.call = call
        self.grows = grows  # its lists are the buffer's own: ``append`` may extend them

    def __len__(self) -> int:
        return len(self.entries) - self.start

    def cut(self, max_count: int, max_bytes: int, first: bool) -> Run[E]:
        """Take the longest prefix of at most ``max_count`` entries and ``max_bytes``
        bytes; with ``first``, at least one entry, even one over ``max_bytes``."""
        start, left = self.start, len(self.entries) - self.start
        count = min(max_count, left)
        if count == left and self.size <= max_bytes:
            size = self.size
        else:
            size = sum(self.sizes[start : start + count])
            if size > max_bytes:
                sums = list(accumulate(self.sizes[start : start + count]))
                count = bisect_right(sums, max_bytes)
                if count == 0 and first:
                    count = 1
                size = sums[count - 1] if count else 0
        if start == 0 and count == len(self.entries):
            run = Run(self.seqs, self.entries, self.sizes, size)
        else:
            end = start + count
            run = Run(self.seqs[start:end], self.entries[start:end], self.sizes[start:end], size)
        self.start += count
        self.size -= size
        self.grows = False  # its lists hold the entries cut off until it is emptied
        return run


class RequestBuffer(Generic[E]):
    """Entries waiting to be sent. Not thread-safe; owned by one writer's event loop."""

    def __init__(self) -> None:
        self._fresh: deque[_Chunk[E]] = deque()
        self._groups: deque[_Chunk[E]] = deque()
        self.count = 0
        self.bytes = 0
        self.fresh_count = 0
        self.fresh_bytes = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def append(self, seq: int, entry: E, size: int, now: float) -> None:
        """Add one fresh entry, written at ``now``."""
        last = self._fresh[-1] if self._fresh else None
        if last is not None and last.grows and last.seqs[-1] == seq - 1:
            # The next entry of the last run (its time, the older, stays its deadline).
            last.seqs = range(last.seqs[0], seq + 1)
            cast("list[E]", last.entries).append(entry)  # a list the buffer made
            last.sizes.append(size)
            last.size += size
        else:
            run = Run(range(seq, seq + 1), [entry], [size], size)
            self._fresh.append(_Chunk(run, now, grows=True))
        self._added(1, size)

    def extend(self, run: Run[E], now: float) -> None:
        """Add a run of fresh entries, written at ``now``; the buffer keeps its lists."""
        if run.entries:
            self._fresh.append(_Chunk(run, now))
            self._added(len(run.entries), run.size)

    def _added(self, count: int, size: int) -> None:
        self.count += count
        self.bytes += size
        self.fresh_count += count
        self.fresh_bytes += size

    def requeue(self, run: Run[E], not_before: float, call: Any = None) -> None:
        """Put ``run`` (in its order) at the front, not to be sent before ``not_before``.

        With ``call``, the entries are re-sent together as that same call.
        """
        if not run.entries:
            return
        self._groups.appendleft(_Chunk(run, not_before, call))
        self.count += len(run.entries)
        self.bytes += run.size

    def oldest_fresh(self) -> float | None:
        """When the oldest fresh entry was written, or ``None`` without fresh entries."""
        return self._fresh[0].time if self._fresh else None

    def next_retry(self) -> float | None:
        """The earliest time a retry group becomes ready, or ``None`` without groups."""
        return min((group.time for group in self._groups), default=None)

    def has_ready_retry(self, now: float) -> bool:
        return any(group.time <= now for group in self._groups)

    def take(
        self, max_count: int, max_bytes: int, now: float, *, include_fresh: bool = True
    ) -> tuple[Run[E] | None, Any]:
        """Cut the next batch: ``(run, call)``; ``call`` is set for a pinned group.

        The batch holds at least one entry when any is ready, even one larger than
        ``max_bytes`` (the writer rejects such entries before they reach the buffer).
        Returns ``(None, None)`` when nothing is ready.
        """
        pieces: list[Run[E]] = []
        count = size = 0
        for group in list(self._groups):
            if group.time > now:
                continue
            if group.call is not None:
                if pieces:
                    break
                self._groups.remove(group)
                run = group.cut(len(group), group.size, True)
                self.count -= len(run)
                self.bytes -= run.size
                return run, group.call
            piece = group.cut(max_count - count, max_bytes - size, not pieces)
            if not len(group):
                self._groups.remove(group)
            if piece.entries:
                pieces.append(piece)
                count, size = count + len(piece), size + piece.size
            if count >= max_count or len(group):
                break  # full, or the group's next entry does not fit
        else:
            fresh = self._fresh
            while include_fresh and fresh and count < max_count:
                chunk = fresh[0]
                piece = chunk.cut(max_count - count, max_bytes - size, not pieces)
                if not len(chunk):
                    fresh.popleft()
                if piece.entries:
                    pieces.append(piece)
                    count, size = count + len(piece), size + piece.size
                    self.fresh_count -= len(piece)
                    self.fresh_bytes -= piece.size
                if len(chunk):
                    break  # the chunk's next entry does not fit
        if not pieces:
            return None, None
        self.count -= count
        self.bytes -= size
        return (pieces[0] if len(pieces) == 1 else joined(pieces, size)), None

    def __iter__(self) -> Iterator[tuple[int, E]]:
        """Every buffered entry with its sequence number, front to back: retry groups,
        then fresh entries."""
        for chunk in chain(self._groups, self._fresh):
            start = chunk.start
            yield from zip(chunk.seqs[start:], chunk.entries[start:], strict=True)


def joined(pieces: list[Run[E]], size: int) -> Run[E]:
    """One run of ``pieces`` (of ``size`` bytes in all), in order."""
    seqs: list[int] = []
    entries: list[E] = []
    sizes: list[int] = []
    for piece in pieces:
        seqs.extend(piece.seqs)
        entries.extend(piece.entries)
        sizes.extend(piece.sizes)
    return Run(seqs, entries, sizes, size)
