"""The record store contract: what the durable call log needs from storage.

A store keeps, per scope, a fencing epoch, a COMPLETED flag and a set of opaque records
(``key -> bytes``). It knows nothing about what a record means; the call log encodes and
decodes them. Every write is conditional on the caller's epoch, so an attempt that another
attempt took the scope from can no longer change anything (``FencedError``).

Implementations: ``memory`` (tests, one process), ``sqlite`` (embedded default, one file
shared by the processes of one machine), ``postgresql`` (any cluster) and ``dynamodb``
(clusters on AWS).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["RecordStore", "Scope", "ScopeInfo", "ScopeState"]


_RUN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """One Spark task's share of work: the unit of durable records and fencing.

    ``sink_id`` names the query or job and is stable across restarts; ``run`` names one
    logical run of it (a streaming query's persistent id, a fresh id per batch write, or
    ``""`` when the batch id alone names the run); ``batch_id`` is the micro-batch id (or
    a job-level id for batch writes); ``partition_id`` the partition. Two runs never share
    a scope, so they never share records or idempotency keys.

    Its text form is ``sink/batch/partition``, or ``sink/run/batch/partition`` with a run.
    """

    sink_id: str
    batch_id: int
    partition_id: int
    run: str = ""

    def __post_init__(self) -> None:
        if not self.sink_id or "/" in self.sink_id:
            raise ValueError(f"sink_id must be non-empty and free of '/': {self.sink_id!r}")
        if self.batch_id < 0 or self.partition_id < 0:
            raise ValueError(f"batch_id and partition_id must be >= 0: {self}")
        if len(self.run) > 64 or not _RUN_CHARS.issuperset(self.run):
            raise ValueError(
                f"run must be at most 64 letters, digits, '-', '_' or '.': {self.run!r}"
            )

    def __str__(self) -> str:
        if self.run:
            return f"{self.sink_id}/{self.run}/{self.batch_id}/{self.partition_id}"
        return f"{self.sink_id}/{self.batch_id}/{self.partition_id}"

    @classmethod
    def parse(cls, text: str) -> Scope:
        """The scope whose text form is ``text`` (``sink/batch/partition`` or
        ``sink/run/batch/partition``).

        Raises:
            ValueError: ``text`` is not a scope's text form.
        """
        parts = text.split("/")
        try:
            if len(parts) == 3:
                return cls(parts[0], int(parts[1]), int(parts[2]))
            if len(parts) == 4:
                return cls(parts[0], int(parts[2]), int(parts[3]), parts[1])
        except ValueError as exc:
            raise ValueError(f"not a scope: {text!r} ({exc})") from None
        raise ValueError(f"not a scope: {text!r} (expected sink/[run/]batch/partition)")


@dataclass(frozen=True, slots=True)
class ScopeState:
    """What a store holds for a scope: its epoch, COMPLETED flag and records."""

    epoch: int
    completed: bool
    records: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class ScopeInfo:
    """A line of a store listing."""

    scope: Scope
    epoch: int
    completed: bool
    record_count: int
    updated_at: float  # seconds since the epoch (time.time())


class RecordStore(abc.ABC):
    """Durable storage for call records, fenced by a per-scope epoch.

    Guarantees every implementation gives (checked by the shared conformance suite):

    - ``take`` atomically bumps the scope's epoch (creating the scope at epoch 1) and
      returns the new epoch with the records and COMPLETED flag as they were.
    - ``put`` applies all its puts and deletes, or none, and only while the stored epoch
      equals the caller's; otherwise it raises ``FencedError`` and changes nothing.
    - ``complete`` marks the scope COMPLETED (and drops its records when asked) under the
      same epoch condition. A COMPLETED scope stays COMPLETED; ``take`` still bumps its epoch.
    - Once ``put`` or ``complete`` returned, the change survives a crash of the process.

    A store whose ``verify`` checks something declares it: ``verifies = True``.
    ``records_ahead`` says a writer records requests before they can leave
    (``asyncsink.writer._ahead``): worth it where a write takes milliseconds, as over a network.
    """

    verifies: ClassVar[bool] = False
    records_ahead: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        overrides = next(k for k in cls.__mro__ if "verify" in vars(k)) is not RecordStore
        if overrides != cls.verifies:
            raise TypeError(
                f"{cls.__qualname__}: set the class attribute verifies = {overrides} "
                "(True exactly when the store overrides verify)"
            )

    @abc.abstractmethod
    async def take(self, scope: Scope) -> ScopeState:
        """Claim ``scope`` for a new attempt: bump its epoch, return its state.

        Raises:
            DurableError: the store cannot be reached or written.
        """

    @abc.abstractmethod
    async def load(self, scope: Scope) -> ScopeState | None:
        """Read ``scope`` without claiming it; ``None`` if the store has never seen it."""

    async def load_record(self, scope: Scope, key: str) -> bytes | None:
        """One record of ``scope`` without claiming it; ``None`` if the scope or the
        record is missing. This default loads the whole scope; stores override it to read
        the one record."""
        state = await self.load(scope)
        return None if state is None else state.records.get(key)

    @abc.abstractmethod
    async def put(
        self,
        scope: Scope,
        epoch: int,
        puts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
    ) -> None:
        """Write and delete records of ``scope`` atomically, if ``epoch`` is still current.

        A put of an existing key replaces its value; deleting a missing key does nothing.
        With neither puts nor deletes it only checks the fence (and touches ``updated_at``).

        Raises:
            FencedError: the scope's epoch is no longer ``epoch`` (or it was never taken).
            ValueError: a key is both put and deleted.
            TypeError: a key is not ``str`` or a value not bytes-like.
        """

    @abc.abstractmethod
    async def complete(self, scope: Scope, epoch: int, *, drop_records: bool = True) -> None:
        """Mark ``scope`` COMPLETED, if ``epoch`` is still current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """

    @abc.abstractmethod
    async def scopes(self, sink_id: str | None = None) -> list[ScopeInfo]:
        """List the scopes held (of one sink, or all), ordered by scope."""

    @abc.abstractmethod
    async def purge(
        self,
        sink_id: str,
        *,
        run: str | None = None,
        before_batch: int | None = None,
        older_than_s: float | None = None,
    ) -> int:
        """Delete the scopes of ``sink_id`` (of one ``run`` when given, else of every run)
        whose batch is below ``before_batch`` and/or which were last updated more than
        ``older_than_s`` seconds ago. Returns how many. With both bounds a scope must meet
        both; with neither, every scope of ``sink_id`` (and ``run``) goes. Purging ignores
        epochs: a purged scope is unknown again (``load`` gives ``None``) and a later
        ``take`` starts it afresh at epoch 1."""

    async def seal(
        self, scope: Scope, puts: Mapping[str, bytes], *, drop_prefixes: tuple[str, ...]
    ) -> None:
        """Mark ``scope`` COMPLETED for good, whoever holds it: what the driver does once
        Spark committed the work of the scope.

        Bumps the epoch (so an attempt still running is fenced at its next write), marks
        the scope COMPLETED, writes ``puts`` and deletes the other records whose keys start
        with one of ``drop_prefixes`` (a key in ``puts`` is kept with its new value). A
        scope the store never saw is created COMPLETED. Sealing twice is harmless. After a
        crash part way, the scope is COMPLETED with ``puts`` written whenever any record
        was dropped. This default is built from ``take``, ``put`` and ``complete``; stores
        override it to do the same in fewer round trips.

        Raises:
            DurableError: the store cannot be reached or written.
        """
        puts, _ = _checked_writes(puts, ())
        state = await self.take(scope)
        await self.put(scope, state.epoch, puts)
        await self.complete(scope, state.epoch, drop_records=False)
        doomed = [key for key in state.records if key.startswith(drop_prefixes) and key not in puts]
        if doomed:
            await self.put(scope, state.epoch, {}, doomed)

    async def verify(self) -> None:  # noqa: B027 - optional hook
        """Fail now if the store cannot serve: what the Spark driver calls before any task
        starts. The default checks nothing; a store reached over the network connects and
        checks its tables.

        Raises:
            DurableError: the store cannot be reached, or its tables cannot serve.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections and handles. The default has nothing to release.

        Closing twice is harmless. A store used again after ``aclose`` opens what it needs
        anew, so a long-lived worker can close it at the end of each event loop."""

    async def __aenter__(self) -> RecordStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _checked_writes(
    puts: Mapping[str, bytes], deletes: Iterable[str]
) -> tuple[dict[str, bytes], list[str]]:
    """Validate the arguments of ``RecordStore.put`` and return them as plain containers.

    Shared by the implementations so they agree on what a valid write is.
    """
    checked: dict[str, bytes] = {}
    for key, value in puts.items():
        if not isinstance(key, str):
            raise TypeError(f"record keys must be str, got {type(key).__name__}: {key!r}")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"record {key!r}: value must be bytes, got {type(value).__name__}")
        checked[key] = bytes(value)
    dropped: dict[str, None] = {}
    for key in deletes:
        if not isinstance(key, str):
            raise TypeError(f"record keys must be str, got {type(key).__name__}: {key!r}")
        dropped[key] = None
    both = sorted(dropped.keys() & checked.keys())
    if both:
        raise ValueError(f"keys both put and deleted in one call: {both}")
    return checked, list(dropped)


def _purge_cutoff(before_batch: int | None, older_than_s: float | None, now: float) -> float | None:
    """Validate the bounds of ``RecordStore.purge``; return the ``updated_at`` cutoff, if any."""
    if before_batch is not None and before_batch < 0:
        raise ValueError(f"before_batch must be >= 0, got {before_batch}")
    if older_than_s is None:
        return None
    if older_than_s < 0:
        raise ValueError(f"older_than_s must be >= 0, got {older_than_s}")
    return now - older_than_s
