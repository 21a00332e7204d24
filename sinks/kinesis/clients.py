"""Shared aiobotocore Kinesis clients: one per event loop and configuration, per process.

Spark reuses its Python worker processes, and a worker may run many partitions, each with
its own writer. Opening an HTTP client (connection pool, TLS sessions, credential
resolution) per writer would waste most of a short partition's time, so writers of one
process share a client for each distinct configuration: region, endpoint, credentials
(identified by a digest, never kept in a key) and timeouts.

An aiohttp-based client belongs to the event loop that created it and cannot be used or
closed from another. Clients are therefore kept per event loop (see
``asyncsink.clients.per_loop``):

- a writer running on a loop gets that loop's client (created on first use);
- when the loop ends through ``asyncio.run``, ``anyio.run`` or ``asyncio.Runner`` (which
  close asynchronous generators before closing the loop), its clients are closed there;
- ``await close_clients()`` closes the current loop's Kinesis clients at once, e.g. before
  a hand-managed loop is closed; the next writer opens a new client;
- a client left on a loop that was closed without either is released the next time any
  loop asks for a client (its sockets are abandoned, not reused).

Clients are configured without botocore retries (``total_max_attempts=1``): the writer
retries failed requests itself, with backoff, a retry cap and an adaptive in-flight window
that must see each throttle, and it re-sends only the records that failed. Retries inside
botocore would hide throttling from that window and multiply the attempts and the time a
request can take beyond ``maxRetries`` and ``requestTimeoutMs``. botocore's client-side
parameter validation is off too: the writer builds every record within the PutRecords
limits already (key lengths, record and request sizes), and it costs a tenth of the CPU.
A pooled connection idle for longer than ``asyncsink.clients.connections.IDLE_CONNECTION_S`` is not
reused: no request goes out on a connection the server may be closing (kinesalite closes
idle ones after 5 s).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

from asyncsink.aws.credentials import AwsIdentity
from asyncsink.aws.sessions import client_credentials
from asyncsink.clients import connections, per_loop

from . import put_records

__all__ = ["ClientSettings", "close_clients", "get_client", "open_client_count"]

log = logging.getLogger("asyncsink.kinesis")

_KIND = "Kinesis"


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
    identity: AwsIdentity | None = None
    """An assumed role (its credentials come from the process's shared source)."""

    def key(self) -> tuple[Any, ...]:
        """The cache key: the settings with the credentials replaced by a digest."""
        identity = None
        if self.aws_access_key_id:
            identity = per_loop.secret_digest(
                self.aws_access_key_id, self.aws_secret_access_key, self.aws_session_token
            )
        return (
            self.region,
            self.endpoint_url,
            identity,
            self.connect_timeout,
            self.read_timeout,
            self.max_pool_connections,
            self.identity,
        )


async def get_client(settings: ClientSettings) -> Any:
    """The running event loop's Kinesis client for ``settings``, created on first use.

    The client is shared: do not close it; ``close_clients`` does.

    Raises:
        RuntimeError: not running on an asyncio event loop (aiobotocore needs one).
        botocore.exceptions.NoRegionError: no region given and none configured.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("the Kinesis sink runs on an asyncio event loop") from None
    opener = functools.partial(_open_client, settings)
    return await per_loop.shared_client(_KIND, settings.key(), opener)


async def close_clients() -> None:
    """Close the running event loop's Kinesis clients (no writer may be using them).

    Loops ended by ``asyncio.run``/``anyio.run`` close their clients themselves; call this
    before closing a loop you manage by hand, or to drop connections early.
    """
    await per_loop.close_clients(_KIND)


def open_client_count() -> int:
    """How many Kinesis clients this process holds open, over all event loops."""
    return per_loop.open_client_count(_KIND)


async def _open_client(settings: ClientSettings, stack: AsyncExitStack) -> Any:
    # A session of its own: a session caches credentials whose refresh lock binds to a loop.
    session: AioSession = get_session()
    keys: dict[str, str | None] = {
        "aws_access_key_id": settings.aws_access_key_id,
        "aws_secret_access_key": settings.aws_secret_access_key,
        "aws_session_token": settings.aws_session_token,
    }
    if settings.identity is not None:  # an assumed role, refreshed by the shared source
        keys = client_credentials(session, settings.identity)
    client = await stack.enter_async_context(
        session.create_client(
            "kinesis",
            region_name=settings.region,
            endpoint_url=settings.endpoint_url,
            **keys,
            config=AioConfig(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=settings.connect_timeout,
                read_timeout=settings.read_timeout,
                max_pool_connections=settings.max_pool_connections,
                connector_args={"keepalive_timeout": connections.IDLE_CONNECTION_S},
                user_agent_extra="asyncsink",
                parameter_validation=False,
            ),
        )
    )
    put_records.install(client)
    log.debug("opened a Kinesis client: %r", settings)
    return client
