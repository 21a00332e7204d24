"""Shared aiobotocore clients of the AWS sinks: one per event loop, service and
configuration, per process (see ``asyncsink.clients.per_loop`` for the life of a client).

Clients are configured without botocore retries (``total_max_attempts=1``): the writer
retries failed requests itself, with backoff, a retry cap and an adaptive in-flight window
that must see each throttle, and it re-sends only the entries that failed. Retries inside
botocore would hide throttling from that window and multiply the attempts and the time a
request can take beyond ``maxRetries`` and ``requestTimeoutMs``. botocore's client-side
parameter validation is off too: each sink builds its requests within the service's limits
already, and validation costs a tenth of the CPU. A pooled connection idle for longer than
``asyncsink.clients.connections.IDLE_CONNECTION_S`` is not reused: no request goes out on a
connection the server may be closing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

from asyncsink.aws.credentials import AwsIdentity
from asyncsink.aws.sessions import client_credentials
from asyncsink.clients import connections, per_loop

__all__ = ["ClientSettings", "close_clients", "get_client", "open_client_count"]

log = logging.getLogger("asyncsink.aws")


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


async def get_client(
    service: str, settings: ClientSettings, prepare: Callable[[Any], None] | None = None
) -> Any:
    """The running event loop's client of ``service`` (botocore's name: ``"sqs"``...) for
    ``settings``, created on first use; ``prepare`` is called once on a new client.

    The client is shared: do not close it; ``close_clients`` does.

    Raises:
        RuntimeError: not running on an asyncio event loop (aiobotocore needs one).
        botocore.exceptions.NoRegionError: no region given and none configured.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(f"the {service} sink runs on an asyncio event loop") from None
    opener = functools.partial(_open_client, service, settings, prepare)
    return await per_loop.shared_client(_kind(service), settings.key(), opener)


async def close_clients(service: str) -> None:
    """Close the running event loop's clients of ``service`` (no writer may be using them).

    Loops ended by ``asyncio.run``/``anyio.run`` close their clients themselves; call this
    before closing a loop you manage by hand, or to drop connections early.
    """
    await per_loop.close_clients(_kind(service))


def open_client_count(service: str) -> int:
    """How many clients of ``service`` this process holds open, over all event loops."""
    return per_loop.open_client_count(_kind(service))


def _kind(service: str) -> str:
    return "Kinesis" if service == "kinesis" else service


async def _open_client(
    service: str,
    settings: ClientSettings,
    prepare: Callable[[Any], None] | None,
    stack: AsyncExitStack,
) -> Any:
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
            service,
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
    if prepare is not None:
        prepare(client)
    log.debug("opened a %s client: %r", service, settings)
    return client
