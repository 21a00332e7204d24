"""What a writer records of its requests: the call-log contract, and the log that keeps
nothing.

The writer numbers its requests and reports each one's outcome to a ``CallRecorder``.
The durable ``CallLog`` (``asyncsink.durable``) makes that memory outlive the attempt:
it replays what an earlier attempt delivered and settles what it left unfinished. A
writer without ``sinkId`` gets ``NoRecords``: calls are numbered for this writer alone
and nothing is remembered, so every method is a no-op and the writer has one code path.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Protocol

from ..request import CallInfo, idempotency_key

__all__ = ["CallRecorder", "NoRecords", "Released", "CallLookUp", "Serializer"]

Released = tuple[int, Any, int]  # (seq, entry, size)
Serializer = Callable[[Any], bytes]
CallLookUp = Callable[[CallInfo], Awaitable[Collection[int] | None]]


class CallRecorder(Protocol):
    """The writer's side of a call log.

    ``persistent`` says whether ``sync`` writes anything. ``completed`` (the scope was
    completed by an earlier run: nothing is sent) and ``recovering`` (replayed entries
    are still expected) are read after ``open``. ``changes`` counts what was recorded
    so far: a mark for ``sync(through=...)``. ``ahead`` says whether the writer records
    requests before they can leave (``asyncsink.writer._ahead``).
    """

    scope_name: str
    persistent: bool
    ahead: bool
    completed: bool
    recovering: bool
    needs_sync: bool

    @property
    def changes(self) -> int: ...

    async def open(self, serialize: Serializer, reconcile: CallLookUp) -> None:
        """Take the scope and plan the recovery of earlier attempts."""

    def admit(self, seq: int, entry: Any, size: int, now: float) -> bool:
        """Route a replayed entry: ``True`` if the log took it, ``False`` to send it."""

    def take_released(self) -> tuple[list[Released], list[tuple[CallInfo, list[Released]]]]:
        """Entries to send as new, and whole calls of earlier attempts to re-send."""

    def take_rejected(self) -> list[tuple[int, Any, str]]:
        """Replayed entries an earlier attempt's answer settled as dead letters (rejected,
        or out of retries), with their reasons: the writer hands them to its dead letters
        again, since only the letters of the attempt Spark takes are kept."""

    def skip_completed(self, entries: Sequence[Any], count: int | None = None) -> None:
        """Elements of a completed scope: counted and digested, never sent."""

    def settle_reconciled(
        self, call: CallInfo, held: Collection[int] | None, *, earlier: bool = True
    ) -> frozenset[int]:
        """A call left without an answer (by an earlier attempt, its entries given again,
        or by this one), looked up: ``held`` are the entries the destination holds, or
        ``None`` when it was not or could not be looked up (the call is re-sent as it
        was). Returns those now settled."""

    def recorded_results(self) -> list[Any]:
        """Result details of the acknowledged calls of the scope, in call order."""

    def new_call(self, seqs: Sequence[int], entries: Sequence[Any]) -> CallInfo:
        """Number a new request carrying ``entries`` (sequence numbers ``seqs``), and
        record it PENDING."""

    def sending_again(self, call: CallInfo) -> CallInfo:
        """``call`` is about to be sent again: note when (durable with the next sync), and
        return it with that time."""

    def record_result(
        self, call: CallInfo, acked: Collection[int], rejected: dict[int, str], detail: Any
    ) -> None:
        """The destination answered ``call``: ``acked`` and dead-lettered ``rejected``."""

    def record_failure(self, call: CallInfo, error: BaseException | None) -> None:
        """``call`` failed for good."""

    async def sync(self, through: int | None = None) -> None:
        """Make what was recorded so far durable; with ``through``, what was recorded up
        to the moment ``changes`` had that value (a request waits for its own record
        only, not for those recorded after it)."""

    def finish_input(self, entries: int) -> None:
        """The input ended after ``entries`` entries."""

    def statistics(self) -> dict[str, int]:
        """Counts for ``WriterStatistics``: skipped, reconciled, resent_calls."""


class NoRecords:
    """A call log that remembers nothing: keys are unique to this writer instance."""

    persistent = False
    completed = False
    recovering = False
    needs_sync = False
    changes = 0
    ahead = False

    def __init__(self) -> None:
        self.scope_name = f"writer-{uuid.uuid4()}"
        self._next_call = 0

    async def open(self, serialize: Serializer, reconcile: CallLookUp) -> None:
        return None

    def admit(self, seq: int, entry: Any, size: int, now: float) -> bool:
        return False

    def take_released(self) -> tuple[list[Released], list[tuple[CallInfo, list[Released]]]]:
        return [], []

    def take_rejected(self) -> list[tuple[int, Any, str]]:
        return []

    def skip_completed(self, entries: Sequence[Any], count: int | None = None) -> None:
        raise AssertionError("a writer without call records has no completed scope")

    def settle_reconciled(
        self, call: CallInfo, held: Collection[int] | None, *, earlier: bool = True
    ) -> frozenset[int]:
        raise AssertionError("a writer without call records looks up no call")

    def recorded_results(self) -> list[Any]:
        return []

    def new_call(self, seqs: Sequence[int], entries: Sequence[Any]) -> CallInfo:
        call_id = self._next_call
        self._next_call += 1
        key = idempotency_key(self.scope_name, call_id)
        seqs = seqs if type(seqs) is range else tuple(seqs)
        return CallInfo(call_id, key, self.scope_name, seqs)

    def record_result(
        self, call: CallInfo, acked: Collection[int], rejected: dict[int, str], detail: Any
    ) -> None:
        return None

    def sending_again(self, call: CallInfo) -> CallInfo:
        return call

    def record_failure(self, call: CallInfo, error: BaseException | None) -> None:
        return None

    async def sync(self, through: int | None = None) -> None:
        return None

    def finish_input(self, entries: int) -> None:
        return None

    def statistics(self) -> dict[str, int]:
        return {"skipped": 0, "reconciled": 0, "resent_calls": 0}
