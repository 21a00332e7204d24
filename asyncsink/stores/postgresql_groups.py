"""Group commit for a ``PostgreSQLStore``: the puts of a process's writers, written together.

A call log writes one put at a time, and an executor's process can run several writers
at once (one per Spark task). Each put alone is a round trip, a statement and a commit,
and at tens of writers the server spends its time committing. ``PutGroups`` queues the
puts made while a group is being written; once it is written, the next group carries
every put that waited meanwhile: one statement, one transaction, one commit. A lone put
is written at once, so nothing waits for a timer.

Each put keeps the guarantees of ``RecordStore.put``:

- it is applied whole, and only while its scope holds the caller's epoch: a fenced put
  raises ``FencedError`` for its own writer, and the others of its group commit;
- it returns once committed; a failure of the shared round trip (a lost connection, a
  server error) fails every put of the group, none of which is then known as written;
- a writer cancelled while its put waits for a group stops waiting, and its put is not
  written; cancelled while its group is being written, the group goes on, so the put is
  committed whole or not at all, as a single put cancelled mid-statement is;
- two puts of one scope never share a group: the later one goes in the next, in order.

A group locks the rows of its scopes. Two groups in two processes that share two scopes
(two attempts of each scope running at once, a zombie and its retry) can wait for each
other; PostgreSQL then fails one of them, whose writers fail as in a failed round trip,
and Spark retries their tasks.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from asyncsink.stores.base import Scope

__all__ = ["GroupPut", "GroupWriter", "LoopGroups", "PutGroups"]

MAX_GROUP = 64  # puts in one statement: its arrays stay small, its transaction short


@dataclass(slots=True)
class GroupPut:
    """One put waiting for its group: what ``RecordStore.put`` was given, checked."""

    scope: Scope
    epoch: int
    puts: dict[str, bytes]
    deletes: list[str]
    done: asyncio.Future[None] = field(repr=False)


# Writes a group in one transaction; returns what failed, by position in the group (a
# ``FencedError`` for a fenced put). Raises when the group as a whole failed.
GroupWriter = Callable[[Sequence[GroupPut]], Awaitable[dict[int, BaseException]]]


class PutGroups:
    """The puts of one store in one event loop, grouped (see the module docstring).

    Args:
        write: writes one group in one transaction.
    """

    def __init__(self, write: GroupWriter) -> None:
        self._write = write
        self._waiting: list[GroupPut] = []
        self._writing: asyncio.Task[None] | None = None

    async def put(
        self, scope: Scope, epoch: int, puts: dict[str, bytes], deletes: list[str]
    ) -> None:
        """Write the put with the next group; return once it is committed.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
            DurableError: the group's round trip failed.
        """
        loop = asyncio.get_running_loop()
        waiting = GroupPut(scope, epoch, puts, deletes, loop.create_future())
        self._waiting.append(waiting)
        if self._writing is None:
            self._writing = loop.create_task(self._drain())
        await waiting.done  # cancelling this wait cancels the future: see _next_group

    async def _drain(self) -> None:
        try:
            while group := self._next_group():
                await self._commit(group)
        finally:
            self._writing = None
            for put in self._waiting:  # the loop is closing: nobody writes them now
                put.done.cancel()
            self._waiting.clear()

    def _next_group(self) -> list[GroupPut]:
        """Take the next group: waiting puts in order, one per scope, whose writers still
        wait; the rest wait for the group after."""
        group: list[GroupPut] = []
        scopes: set[Scope] = set()
        later: list[GroupPut] = []
        for put in self._waiting:
            if put.done.done():
                continue  # its writer stopped waiting before it was written
            if put.scope in scopes or len(group) == MAX_GROUP:
                later.append(put)
            else:
                scopes.add(put.scope)
                group.append(put)
        self._waiting = later
        return group

    async def _commit(self, group: list[GroupPut]) -> None:
        try:
            failed = await self._write(group)
        except asyncio.CancelledError:
            for put in group:
                put.done.cancel()
            raise
        except Exception as exc:
            for put in group:
                if not put.done.done():
                    put.done.set_exception(exc)
            return
        for index, put in enumerate(group):
            if put.done.done():
                continue  # cancelled while the group was written
            if index in failed:
                put.done.set_exception(failed[index])
            else:
                put.done.set_result(None)


class LoopGroups:
    """A ``PutGroups`` per event loop: futures belong to the loop that made them."""

    def __init__(self, write: GroupWriter) -> None:
        self._write = write
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PutGroups] = (
            weakref.WeakKeyDictionary()
        )

    def running(self) -> PutGroups:
        """The running loop's groups."""
        loop = asyncio.get_running_loop()
        groups = self._by_loop.get(loop)
        if groups is None:
            groups = self._by_loop[loop] = PutGroups(self._write)
        return groups
