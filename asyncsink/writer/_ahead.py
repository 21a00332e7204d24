"""Requests recorded ahead of the moment they may leave.

With durable call records, a request leaves only once its PENDING record is durable: a
store write (a few milliseconds on PostgreSQL) between one request's answer and the
next one leaving. While no request may start (the in-flight limit is reached) and the
buffer holds full batches, the writer cuts the next ones into calls and records them
then; when a request ends, the oldest of them leaves at once, its record already
written.

A call recorded ahead and never sent (the task failed first) is PENDING in the records,
as a call whose answer was lost is: the next attempt settles it by its reconciler, or
sends it again under the same idempotency key.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

from ._buffer import RequestBuffer
from ._sending import Call

__all__ = ["Ahead"]

E = TypeVar("E")


class Ahead(Generic[E]):
    """The calls recorded ahead, oldest first.

    Args:
        enabled: whether to record any (the store's ``records_ahead``).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._calls: deque[Call[E]] = deque()

    def wants(self, buffer: RequestBuffer[E], batch: int, depth: int, now: float) -> bool:
        """Whether to record one more: fewer than ``depth`` (the requests in flight at
        most, whose answers tend to come together) wait, and a full batch of fresh
        entries waits with no retry due before it."""
        return (
            self.enabled
            and len(self._calls) < depth
            and buffer.fresh_count >= batch
            and not buffer.has_ready_retry(now)
        )

    def add(self, call: Call[E]) -> None:
        self._calls.append(call)

    def pop(self, now: float) -> Call[E]:
        """The oldest call, to send now; its time in flight counts from now."""
        call = self._calls.popleft()
        call.started = call.sent = now
        return call

    def __len__(self) -> int:
        return len(self._calls)

    def entries(self) -> int:
        """How many entries the calls recorded ahead carry."""
        return sum(len(call.run.entries) for call in self._calls)

    def __iter__(self) -> Iterator[Call[E]]:
        return iter(self._calls)
