"""A destination that can honour idempotency keys, a store that can crash, and a writer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import anyio

from asyncsink import (
    AsyncSinkWriter,
    CallInfo,
    CallLog,
    Reconcile,
    Scope,
    SinkOptions,
    current_call,
)
from asyncsink.stores.base import RecordStore, ScopeInfo, ScopeState

SCOPE = Scope("sink", 0, 0)


class Crash(BaseException):
    """Stands for the process dying: nothing catches it, nothing cleans up after it."""


class Destination:
    """Applies entries; with ``idempotent``, a key seen before is answered, not applied."""

    def __init__(self, *, idempotent: bool = False, latency: float = 0.0) -> None:
        self.idempotent = idempotent
        self.latency = latency
        self.applied: list[Any] = []
        self.by_seq: dict[tuple[str, int], Any] = {}
        self.keys: set[str] = set()
        self.events: list[tuple[str, int]] = []
        self.crash_after_apply_on: int | None = None
        self.crash_before_apply_on: int | None = None
        self.requests = 0

    async def receive(self, entries: list[Any]) -> None:
        call = current_call()
        self.requests += 1
        self.events.append(("send", call.call_id))
        if self.crash_before_apply_on == self.requests:
            raise Crash(f"died before request {self.requests} left")
        if self.latency:
            await anyio.sleep(self.latency)
        if not (self.idempotent and call.idempotency_key in self.keys):
            self.keys.add(call.idempotency_key)
            self.applied.extend(entries)
            for seq, entry in zip(call.seqs, entries, strict=True):
                self.by_seq[(call.scope, seq)] = entry
        if self.crash_after_apply_on == self.requests:
            raise Crash(f"died after request {self.requests} was applied")

    def held(self, call: CallInfo) -> list[int]:
        return [seq for seq in call.seqs if (call.scope, seq) in self.by_seq]

    def duplicates(self) -> int:
        return sum(n - 1 for n in Counter(self.applied).values())


class EntryWriter(AsyncSinkWriter[Any, Any]):
    reconciliation = Reconcile.BY_CALL

    def __init__(self, destination: Destination, *, reconciles: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.destination = destination
        self.reconciles = reconciles

    def convert(self, element: Any) -> Any:
        return element

    def entry_size(self, entry: Any) -> int:
        return 8

    async def submit_request_entries(self, entries: list[Any]) -> None:
        await self.destination.receive(entries)

    async def reconcile(self, call: CallInfo) -> Collection[int] | None:
        return self.destination.held(call) if self.reconciles else None


class CrashingStore(RecordStore):
    """Wraps a store; can crash on the n-th put or on complete, and logs each write."""

    def __init__(self, inner: RecordStore, events: list[tuple[str, int]] | None = None) -> None:
        self.inner = inner
        self.events = events if events is not None else []
        self.puts = 0
        self.crash_on_put: int | None = None
        self.crash_on_complete = False

    async def take(self, scope: Scope) -> ScopeState:
        return await self.inner.take(scope)

    async def load(self, scope: Scope) -> ScopeState | None:
        return await self.inner.load(scope)

    async def put(
        self, scope: Scope, epoch: int, puts: Mapping[str, bytes], deletes: Iterable[str] = ()
    ) -> None:
        self.puts += 1
        if self.crash_on_put == self.puts:
            raise Crash(f"died before store write {self.puts}")
        await self.inner.put(scope, epoch, puts, deletes)
        for key, value in puts.items():
            if key.startswith("call:"):
                status = b"PENDING" if b'"PENDING"' in value else b"terminal"
                self.events.append((status.decode(), int(key[5:])))

    async def complete(self, scope: Scope, epoch: int, *, drop_records: bool = True) -> None:
        if self.crash_on_complete:
            raise Crash("died before COMPLETED")
        await self.inner.complete(scope, epoch, drop_records=drop_records)
        self.events.append(("COMPLETED", -1))

    async def scopes(self, sink_id: str | None = None) -> list[ScopeInfo]:
        return await self.inner.scopes(sink_id)

    async def purge(
        self,
        sink_id: str,
        *,
        run: str | None = None,
        before_batch: int | None = None,
        older_than_s: float | None = None,
    ) -> int:
        return await self.inner.purge(
            sink_id, run=run, before_batch=before_batch, older_than_s=older_than_s
        )


def options(**overrides: Any) -> SinkOptions:
    base: dict[str, Any] = {
        "max_batch_size": 10,
        "max_in_flight_requests": 4,
        "initial_backoff_ms": 1,
        "max_backoff_ms": 5,
    }
    return SinkOptions(**{**base, **overrides})


async def run_attempt(
    store: RecordStore,
    destination: Destination,
    elements: Iterable[Any],
    *,
    scope: Scope = SCOPE,
    reconciles: bool = False,
    complete: bool = True,
    **overrides: Any,
) -> EntryWriter:
    """One attempt of the scope: write everything, pass the barrier (or crash), and with
    ``complete`` do what the driver does once Spark committed: complete the scope."""
    call_log = CallLog(store, scope)
    writer = EntryWriter(
        destination,
        reconciles=reconciles,
        options=options(**overrides),
        call_log=call_log,
    )
    async with writer:
        await writer.write_all(elements)
    if complete:
        await call_log.complete()
    return writer
