"""Pooled connections idle past ``IDLE_CONNECTION_S`` are not reused.

Behind ``IdleResettingProxy``, the endpoint (and kinesalite) acts as a server whose
keep-alive timeout fires late: a request on a connection idle for ``SERVER_IDLE_S`` is
reset. A writer that pauses longer than that between two writes must open new connections
rather than lose a request to the reset and send it again after a backoff. The second test
of each pair proves the proxy bites: with connections kept for a minute, the first request
after the pause is reset, and the retry still delivers every row once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from asyncsink.clients import connections
from asyncsink.sinks.http import create_writer as http_writer
from asyncsink.sinks.kinesis import create_writer as kinesis_writer
from asyncsink.testing import FaultServer
from tests.servers.idle_proxy import IdleResettingProxy
from tests.sinks.test_kinesis import KEY_ID, REGION, SECRET, read_stream
from tests.sinks.test_kinesis import admin as admin  # noqa: F401 - a fixture
from tests.sinks.test_kinesis import new_stream as new_stream  # noqa: F401 - a fixture

pytestmark = pytest.mark.anyio

SERVER_IDLE_S = 0.5
RETRY_FAST = {"initialBackoffMs": "1", "maxBackoffMs": "10", "maxBatchSize": "50"}


def rows(count: int) -> list[dict[str, Any]]:
    return [{"id": f"row-{i}", "v": i} for i in range(count)]


async def write_with_a_pause(writer: Any, data: list[dict[str, Any]]) -> Any:
    """Half the rows, a pause longer than the server keeps idle connections, the rest."""
    half = len(data) // 2
    with anyio.fail_after(30):
        async with writer:
            await writer.write_all(data[:half])
            await writer.flush()
            await anyio.sleep(SERVER_IDLE_S + 0.3)
            await writer.write_all(data[half:])
    return writer.statistics()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


async def deliver_http(endpoint: FaultServer) -> tuple[Any, int]:
    endpoint.reset()
    ingest = urlsplit(endpoint.ingest_url)
    assert ingest.port is not None
    data = rows(400)
    with IdleResettingProxy(ingest.port, SERVER_IDLE_S) as proxy:
        writer = http_writer({"url": proxy.url(ingest.path), **RETRY_FAST})
        stats = await write_with_a_pause(writer, data)
    assert sorted(endpoint.applied_ids()) == sorted(row["id"] for row in data)
    assert endpoint.stats().duplicates == 0
    return stats, proxy.resets


async def test_http_connections_idle_past_the_limit_are_replaced_not_reused(
    endpoint: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "IDLE_CONNECTION_S", SERVER_IDLE_S / 2)
    stats, resets = await deliver_http(endpoint)
    assert resets == 0
    assert (stats.delivered, stats.retried, stats.requests_failed) == (400, 0, 0)


async def test_http_a_connection_reused_after_the_server_timeout_is_reset_and_sent_again(
    endpoint: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "IDLE_CONNECTION_S", 60.0)
    stats, resets = await deliver_http(endpoint)
    assert resets >= 1
    assert stats.delivered == 400 and stats.retried >= 50 and stats.requests_failed >= 1


async def deliver_kinesis(admin: Any, new_stream: Any, kinesalite: str) -> tuple[Any, int]:
    name = await new_stream(1)
    data = rows(400)
    port = urlsplit(kinesalite).port
    assert port is not None
    with IdleResettingProxy(port, SERVER_IDLE_S) as proxy:
        writer = kinesis_writer(
            {
                "streamName": name,
                "partitionKeyField": "id",
                "endpointUrl": proxy.url().rstrip("/"),
                "region": REGION,
                "awsAccessKeyId": KEY_ID,
                "awsSecretAccessKey": SECRET,
                **RETRY_FAST,
            }
        )
        stats = await write_with_a_pause(writer, data)
    found = await read_stream(admin, name)
    assert Counter(key for _, key, _ in found) == Counter(row["id"] for row in data)
    return stats, proxy.resets


@pytest.mark.emulator
async def test_kinesis_connections_idle_past_the_limit_are_replaced_not_reused(
    admin: Any,  # noqa: F811 - the fixture imported above
    new_stream: Any,  # noqa: F811
    kinesalite_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "IDLE_CONNECTION_S", SERVER_IDLE_S / 2)
    stats, resets = await deliver_kinesis(admin, new_stream, kinesalite_endpoint)
    assert resets == 0
    assert (stats.delivered, stats.retried, stats.requests_failed) == (400, 0, 0)


@pytest.mark.emulator
async def test_kinesis_a_connection_reused_after_the_server_timeout_is_reset_and_sent_again(
    admin: Any,  # noqa: F811
    new_stream: Any,  # noqa: F811
    kinesalite_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "IDLE_CONNECTION_S", 60.0)
    stats, resets = await deliver_kinesis(admin, new_stream, kinesalite_endpoint)
    assert resets >= 1
    assert stats.delivered == 400 and stats.retried >= 50 and stats.requests_failed >= 1


def test_the_limit_is_under_the_common_server_keep_alive_timeout() -> None:
    # Node.js, uvicorn and Apache httpd close idle connections after 5 s by default.
    assert 0 < connections.IDLE_CONNECTION_S < 5.0
