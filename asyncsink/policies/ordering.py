"""Ordering: which entries may leave now, so that entries of one key arrive in input order.

A writer asks its ordering policy before each request starts (``admit``), and tells it
which entries reached an end (``release``): delivered, dead-lettered or out of retries.

``KeyOrder`` (the ``orderingKey`` option) keeps at most one entry of a key out at a time:
in flight, backing off for a retry, or left unsettled by an earlier attempt of the scope.
A later entry of that key waits (is *parked*) until the earlier one ends; entries of other
keys go on, in the same request. A request never holds two entries of one key, so an
answer item by item cannot reorder them. A failed entry stays its key's entry out until
it is retried and ends. Once an entry of a key goes to the dead letters, the later entries
of that key (in this writer) follow it there, so none is applied past a missing change.

``NO_ORDERING`` admits everything: the writer's default.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol

from ..errors import OptionError

__all__ = ["NO_ORDERING", "KeyOrder", "Ordering", "key_reader", "ordering_for"]

Parked = tuple[int, Any, int]  # (seq, entry, size)
KeyOf = Callable[[Sequence[Any]], list[Hashable]]

_MISSING: Any = object()
_UNHASHABLE = (list, dict)  # map and array values: keyed by their text


class Ordering(Protocol):
    """What a writer asks before entries leave, and tells once they ended."""

    parked: int  # entries held back, waiting for an earlier entry of their key

    def note(self, seqs: Sequence[int], elements: Sequence[Any]) -> None:
        """Entries ``seqs`` were written from ``elements``: learn their keys."""

    def hold(self, seq: int) -> None:
        """Entry ``seq`` is out already (an earlier attempt's call, to settle first)."""

    def admit(
        self, seqs: Sequence[int], entries: Sequence[Any], sizes: Sequence[int], whole: bool
    ) -> tuple[list[int], list[int]] | None:
        """Of a batch about to leave: ``None`` when all of it may, else the indexes that
        may leave and the indexes to dead-letter; the others are parked here. ``whole``:
        the batch is a call sent again as it was, which leaves whole."""

    def release(self, seqs: Sequence[int]) -> list[Parked]:
        """Entries ``seqs`` ended: the parked entries that may leave now, in order."""

    def dead_lettered(self, seq: int) -> None:
        """Entry ``seq`` went to the dead letters: so do the later entries of its key."""

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        """The parked entries, with their sequence numbers."""


class _NoOrdering:
    parked = 0

    def note(self, seqs: Sequence[int], elements: Sequence[Any]) -> None:
        pass

    def hold(self, seq: int) -> None:
        pass

    def admit(
        self, seqs: Sequence[int], entries: Sequence[Any], sizes: Sequence[int], whole: bool
    ) -> None:
        return None

    def release(self, seqs: Sequence[int]) -> list[Parked]:
        return []

    def dead_lettered(self, seq: int) -> None:
        pass

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(())


NO_ORDERING: Ordering = _NoOrdering()


class KeyOrder:
    """At most one entry of a key out at a time; see the module.

    Args:
        key_of: the keys of a sequence of elements, in order (see ``key_reader``).
    """

    def __init__(self, key_of: KeyOf) -> None:
        self._key_of = key_of
        self._keys: dict[int, Hashable] = {}  # seq -> key, until the entry ends
        self._out: dict[Hashable, int] = {}  # key -> the seq of its entry out
        self._waiting: dict[Hashable, deque[Parked]] = {}
        self._dead: set[Hashable] = set()  # keys whose later entries follow a dead letter
        self.parked = 0

    def note(self, seqs: Sequence[int], elements: Sequence[Any]) -> None:
        self._keys.update(zip(seqs, self._key_of(elements), strict=True))

    def hold(self, seq: int) -> None:
        key = self._keys.get(seq, _MISSING)
        if key is not _MISSING:
            self._out.setdefault(key, seq)

    def admit(
        self, seqs: Sequence[int], entries: Sequence[Any], sizes: Sequence[int], whole: bool
    ) -> tuple[list[int], list[int]] | None:
        key_of, out_of, out = self._keys.get, self._out.get, self._out
        waiting, dead = self._waiting, self._dead
        leave: list[int] = []
        letters: list[int] = []
        for index, seq in enumerate(seqs):
            key = key_of(seq, _MISSING)
            if key is _MISSING:  # not written through this writer (a restored snapshot)
                leave.append(index)
                continue
            owner = out_of(key)
            if owner is None or owner == seq or whole:
                if dead and key in dead and not whole:
                    letters.append(index)
                    continue
                out[key] = seq
                leave.append(index)
            else:  # a waiting key always has an entry out
                queue = waiting.get(key)
                if queue is None:
                    queue = waiting[key] = deque()
                queue.append((seq, entries[index], sizes[index]))
        self.parked += len(seqs) - len(leave) - len(letters)
        if not letters and len(leave) == len(seqs):
            return None
        return leave, letters

    def release(self, seqs: Sequence[int]) -> list[Parked]:
        pop_key, out_of, out, waiting = self._keys.pop, self._out.get, self._out, self._waiting
        freed: list[Parked] = []
        for seq in seqs:
            key = pop_key(seq, _MISSING)
            if key is _MISSING or out_of(key) != seq:
                continue
            queue = waiting.get(key)
            if queue is None:
                del out[key]
                continue
            head = queue.popleft()
            if not queue:
                del waiting[key]
            out[key] = head[0]
            freed.append(head)
        self.parked -= len(freed)
        return freed

    def dead_lettered(self, seq: int) -> None:
        key = self._keys.get(seq, _MISSING)
        if key is not _MISSING:
            self._dead.add(key)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        for queue in self._waiting.values():
            for seq, entry, _ in queue:
                yield seq, entry


def key_reader(fields: Sequence[str]) -> KeyOf:
    """The keys of elements by ``fields``: one field's value, or the tuple of several.

    Elements are dicts, Spark ``Row``s or anything ``element[field]`` reads; the rows of
    an Arrow record batch (``ArrowRows``) are read by column, with no dict built.
    """
    names = list(fields)

    def key_of(elements: Sequence[Any]) -> list[Hashable]:
        batch = getattr(elements, "batch", None)
        columns = (
            _arrow_columns(batch, names)
            if batch is not None
            else [[_field(e, name) for e in elements] for name in names]
        )
        values = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
        if any(type(value) in _UNHASHABLE for value in values):
            return [repr(value) if type(value) in _UNHASHABLE else value for value in values]
        return values

    return key_of


def _arrow_columns(batch: Any, names: list[str]) -> list[list[Any]]:
    found = list(batch.schema.names)
    columns = []
    for name in names:
        if name not in found:
            raise OptionError("orderingKey", name, f"a column of the rows: {', '.join(found)}")
        columns.append(batch.column(found.index(name)).to_pylist())
    return columns


def _field(element: Any, name: str) -> Any:
    try:
        return element[name]
    except (KeyError, IndexError, TypeError, ValueError):
        raise OptionError("orderingKey", name, "a field of every row") from None


def ordering_for(ordering_key: str) -> Ordering:
    """The ordering the ``orderingKey`` option asks for: ``KeyOrder`` by its fields, or
    ``NO_ORDERING`` when it is empty."""
    fields = [name.strip() for name in ordering_key.split(",") if name.strip()]
    return KeyOrder(key_reader(fields)) if fields else NO_ORDERING
