"""Ordering: which entries may leave now, so that entries of one key arrive in input order.

A writer asks its ordering policy as entries come into its buffer (``admit``), and tells
it which entries reached an end (``release``): delivered, dead-lettered or out of retries.

``KeyOrder`` (the ``orderingKey`` option) keeps at most one entry of a key out at a time:
buffered, in flight, backing off for a retry, or left unsettled by an earlier attempt of
the scope.
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
from itertools import compress, repeat
from operator import eq, is_, is_not, itemgetter, ne, not_
from typing import Any, Protocol

from ..entries.arrow_rows import ArrowRows
from ..errors import OptionError

__all__ = ["NO_ORDERING", "KeyOrder", "Ordering", "key_reader", "ordering_for"]

Entries = tuple[Sequence[int], list[Any], list[int]]  # seqs, entries, sizes
KeyOf = Callable[[Sequence[Any]], list[Hashable]]

_MISSING: Any = object()
_UNHASHABLE = frozenset((list, dict))  # map and array values: keyed by their text
_NONE: Entries = ((), [], [])


class Ordering(Protocol):
    """What a writer asks as entries come in, and tells once they ended."""

    @property
    def parked(self) -> int:
        """Entries held back, waiting for an earlier entry of their key."""

    def note(self, seqs: Sequence[int], elements: Sequence[Any]) -> None:
        """Entries ``seqs`` were written from ``elements``: learn their keys."""

    def hold(self, seq: int) -> None:
        """Entry ``seq`` is out already (an earlier attempt's call, to settle first)."""

    def admit(
        self, seqs: Sequence[int], entries: Sequence[Any], sizes: Sequence[int]
    ) -> tuple[list[int], list[int]] | None:
        """Of entries about to be buffered: ``None`` when all of them may be, else the
        indexes that may and the indexes to dead-letter; the others are parked here."""

    def release(self, seqs: Sequence[int]) -> tuple[Entries, Entries]:
        """Entries ``seqs`` ended: the parked entries that may go now, and those to
        dead-letter (an earlier entry of their key went to the dead letters)."""

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

    def admit(self, seqs: Sequence[int], entries: Sequence[Any], sizes: Sequence[int]) -> None:
        return None

    def release(self, seqs: Sequence[int]) -> tuple[Entries, Entries]:
        return _NONE, _NONE

    def dead_lettered(self, seq: int) -> None:
        pass

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(())


NO_ORDERING: Ordering = _NoOrdering()


class KeyOrder:
    """At most one entry of a key out at a time; see the module.

    An entry is out from the moment it is buffered until it ends, so the buffer holds at
    most one entry of a key and a request cut from it never holds two. The entries of a
    key form a chain: the one out, then the parked ones, each linked to the next. Whole
    runs of entries are parked and freed with dict methods mapped over them, not with a
    Python step per entry; only a key met twice in one run takes one.

    Args:
        key_of: the keys of a sequence of elements, in order (see ``key_reader``).
    """

    def __init__(self, key_of: KeyOf) -> None:
        self._key_of = key_of
        self._keys: dict[int, Hashable] = {}  # seq -> key, until the entry ends
        self._last: dict[Hashable, int] = {}  # key -> its latest entry, out or parked
        self._next: dict[int, int] = {}  # seq -> the parked entry of its key after it
        self._entries: dict[int, Any] = {}  # parked seq -> entry
        self._sizes: dict[int, int] = {}  # parked seq -> size
        self._dead: set[Hashable] = set()  # keys whose later entries follow a dead letter

    @property
    def parked(self) -> int:
        return len(self._entries)

    def note(self, seqs: Sequence[int], elements: Sequence[Any]) -> None:
        self._keys.update(zip(seqs, self._key_of(elements), strict=True))

    def hold(self, seq: int) -> None:
        key = self._keys.get(seq, _MISSING)
        if key is not _MISSING:
            self._last.setdefault(key, seq)

    def admit(
        self, seqs: Sequence[int], entries: Sequence[Any], sizes: Sequence[int]
    ) -> tuple[list[int], list[int]] | None:
        last, dead = self._last, self._dead
        keys = list(map(self._keys.get, seqs, repeat(_MISSING)))
        before: list[Any] = list(map(last.get, keys))  # the entry each waits for, or None
        count = len(keys)
        firsts = dict(
            zip(reversed(keys), range(count - 1, -1, -1), strict=True)
        )  # key -> first index
        if len(firsts) < count:  # a key twice in the run: each waits for the one before
            later = map(ne, map(firsts.__getitem__, keys), range(count))
            for index in compress(range(count), later):
                key = keys[index]
                before[index], firsts[key] = seqs[firsts[key]], index
        last.update(zip(keys, seqs, strict=True))
        if _MISSING in firsts:  # entries not written through this writer wait for none
            del last[_MISSING]
            before = [None if k is _MISSING else b for k, b in zip(keys, before, strict=True)]
        if before.count(None) == count and not dead:
            return None  # the common case: no key of the run is out
        waits = list(map(is_not, before, repeat(None)))
        parked = list(compress(seqs, waits))
        self._next.update(zip(compress(before, waits), parked, strict=True))
        self._entries.update(zip(parked, compress(entries, waits), strict=True))
        self._sizes.update(zip(parked, compress(sizes, waits), strict=True))
        leave = list(compress(range(count), map(not_, waits)))
        if not dead:
            return leave, []
        letters = [index for index in leave if keys[index] in dead]
        if letters:  # out until its dead letter ends it
            leave = [index for index in leave if keys[index] not in dead]
        return leave, letters

    def release(self, seqs: Sequence[int]) -> tuple[Entries, Entries]:
        last = self._last
        keys = list(map(self._keys.pop, seqs, repeat(_MISSING)))
        after: list[Any] = list(map(self._next.pop, seqs, repeat(None)))
        # An entry with none after it frees its key, if the key was out by it.
        ends = list(map(is_, after, repeat(None)))
        tails = list(compress(keys, ends))
        freeing = map(eq, map(last.get, tails), compress(seqs, ends))
        deque(map(last.pop, compress(tails, freeing)), maxlen=0)
        freed = list(compress(after, map(not_, ends)))
        if not freed:
            return _NONE, _NONE
        go = freed, list(map(self._entries.pop, freed)), list(map(self._sizes.pop, freed))
        if not self._dead:
            return go, _NONE
        dead = [self._keys[seq] in self._dead for seq in freed]
        return _split(go, list(map(not_, dead))), _split(go, dead)

    def dead_lettered(self, seq: int) -> None:
        key = self._keys.get(seq, _MISSING)
        if key is not _MISSING:
            self._dead.add(key)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(list(self._entries.items()))


def _split(entries: Entries, mask: list[bool]) -> Entries:
    return tuple(list(compress(part, mask)) for part in entries)  # type: ignore[return-value]


def key_reader(fields: Sequence[str]) -> KeyOf:
    """The keys of elements by ``fields``: one field's value, or the tuple of several.

    Elements are dicts, Spark ``Row``s or anything ``element[field]`` reads; the rows of
    an Arrow record batch (``ArrowRows``) are read by column, with no dict built.
    """
    names = list(fields)

    def key_of(elements: Sequence[Any]) -> list[Hashable]:
        columns = (
            _arrow_columns(elements, names)
            if isinstance(elements, ArrowRows)
            else [_column(elements, name) for name in names]
        )
        values = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
        if not _UNHASHABLE.isdisjoint(map(type, values)):
            return [repr(value) if type(value) in _UNHASHABLE else value for value in values]
        return values

    return key_of


def _arrow_columns(rows: ArrowRows, names: list[str]) -> list[list[Any]]:
    columns = []
    for name in names:
        if name not in rows.names:
            found = ", ".join(rows.names)
            raise OptionError("orderingKey", name, f"a column of the rows: {found}")
        columns.append(rows.field_values(name))
    return columns


def _column(elements: Sequence[Any], name: str) -> list[Any]:
    try:
        return list(map(itemgetter(name), elements))
    except (KeyError, IndexError, TypeError, ValueError):
        raise OptionError("orderingKey", name, "a field of every row") from None


def ordering_for(ordering_key: str) -> Ordering:
    """The ordering the ``orderingKey`` option asks for: ``KeyOrder`` by its fields, or
    ``NO_ORDERING`` when it is empty."""
    fields = [name.strip() for name in ordering_key.split(",") if name.strip()]
    return KeyOrder(key_reader(fields)) if fields else NO_ORDERING
