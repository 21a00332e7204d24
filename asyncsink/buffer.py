"""The writer's buffer: fresh entries in write order, behind groups of entries to retry.

An entry is held as an ``Item``, the tuple ``(seq, entry, size)``: a tuple costs a
fraction of an object with attributes, and the writer holds one per accepted entry.

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

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Generic, TypeVar

__all__ = ["Item", "RequestBuffer"]

E = TypeVar("E")

Item = tuple[int, E, int]
"""One entry in the writer: ``(seq, entry, size)``."""


class _Group(Generic[E]):
    __slots__ = ("not_before", "items", "call")

    def __init__(self, items: list[Item[E]], not_before: float, call: Any) -> None:
        self.items = deque(items)
        self.not_before = not_before
        self.call = call


class RequestBuffer(Generic[E]):
    """Entries waiting to be sent. Not thread-safe; owned by one writer's event loop."""

    def __init__(self) -> None:
        self._fresh: deque[Item[E]] = deque()
        self._times: deque[list[Any]] = deque()  # [count, written at] per run of fresh
        self._groups: deque[_Group[E]] = deque()
        self.count = 0
        self.bytes = 0
        self.fresh_bytes = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    @property
    def fresh_count(self) -> int:
        return len(self._fresh)

    def append(self, item: Item[E], now: float) -> None:
        """Add one fresh entry, written at ``now``."""
        self._fresh.append(item)
        self._note_times(1, now)
        self.count += 1
        self.bytes += item[2]
        self.fresh_bytes += item[2]

    def extend(self, items: list[Item[E]], now: float) -> None:
        """Add fresh entries written at ``now``."""
        size = _size_of(items)
        self._fresh.extend(items)
        self._note_times(len(items), now)
        self.count += len(items)
        self.bytes += size
        self.fresh_bytes += size

    def _note_times(self, count: int, now: float) -> None:
        times = self._times
        if times and times[-1][1] == now:
            times[-1][0] += count
        else:
            times.append([count, now])

    def requeue(self, items: list[Item[E]], not_before: float, call: Any = None) -> None:
        """Put ``items`` (in their order) at the front, not to be sent before ``not_before``.

        With ``call``, the items are re-sent together as that same call.
        """
        if not items:
            return
        self._groups.appendleft(_Group(items, not_before, call))
        self.count += len(items)
        self.bytes += _size_of(items)

    def oldest_fresh(self) -> float | None:
        """When the oldest fresh entry was written, or ``None`` without fresh entries."""
        return self._times[0][1] if self._times else None

    def next_retry(self) -> float | None:
        """The earliest time a retry group becomes ready, or ``None`` without groups."""
        return min((group.not_before for group in self._groups), default=None)

    def has_ready_retry(self, now: float) -> bool:
        return any(group.not_before <= now for group in self._groups)

    def take(
        self, max_count: int, max_bytes: int, now: float, *, include_fresh: bool = True
    ) -> tuple[list[Item[E]], int, Any]:
        """Cut the next batch: ``(items, size, call)``; ``call`` is set for a pinned group.

        The batch holds at least one entry when any is ready, even one larger than
        ``max_bytes`` (the writer rejects such entries before they reach the buffer).
        Returns ``([], 0, None)`` when nothing is ready.
        """
        batch: list[Item[E]] = []
        size = 0
        for group in list(self._groups):
            if group.not_before > now:
                continue
            if group.call is not None:
                if batch:
                    break
                self._groups.remove(group)
                items = list(group.items)
                size = _size_of(items)
                self.count -= len(items)
                self.bytes -= size
                return items, size, group.call
            size = _fill(batch, size, group.items, max_count, max_bytes)
            if not group.items:
                self._groups.remove(group)
            if len(batch) >= max_count:
                break
        if include_fresh and len(batch) < max_count and self._fresh:
            before = size
            size = self._take_fresh(batch, size, max_count, max_bytes)
            self.fresh_bytes -= size - before
        self.count -= len(batch)
        self.bytes -= size
        return batch, size, None

    def _take_fresh(self, batch: list[Item[E]], size: int, max_count: int, max_bytes: int) -> int:
        fresh = self._fresh
        wanted = max_count - len(batch)
        run = list(islice(fresh, wanted))
        run_size = _size_of(run)
        if size + run_size <= max_bytes:
            # The common case: the next ``wanted`` entries fit under the byte limit.
            for _ in range(len(run)):
                fresh.popleft()
            batch.extend(run)
            self._forget_times(len(run))
            return size + run_size
        taken = len(batch)
        size = _fill(batch, size, fresh, max_count, max_bytes)
        self._forget_times(len(batch) - taken)
        return size

    def _forget_times(self, count: int) -> None:
        times = self._times
        while count:
            run = times[0]
            if run[0] > count:
                run[0] -= count
                return
            count -= run[0]
            times.popleft()

    def __iter__(self) -> Iterator[Item[E]]:
        """Every buffered item, front to back: retry groups, then fresh entries."""
        for group in self._groups:
            yield from group.items
        yield from self._fresh


def _fill(
    batch: list[Item[E]], size: int, source: deque[Item[E]], max_count: int, max_bytes: int
) -> int:
    while source and len(batch) < max_count:
        item = source[0]
        if batch and size + item[2] > max_bytes:
            break
        source.popleft()
        batch.append(item)
        size += item[2]
    return size


def _size_of(items: Iterable[Item[Any]]) -> int:
    return sum([item[2] for item in items])
