"""The writer's buffer: fresh entries in write order, behind groups of entries to retry.

Entries that failed go back to the *front* of the buffer in their original order, as a
group with the time before which they must not be sent again (their backoff). A group
that is a whole request to re-send as it was (same call, same idempotency key) is
*pinned*: it leaves the buffer as one batch, never merged with other entries.

Batches are cut here, under a count and a byte limit, from the ready groups first and
then the fresh entries; a group still backing off is stepped over, not waited on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Item", "RequestBuffer"]

E = TypeVar("E")


class Item(Generic[E]):
    """One entry in the writer: its sequence number, size and retry count."""

    __slots__ = ("seq", "entry", "size", "attempts", "enqueued")

    def __init__(self, seq: int, entry: E, size: int, enqueued: float) -> None:
        self.seq = seq
        self.entry = entry
        self.size = size
        self.attempts = 0
        self.enqueued = enqueued

    def __repr__(self) -> str:
        return f"Item(seq={self.seq}, size={self.size}, attempts={self.attempts})"


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

    def append(self, item: Item[E]) -> None:
        self._fresh.append(item)
        self.count += 1
        self.bytes += item.size
        self.fresh_bytes += item.size

    def requeue(self, items: list[Item[E]], not_before: float, call: Any = None) -> None:
        """Put ``items`` (in their order) at the front, not to be sent before ``not_before``.

        With ``call``, the items are re-sent together as that same call.
        """
        if not items:
            return
        self._groups.appendleft(_Group(items, not_before, call))
        self.count += len(items)
        self.bytes += sum(item.size for item in items)

    def oldest_fresh(self) -> float | None:
        """When the oldest fresh entry was written, or ``None`` without fresh entries."""
        return self._fresh[0].enqueued if self._fresh else None

    def next_retry(self) -> float | None:
        """The earliest time a retry group becomes ready, or ``None`` without groups."""
        return min((group.not_before for group in self._groups), default=None)

    def has_ready_retry(self, now: float) -> bool:
        return any(group.not_before <= now for group in self._groups)

    def take(
        self, max_count: int, max_bytes: int, now: float, *, include_fresh: bool = True
    ) -> tuple[list[Item[E]], Any]:
        """Cut the next batch: ``(items, call)``; ``call`` is set for a pinned group.

        The batch holds at least one entry when any is ready, even one larger than
        ``max_bytes`` (the writer rejects such entries before they reach the buffer).
        Returns ``([], None)`` when nothing is ready.
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
                self._account(group.items)
                return list(group.items), group.call
            size = self._fill(batch, size, group.items, max_count, max_bytes)
            if not group.items:
                self._groups.remove(group)
            if len(batch) >= max_count:
                break
        if include_fresh and len(batch) < max_count:
            before = len(batch)
            size = self._fill(batch, size, self._fresh, max_count, max_bytes)
            self.fresh_bytes -= sum(item.size for item in batch[before:])
        self._account(batch)
        return batch, None

    @staticmethod
    def _fill(
        batch: list[Item[E]], size: int, source: deque[Item[E]], max_count: int, max_bytes: int
    ) -> int:
        while source and len(batch) < max_count:
            item = source[0]
            if batch and size + item.size > max_bytes:
                break
            source.popleft()
            batch.append(item)
            size += item.size
        return size

    def _account(self, items: Any) -> None:
        self.count -= len(items)
        self.bytes -= sum(item.size for item in items)

    def __iter__(self) -> Iterator[Item[E]]:
        """Every buffered item, front to back: retry groups, then fresh entries."""
        for group in self._groups:
            yield from group.items
        yield from self._fresh
