"""Shared aiobotocore Kinesis clients: one per event loop and configuration, per process.

Spark reuses its Python worker processes, and a worker may run many partitions, each with
its own writer. Opening an HTTP client (connection pool, TLS sessions, credential
resolution) per writer would waste most of a short partition's time, so writers of one
process share a client for each distinct configuration: region, endpoint, credentials
(identified by a digest, never kept in a key) and timeouts.

The clients are those of every AWS sink (``asyncsink.sinks.aws.clients``: per event loop,
without botocore's retries and parameter validation); a Kinesis client also gets the
hooks that hand PutRecords its body (``asyncsink.sinks.kinesis.put_records``).
"""

from __future__ import annotations

from typing import Any

from ..aws import clients as aws_clients
from ..aws.clients import ClientSettings
from . import put_records

__all__ = ["ClientSettings", "close_clients", "get_client", "open_client_count"]

_SERVICE = "kinesis"


async def get_client(settings: ClientSettings) -> Any:
    """The running event loop's Kinesis client for ``settings``, created on first use.

    The client is shared: do not close it; ``close_clients`` does.

    Raises:
        RuntimeError: not running on an asyncio event loop (aiobotocore needs one).
        botocore.exceptions.NoRegionError: no region given and none configured.
    """
    return await aws_clients.get_client(_SERVICE, settings, put_records.install)


async def close_clients() -> None:
    """Close the running event loop's Kinesis clients (no writer may be using them).

    Loops ended by ``asyncio.run``/``anyio.run`` close their clients themselves; call this
    before closing a loop you manage by hand, or to drop connections early.
    """
    await aws_clients.close_clients(_SERVICE)


def open_client_count() -> int:
    """How many Kinesis clients this process holds open, over all event loops."""
    return aws_clients.open_client_count(_SERVICE)
