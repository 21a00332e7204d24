"""An in-process record store, for tests and single-process runs.

Nothing survives the process. Stores opened with the same name in one process
(``memory://NAME``) share their data, so a test can hand a URL to code that opens its own
store and then look at what it wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from asyncsink.errors import FencedError
from asyncsink.stores.base import (
    RecordStore,
    Scope,
    ScopeInfo,
    ScopeState,
    _checked_writes,
    _purge_cutoff,
)
from asyncsink.stores.urls import parse_memory_url

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Slot:
    epoch: int
    updated_at: float
    completed: bool = False
    records: dict[str, bytes] = field(default_factory=dict)


class _Shelf:
    """The data of one store; shared by every ``MemoryStore`` of the same name."""

    def __init__(self) -> None:
        self.slots: dict[Scope, _Slot] = {}
        self.lock = threading.Lock()


_NAMED: dict[str, _Shelf] = {}
_NAMED_LOCK = threading.Lock()


class MemoryStore(RecordStore):
    """A ``RecordStore`` held in a dict of this process.

    ``MemoryStore()`` has data of its own; ``MemoryStore("name")`` shares its data with every
    other store of that name in the process. Each method runs without awaiting, under a
    lock, so it is atomic for coroutines of one event loop and for threads alike.
    """

    def __init__(self, name: str | None = None) -> None:
        self._name = name
        if name is None:
            self._shelf = _Shelf()
        else:
            with _NAMED_LOCK:
                self._shelf = _NAMED.setdefault(name, _Shelf())

    @classmethod
    def from_url(cls, url: str) -> MemoryStore:
        """Open ``memory://NAME``: stores of the same ``NAME`` share their data.

        Raises:
            ValueError: not such a URL (it takes no options).
        """
        return cls(parse_memory_url(url))

    @classmethod
    def check_url(cls, url: str) -> None:
        """Check ``url`` the way ``from_url`` does, without building a store.

        Raises:
            ValueError: not a ``memory://NAME`` URL.
        """
        parse_memory_url(url)

    def __repr__(self) -> str:
        name = "" if self._name is None else repr(self._name)
        return f"MemoryStore({name})"

    async def take(self, scope: Scope) -> ScopeState:
        """Bump the epoch of ``scope`` (creating it at 1) and return its state."""
        with self._shelf.lock:
            slot = self._bump(scope)
            return ScopeState(slot.epoch, slot.completed, dict(slot.records))

    def _bump(self, scope: Scope) -> _Slot:
        """The slot of ``scope`` with its epoch bumped (created at epoch 1); under the lock."""
        now = time.time()
        slot = self._shelf.slots.get(scope)
        if slot is None:
            slot = self._shelf.slots[scope] = _Slot(epoch=1, updated_at=now)
        else:
            slot.epoch += 1
            slot.updated_at = now
        return slot

    async def load(self, scope: Scope) -> ScopeState | None:
        """Return the state of ``scope``, or ``None`` if it was never taken."""
        with self._shelf.lock:
            slot = self._shelf.slots.get(scope)
            if slot is None:
                return None
            return ScopeState(slot.epoch, slot.completed, dict(slot.records))

    async def load_record(self, scope: Scope, key: str) -> bytes | None:
        """One record of ``scope``, or ``None``."""
        with self._shelf.lock:
            slot = self._shelf.slots.get(scope)
            return None if slot is None else slot.records.get(key)

    async def put(
        self,
        scope: Scope,
        epoch: int,
        puts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
    ) -> None:
        """Apply ``puts`` and ``deletes`` at once if ``epoch`` is current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        checked, dropped = _checked_writes(puts, deletes)
        with self._shelf.lock:
            slot = self._fenced_slot(scope, epoch)
            for key in dropped:
                slot.records.pop(key, None)
            slot.records.update(checked)
            slot.updated_at = time.time()

    async def complete(self, scope: Scope, epoch: int, *, drop_records: bool = True) -> None:
        """Mark ``scope`` COMPLETED if ``epoch`` is current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        with self._shelf.lock:
            slot = self._fenced_slot(scope, epoch)
            slot.completed = True
            if drop_records:
                slot.records.clear()
            slot.updated_at = time.time()

    async def scopes(self, sink_id: str | None = None) -> list[ScopeInfo]:
        """List the scopes held (of one sink, or all), ordered by scope."""
        with self._shelf.lock:
            items = [
                ScopeInfo(scope, slot.epoch, slot.completed, len(slot.records), slot.updated_at)
                for scope, slot in self._shelf.slots.items()
                if sink_id is None or scope.sink_id == sink_id
            ]
        return sorted(items, key=lambda info: info.scope)

    async def purge(
        self,
        sink_id: str,
        *,
        run: str | None = None,
        before_batch: int | None = None,
        older_than_s: float | None = None,
    ) -> int:
        """Delete the scopes of ``sink_id`` (of one ``run``, or of all) below
        ``before_batch`` and/or older than ``older_than_s`` seconds (both must hold when
        both are given). Returns how many."""
        cutoff = _purge_cutoff(before_batch, older_than_s, time.time())
        with self._shelf.lock:
            doomed = [
                scope
                for scope, slot in self._shelf.slots.items()
                if scope.sink_id == sink_id
                and (run is None or scope.run == run)
                and (before_batch is None or scope.batch_id < before_batch)
                and (cutoff is None or slot.updated_at < cutoff)
            ]
            for scope in doomed:
                del self._shelf.slots[scope]
        return len(doomed)

    async def seal(
        self, scope: Scope, puts: Mapping[str, bytes], *, drop_prefixes: tuple[str, ...]
    ) -> None:
        """Mark ``scope`` COMPLETED for good in one step: bump its epoch (creating it at
        1), drop the records under ``drop_prefixes`` and write ``puts``."""
        checked, _ = _checked_writes(puts, ())
        with self._shelf.lock:
            slot = self._bump(scope)
            slot.completed = True
            for key in [key for key in slot.records if key.startswith(drop_prefixes)]:
                del slot.records[key]
            slot.records.update(checked)

    def _fenced_slot(self, scope: Scope, epoch: int) -> _Slot:
        slot = self._shelf.slots.get(scope)
        if slot is None or slot.epoch != epoch:
            raise FencedError(scope, epoch, None if slot is None else slot.epoch)
        return slot
