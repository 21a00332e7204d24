"""The writer's concurrency: asyncio's tasks, events, timers and timeouts, and nothing else.

A writer runs on an asyncio event loop: Spark's Python workers run ``asyncio.run``, users
call writers from asyncio code, and ``anyio.run`` runs asyncio by default. So it uses
asyncio alone: its requests run in plain tasks (``Tasks``), a request's deadline is
``asyncio.timeout``, its waits are asyncio events (``Progress``, ``Timer``).

Why not anyio throughout: measured here (a request that only yields, 40,000 of them,
16 at a time, CPU time per request), a task started in an anyio task group under an
anyio cancel scope costs about 30 µs, a plain asyncio task under an anyio scope 17 µs,
and under ``asyncio.timeout`` 12 µs: at 500 entries a request, the difference is a tenth
of the writer's whole cost per entry. And anyio's cancellation is level-triggered: it is
delivered again at every ``await`` until its scope exits, so the clean-up of a cancelled
request (aiohttp's and aiobotocore's, which know nothing of anyio shields) could not
await anything. asyncio cancels a task once, and its clean-up runs to the end. The cost:
an anyio shield inside a sink does not hold off the writer's timeout (nothing shields
from asyncio's cancellation); a sink that must finish a request it was told to give up
catches the ``CancelledError`` and carries on, and its late answer is still taken.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ..errors import FatalError

__all__ = ["Progress", "Tasks", "Timer", "finish"]

log = logging.getLogger("asyncsink")


class Tasks:
    """The asyncio tasks of one writer: started with ``spawn``, cancelled and awaited
    together with ``close``.

    A task's work handles what it can raise; what escapes it anyway (``KeyboardInterrupt``
    and ``SystemExit``) goes to ``fail``, and so does a task cancelled while the writer is
    open (``is_open``), which was cancelled by the sink or a library it uses: only
    ``close`` cancels these tasks, and a request cancelled otherwise never settles.
    """

    def __init__(self, fail: Callable[[BaseException], None], is_open: Callable[[], bool]) -> None:
        self._fail = fail
        self._is_open = is_open
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        """Take the running loop: tasks may be spawned from now on."""
        self._loop = asyncio.get_running_loop()

    def spawn(self, work: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        assert self._loop is not None
        task = self._loop.create_task(work(*args))
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            if self._is_open():
                self._fail(
                    FatalError(
                        "a request's task was cancelled, not by the writer (by the sink, "
                        "or a library it uses): its request cannot settle"
                    )
                )
            return
        error = task.exception()
        if error is None:
            return
        if self._is_open():
            self._fail(error)
        else:
            log.error("a request ended the closed writer with %r", error)

    async def close(self) -> asyncio.CancelledError | None:
        """Cancel every task and wait until each has ended (see ``finish``)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return await finish(asyncio.wait(tasks)) if tasks else None


async def finish(
    work: Coroutine[Any, Any, Any], seconds: float | None = None
) -> asyncio.CancelledError | None:
    """Run ``work`` to its end (or for ``seconds``), even when the caller is cancelled
    meanwhile (by asyncio, or by an anyio scope, which cancels again and again).
    Returns that cancellation, for the caller to raise once its clean-up is done."""
    task = asyncio.ensure_future(work)
    deadline = None if seconds is None else time.monotonic() + seconds
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            task.cancel()
            left = None
        try:
            await asyncio.wait([task], timeout=left)
        except asyncio.CancelledError as exc:
            cancelled = exc
    if not task.cancelled():
        task.exception()  # retrieved: the work reports its own errors
    return cancelled


class Progress:
    """Where the writer's callers wait for something to change (a request ended, room
    in the buffer, a failure): ``signal`` wakes all of them."""

    __slots__ = ("_event", "_waiting")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiting = 0

    async def wait(self) -> None:
        self._waiting += 1
        try:
            await self._event.wait()
        finally:
            self._waiting -= 1

    def signal(self) -> None:
        if self._waiting:
            self._event.set()
            self._event = asyncio.Event()


class Timer:
    """Calls ``fire`` at the deadline ``deadline()`` gives (``None``: none), and again
    whenever woken (``wake``) or the deadline is up. ``deadline`` also says whether it is
    blocked: no request may start, so only a request ending (``wake_if_blocked``)
    changes anything."""

    def __init__(
        self, deadline: Callable[[], tuple[float | None, bool]], fire: Callable[[], object]
    ) -> None:
        self._deadline = deadline
        self._fire = fire
        self._wake = asyncio.Event()
        self._blocked = False

    def wake(self) -> None:
        self._wake.set()

    def wake_if_blocked(self) -> None:
        if self._blocked:
            self._wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake = wake = asyncio.Event()
            deadline, self._blocked = self._deadline()
            if deadline is None:
                await wake.wait()
                self._fire()
                continue
            handle = loop.call_later(max(0.0, deadline - time.monotonic()), wake.set)
            try:
                await wake.wait()
            finally:
                handle.cancel()
            self._fire()
