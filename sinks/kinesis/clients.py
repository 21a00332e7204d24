"""Shared aiobotocore Kinesis clients: one per event loop and configuration, per process.

Spark reuses its Python worker processes, and a worker may run many partitions, each with
its own writer. Opening an HTTP client (connection pool, TLS sessions, credential
resolution) per writer would waste most of a short partition's time, so writers of one
process share a client for each distinct configuration: region, endpoint, credentials
(identified by a digest, never kept in a key) and timeouts.

An aiohttp-based client belongs to the event loop that created it and cannot be used or
closed from another. Clients are therefore kept per event loop:

- a writer running on a loop gets that loop's client (created on first use);
- when the loop ends through ``asyncio.run``, ``anyio.run`` or ``asyncio.Runner`` (which
  close asynchronous generators before closing the loop), its clients are closed there;
- ``await close_clients()`` closes the current loop's clients at once, e.g. before a
  hand-managed loop is closed; the next writer opens a new client;
- a client left on a loop that was closed without either is released the next time any
  loop asks for a client (its sockets are abandoned, not reused).

Clients are configured without botocore retries (``total_max_attempts=1``): the writer
retries failed requests itself, with backoff, a retry cap and an adaptive in-flight window
that must see each throttle, and it re-sends only the records that failed. Retries inside
botocore would hide throttling from that window and multiply the attempts and the time a
request can take beyond ``maxRetries`` and ``requestTimeoutMs``. botocore's client-side
parameter validation is off too: the writer builds every record within the PutRecords
limits already (key lengths, record and request sizes), and it costs a tenth of the CPU.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import threading
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

__all__ = ["ClientSettings", "close_clients", "get_client", "open_client_count"]

log = logging.getLogger("asyncsink.kinesis")

_LARGE_BODY = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What distinguishes one client from another. Credentials are excluded from ``repr``."""

    region: str | None
    endpoint_url: str | None
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_pool_connections: int = 16

    def key(self) -> tuple[Any, ...]:
        """The cache key: the settings with the credentials replaced by a digest."""
        identity = None
        if self.aws_access_key_id:
            secret = "\0".join(
                (self.aws_access_key_id, self.aws_secret_access_key or "",
                 self.aws_session_token or "")
            )  # fmt: skip
            identity = hashlib.sha256(secret.encode()).hexdigest()
        return (
            self.region,
            self.endpoint_url,
            identity,
            self.connect_timeout,
            self.read_timeout,
            self.max_pool_connections,
        )


class _LoopClients:
    """The clients of one event loop, and the generator that closes them with the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.session: AioSession = get_session()
        self.clients: dict[tuple[Any, ...], tuple[AsyncExitStack, Any]] = {}
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

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for stack, _ in clients:
            try:
                await stack.aclose()
            except Exception as exc:
                log.warning("closing a Kinesis client failed: %s: %s", type(exc).__name__, exc)

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


async def get_client(settings: ClientSettings) -> Any:
    """The running event loop's Kinesis client for ``settings``, created on first use.

    The client is shared: do not close it; ``close_clients`` does.

    Raises:
        RuntimeError: not running on an asyncio event loop (aiobotocore needs one).
        botocore.exceptions.NoRegionError: no region given and none configured.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("the Kinesis sink runs on an asyncio event loop") from None
    await _release_closed_loops()
    state = await _loop_clients(loop)
    key = settings.key()
    async with state.lock:
        found = state.clients.get(key)
        if found is not None:
            return found[1]
        stack = AsyncExitStack()
        client = await stack.enter_async_context(
            state.session.create_client(
                "kinesis",
                region_name=settings.region,
                endpoint_url=settings.endpoint_url,
                aws_access_key_id=settings.aws_access_key_id,
                aws_secret_access_key=settings.aws_secret_access_key,
                aws_session_token=settings.aws_session_token,
                config=AioConfig(
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=settings.connect_timeout,
                    read_timeout=settings.read_timeout,
                    max_pool_connections=settings.max_pool_connections,
                    user_agent_extra="asyncsink",
                    parameter_validation=False,
                ),
            )
        )
        client.meta.events.register("before-send.kinesis.PutRecords", _stream_large_body)
        state.clients[key] = (stack, client)
        log.debug("opened a Kinesis client: %r", settings)
        return client


async def close_clients() -> None:
    """Close the running event loop's Kinesis clients (no writer may be using them).

    Loops ended by ``asyncio.run``/``anyio.run`` close their clients themselves; call this
    before closing a loop you manage by hand, or to drop connections early.
    """
    loop = asyncio.get_running_loop()
    with _registry_lock:
        state = _loops.get(loop)
    if state is not None:
        await state.guard.aclose()


def open_client_count() -> int:
    """How many clients this process holds open, over all event loops."""
    with _registry_lock:
        return sum(len(state.clients) for state in _loops.values())


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
        log.warning(
            "releasing Kinesis clients of an event loop closed without close_clients(); "
            "their connections are dropped"
        )
        await state.abandon()


def _stream_large_body(request: Any, **_: Any) -> None:
    # aiohttp warns that a large bytes body may block the loop and asks for a stream.
    body = request.body
    if isinstance(body, bytes) and len(body) > _LARGE_BODY:
        request.body = io.BytesIO(body)
