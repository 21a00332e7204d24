"""Clients kept per event loop: one per loop, kind and key, for the sinks' writers and the
record stores.

Spark reuses its Python worker processes, and asyncsink's runner keeps one event loop per
worker for all the partitions it runs, each with its own writer. Opening a client
(connection pool, TCP and TLS handshakes, credential resolution) per writer would waste
most of a short partition's time, so writers share a client for each distinct
configuration, named by a hashable key that holds everything that shapes the client and
never a secret (a credential is represented by a digest: ``secret_digest``).

A client built on aiohttp, httpx or anyio belongs to the event loop that created it and
cannot be used or closed from another. Clients are therefore kept per event loop:

- a writer running on a loop gets that loop's client for its key (created on first use);
- when the loop ends through ``asyncio.run``, ``anyio.run`` or ``asyncio.Runner`` (which
  close asynchronous generators before closing the loop), its clients are closed there;
- ``await close_clients()`` closes the current loop's clients at once (of one kind, or
  all), e.g. before a hand-managed loop is closed; the next writer opens a new client
  (``close_client`` closes one, as a store's ``aclose`` does);
- a client left on a loop that was closed without either is released the next time any
  loop asks for a client (its sockets are abandoned, not reused).

A shared client is never closed by a writer: its connections outlive the writer, so the
next partition's writer on the same loop reuses them. A record store keys its client by
the store itself, so each store has its own in each loop it runs in.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable
from contextlib import AsyncExitStack
from typing import Any

__all__ = [
    "close_client",
    "close_clients",
    "open_client_count",
    "secret_digest",
    "shared_client",
]

log = logging.getLogger("asyncsink.clients")

Opener = Callable[[AsyncExitStack], Awaitable[Any]]
"""Opens a client, entering what must be closed with it on the given stack."""

_Key = tuple[str, Hashable]


def secret_digest(*secrets: str | None) -> str | None:
    """A digest standing for ``secrets`` in a key (``None`` when none is given)."""
    if not any(secrets):
        return None
    joined = "\0".join(secret or "" for secret in secrets)
    return hashlib.sha256(joined.encode()).hexdigest()


class _LoopClients:
    """The clients of one event loop, and the generator that closes them with the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.clients: dict[_Key, tuple[AsyncExitStack, Any]] = {}
        self.lock = asyncio.Lock()
        self.abandoned = False
        self.guard: AsyncGenerator[None, None] = self._close_with_loop()

    async def _close_with_loop(self) -> AsyncGenerator[None, None]:
        # The loop's shutdown_asyncgens() closes this generator before the loop closes.
        try:
            yield
        finally:
            with _registry_lock:
                if _loops.get(self.loop) is self:
                    del _loops[self.loop]
            if not self.abandoned:
                await self.close()

    async def close(self, kind: str | None = None, key: Hashable = None) -> None:
        chosen = [
            found
            for found in self.clients
            if kind is None or (found[0] == kind and (key is None or found[1] == key))
        ]
        for found in chosen:
            stack, _ = self.clients.pop(found)
            try:
                await stack.aclose()
            except Exception as exc:
                name = type(exc).__name__
                log.warning("closing a %s client failed: %s: %s", found[0], name, exc)

    async def abandon(self) -> None:
        """Release the clients of a closed loop from another loop: their sessions are
        marked closed without running anything on the dead loop (aiohttp allows that)."""
        self.abandoned = True
        closing = self.guard.aclose()
        try:
            closing.send(None)
        except StopIteration:
            pass
        else:
            closing.close()
        await self.close()


_loops: dict[asyncio.AbstractEventLoop, _LoopClients] = {}
_registry_lock = threading.Lock()


async def shared_client(kind: str, key: Hashable, opener: Opener) -> Any:
    """The running event loop's ``kind`` client for ``key``, opened by ``opener`` on first
    use; what ``opener`` enters on its stack is exited when the client is closed.

    The client is shared: do not close it; the loop's end or ``close_clients`` does.

    Raises:
        RuntimeError: not running on an asyncio event loop.
        Exception: what ``opener`` raises (nothing is kept then).
    """
    loop = asyncio.get_running_loop()
    await _release_closed_loops()
    state = await _loop_clients(loop)
    async with state.lock:
        found = state.clients.get((kind, key))
        if found is not None:
            return found[1]
        stack = AsyncExitStack()
        try:
            client = await opener(stack)
        except BaseException:
            await stack.aclose()
            raise
        state.clients[(kind, key)] = (stack, client)
        return client


async def close_clients(kind: str | None = None) -> None:
    """Close the running event loop's clients of ``kind`` (all kinds if ``None``); no
    writer may be using them.

    Loops ended by ``asyncio.run``/``anyio.run`` close their clients themselves; call this
    before closing a loop you manage by hand, or to drop connections early.
    """
    loop = asyncio.get_running_loop()
    with _registry_lock:
        state = _loops.get(loop)
    if state is None:
        return
    if kind is None:
        await state.guard.aclose()
    else:
        async with state.lock:
            await state.close(kind)


async def close_client(kind: str, key: Hashable) -> None:
    """Close the running event loop's ``kind`` client for ``key``, if it has one."""
    loop = asyncio.get_running_loop()
    with _registry_lock:
        state = _loops.get(loop)
    if state is not None:
        async with state.lock:
            await state.close(kind, key)


def open_client_count(kind: str | None = None) -> int:
    """How many clients of ``kind`` (of any kind if ``None``) this process holds open,
    over all event loops."""
    with _registry_lock:
        return sum(
            1 for state in _loops.values() for key in state.clients if kind in (None, key[0])
        )


async def _loop_clients(loop: asyncio.AbstractEventLoop) -> _LoopClients:
    with _registry_lock:
        state = _loops.get(loop)
        if state is None:
            state = _loops[loop] = _LoopClients(loop)
            fresh = True
        else:
            fresh = False
    if fresh:
        await state.guard.asend(None)  # registers the generator with the loop
    return state


async def _release_closed_loops() -> None:
    with _registry_lock:
        dead = [state for loop, state in _loops.items() if loop.is_closed()]
        for state in dead:
            del _loops[state.loop]
    for state in dead:
        kinds = sorted({kind for kind, _ in state.clients})
        log.warning(
            "releasing the %s clients of an event loop closed without close_clients(); "
            "their connections are dropped",
            ", ".join(kinds) or "(no)",
        )
        await state.abandon()
