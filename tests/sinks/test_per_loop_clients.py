"""Clients shared per event loop (``asyncsink.clients.per_loop``) as the HTTP and
Elasticsearch writers use them: kept across writers of one loop with their connections,
closed with the loop or by ``close_clients()``, never mixed with a client or transport a
writer was given, and one per configuration."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import trustme

from asyncsink import SinkOptions
from asyncsink.clients import per_loop
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, ElasticsearchWriter
from asyncsink.sinks.http import HttpOptions, HttpWriter, close_clients
from asyncsink.sinks.web.aiohttp_transport import AiohttpTransport
from asyncsink.sinks.web.clients import ClientSettings
from asyncsink.sinks.web.httpx_transport import HttpxTransport

pytestmark = pytest.mark.anyio

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nSet-Cookie: session=s1\r\n\r\n"

_held_before: dict[str | None, int] = {}


@pytest.fixture(autouse=True)
def _clients_held_elsewhere() -> None:
    """Clients other loops of this process hold already (a Spark-style worker loop that
    an earlier test ran partitions on keeps its own): the counts below leave them out."""
    _held_before.clear()
    for kind in (None, "B"):
        _held_before[kind] = per_loop.open_client_count(kind)


def opened(kind: str | None = None) -> int:
    """Clients of ``kind`` opened since the test began, and still open."""
    return per_loop.open_client_count(kind) - _held_before[kind]


class CountingServer:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 that counts TCP connections and records
    each request's head."""

    def __init__(self) -> None:
        self.connections = 0
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/ingest"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.handlers:
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                self.heads.append(head)
                await reader.readexactly(_content_length(head))
                writer.write(ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    counting = CountingServer()
    await counting.start()
    try:
        yield counting
    finally:
        await close_clients()
        await counting.stop()


def http_writer(url: str, in_flight: int = 4, **http: Any) -> HttpWriter:
    sink = SinkOptions(max_batch_size=100, max_in_flight_requests=in_flight)
    return HttpWriter(HttpOptions(url=url, **http), options=sink)


async def write_one(writer: HttpWriter) -> AiohttpTransport:
    """Open ``writer``, deliver one row in one request, and return the transport it used."""
    async with writer:
        client = writer._web
        assert isinstance(client, AiohttpTransport)
        await writer.write_all([{"id": 1}])
    assert writer.statistics().delivered == 1
    return client


# ---------------------------------------------------------------------- one loop


async def test_writers_of_one_loop_share_a_client_and_its_kept_alive_connection(
    server: CountingServer,
) -> None:
    first = await write_one(http_writer(server.url, bearer_token="one"))
    assert first.is_open, "the writer leaves the shared client open"
    assert opened() == 1
    second = await write_one(http_writer(server.url, bearer_token="two"))
    assert second is first
    assert len(server.heads) == 2
    assert server.connections == 1, "the second writer reused the first one's connection"
    assert b"authorization: bearer two" in server.heads[1].lower()


async def test_a_shared_client_carries_no_cookie_from_one_writer_to_the_next(
    server: CountingServer,
) -> None:
    await write_one(http_writer(server.url))
    await write_one(http_writer(server.url))
    assert all(b"cookie:" not in head.lower() for head in server.heads)


async def test_close_clients_closes_the_loop_s_clients_and_the_next_writer_opens_one(
    server: CountingServer,
) -> None:
    first = await write_one(http_writer(server.url))
    await close_clients()
    assert not first.is_open
    assert opened() == 0
    second = await write_one(http_writer(server.url))
    assert second is not first
    assert server.connections == 2


async def test_a_writer_after_close_has_no_client() -> None:
    writer = http_writer("http://127.0.0.1:9/ingest")
    async with writer:
        pass
    assert writer._web is None
    await close_clients()


async def test_elasticsearch_writers_share_the_loop_s_client_too() -> None:
    def es_writer() -> ElasticsearchWriter:
        return ElasticsearchWriter(
            ElasticsearchOptions(hosts="http://127.0.0.1:9", index="i", refresh=False)
        )

    first, second = es_writer(), es_writer()
    async with first:
        client = first._web
    async with second:
        assert second._web is client
    assert isinstance(client, AiohttpTransport) and opened() == 1
    await close_clients()
    assert opened() == 0


# ---------------------------------------------------------------------- given clients


async def test_a_given_transport_makes_a_client_of_the_writer_s_own_closed_at_exit() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    writer = HttpWriter(HttpOptions(url="http://sink.test/"), transport=transport)
    async with writer:
        own = writer._web
        assert isinstance(own, HttpxTransport)
        await writer.write_all([{"id": 1}])
        assert opened() == 0, "not in the cache"
    assert own.client.is_closed
    with_transport = HttpWriter(HttpOptions(url="http://sink.test/"), transport=transport)
    async with with_transport:
        assert with_transport._web is not own


async def test_a_given_client_is_neither_shared_nor_closed() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    async with httpx.AsyncClient(transport=transport) as given:
        writer = HttpWriter(HttpOptions(url="http://sink.test/"), client=given)
        async with writer:
            await writer.write_all([{"id": 1}])
            assert opened() == 0
        assert writer._given is not None and writer._web is None
        assert not given.is_closed
        other = http_writer("http://sink.test/")
        async with other:
            assert isinstance(other._web, AiohttpTransport)
        await close_clients()
        assert not given.is_closed


# ---------------------------------------------------------------------- keys


async def test_what_shapes_a_client_keys_it_and_what_does_not_shares_it(tmp_path: Any) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text(_a_ca_certificate())
    url = "https://sink.test/ingest"
    settings: list[dict[str, Any]] = [
        {},
        {"tls_verify": False},
        {"ca_bundle": str(bundle)},
        {"in_flight": 8},
        {"url": "https://other.test/ingest"},
    ]
    clients = []
    for extra in settings:
        writer = http_writer(**{"url": url, **extra})
        async with writer:
            clients.append(writer._web)
    assert len({id(client) for client in clients}) == len(settings)
    same = [
        http_writer("https://sink.test/other/path", bearer_token="t"),
        http_writer("https://u:p%40ss@sink.test/ingest", connect_timeout_ms=50),
    ]
    for writer in same:
        async with writer:
            assert writer._web is clients[0]
    assert opened() == len(settings)
    await close_clients()


def test_a_key_holds_origins_never_credentials_nor_paths() -> None:
    settings = ClientSettings.for_urls(
        ["https://user:s3cret@Sink.test:8443/path?token=t0ken", "http://sink.test/a", ""],
        tls_verify=True,
        ca_bundle=None,
        connections=4,
    )
    assert settings.origins == ("http://sink.test:", "https://sink.test:8443")
    assert "s3cret" not in repr(settings) and "t0ken" not in repr(settings)


def test_a_secret_digest_stands_for_secrets() -> None:
    digest = per_loop.secret_digest("id", "s3cret")
    assert digest is not None and "s3cret" not in digest
    assert digest != per_loop.secret_digest("id", "other")
    assert per_loop.secret_digest(None, None) is None


# ---------------------------------------------------------------------- loops


def test_each_loop_gets_its_own_client_closed_with_its_connections_when_it_ends() -> None:
    async def deliver() -> AiohttpTransport:
        server = CountingServer()
        await server.start()
        try:
            client = await write_one(http_writer(server.url))
            assert server.connections == 1
            return client
        finally:
            await server.stop()

    first = asyncio.run(deliver())
    assert not first.is_open, "asyncio.run closed the loop's client"
    assert opened() == 0
    second = asyncio.run(deliver())
    assert second is not first and not second.is_open
    gc.collect()  # an unclosed session or socket would warn now (warnings are errors)


def test_clients_of_a_loop_closed_by_hand_are_released_by_the_next_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def deliver() -> AiohttpTransport:
        server = CountingServer()
        await server.start()
        client = await write_one(http_writer(server.url))
        await server.stop()
        return client

    loop = asyncio.new_event_loop()
    stale = loop.run_until_complete(deliver())
    loop.close()
    assert opened() == 1
    with caplog.at_level(logging.WARNING, logger="asyncsink"):
        fresh = asyncio.run(deliver())
    assert fresh is not stale
    assert not stale.is_open
    assert opened() == 0
    assert "HTTP clients of an event loop closed without close_clients()" in caplog.text
    gc.collect()


# ---------------------------------------------------------------------- the cache itself


async def test_close_clients_of_one_kind_leaves_the_other_kinds_open() -> None:
    closed: list[str] = []

    def opener(name: str) -> Any:
        async def open_(stack: AsyncExitStack) -> str:
            stack.callback(closed.append, name)
            return name

        return open_

    assert await per_loop.shared_client("A", 1, opener("a")) == "a"
    assert await per_loop.shared_client("A", 1, opener("again")) == "a", "cached"
    assert await per_loop.shared_client("B", 1, opener("b")) == "b"
    await per_loop.close_clients("A")
    assert closed == ["a"]
    assert opened("B") == 1
    await per_loop.close_clients()
    assert closed == ["a", "b"]
    assert opened() == 0


async def test_a_failing_opener_keeps_nothing_and_closes_what_it_entered() -> None:
    closed: list[bool] = []

    async def failing(stack: AsyncExitStack) -> Any:
        stack.callback(closed.append, True)
        raise OSError("no")

    with pytest.raises(OSError):
        await per_loop.shared_client("A", 1, failing)
    assert closed == [True]
    assert opened() == 0
    await per_loop.close_clients()


def _a_ca_certificate() -> str:
    return trustme.CA().cert_pem.bytes().decode()
