"""``AiohttpTransport`` against real sockets on 127.0.0.1: what goes out and comes back,
each kind of failure as its httpx error, the pool's bound, TLS verification and proxies."""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import orjson
import pytest
import trustme

from asyncsink.errors import FatalError, RetryableError
from asyncsink.sinks.http import create_writer
from asyncsink.sinks.web.aiohttp_transport import AiohttpTransport
from asyncsink.sinks.web.classify import error_for_transport
from asyncsink.sinks.web.redact import Redactor
from asyncsink.sinks.web.transport import Answer, Request, Timeout
from tests.core.test_connections import closed_port

pytestmark = pytest.mark.anyio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serve(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A raw TCP server on 127.0.0.1 running ``handler`` per connection; yields its URL.
    Every connection is closed when the handler returns, and all of them on the way out."""
    writers: list[asyncio.StreamWriter] = []

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(run, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    line, *lines = head.split("\r\n")
    headers = {k.lower(): v for k, _, v in (x.partition(": ") for x in lines if x)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return line, headers, body


def answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@asynccontextmanager
async def client(connections: int = 4) -> AsyncIterator[AiohttpTransport]:
    transport = AiohttpTransport(connections=connections, verify=False)
    try:
        yield transport
    finally:
        await transport.aclose()


async def send(
    transport: AiohttpTransport,
    url: str,
    content: bytes = b"x",
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    read: float = 5.0,
) -> Answer:
    request = Request(method, url, headers or {}, content, Timeout(connect=5.0, read=read))
    return await transport.handle_async_request(request)


async def test_requests_and_answers_pass_through_unchanged() -> None:
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        body = gzip.compress(b'{"ok": true}')
        writer.write(answer("207 Multi-Status", body, "Content-Encoding: gzip", "X-Id: 7"))
        await writer.drain()
        writer.close()

    async with serve(handler) as url, client() as http:
        response = await send(
            http,
            f"{url}/in/x?a=1&b=%2F",
            b"[1,2]",
            method="PUT",
            headers={"idempotency-key": "k-1"},
        )
    line, headers, body = seen[0]
    assert line == "PUT /in/x?a=1&b=%2F HTTP/1.1"
    assert headers["idempotency-key"] == "k-1" and body == b"[1,2]"
    assert headers["content-length"] == "5"
    assert response.status == 207 and response.reason == "Multi-Status"
    assert response.headers.get("x-id") == "7"
    assert orjson.loads(response.content) == {"ok": True}  # the gzip body decoded
    assert response.response().http_version == "HTTP/1.1"


async def test_a_closed_port_is_a_connect_error_that_is_retried() -> None:
    async with serve(lambda r, w: asyncio.sleep(0)) as url:
        pass  # the port is free again
    async with client() as http:
        with pytest.raises(httpx.ConnectError) as caught:
            await send(http, url)
    assert isinstance(error_for_transport(caught.value, None, Redactor(())), RetryableError)


async def test_a_connection_closed_without_an_answer_is_a_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.close()

    async with serve(handler) as url, client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await send(http, url)


async def test_a_body_cut_short_fails_while_reading_it() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"items": [')
        await writer.drain()
        writer.close()

    async with serve(handler) as url, client() as http:
        with pytest.raises(httpx.TransportError):
            await send(http, url)


async def test_a_silent_server_is_a_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the client gives up and closes

    async with serve(handler) as url, client() as http:
        with anyio.fail_after(5), pytest.raises(httpx.ReadTimeout):
            await send(http, url, read=0.2)


async def test_the_pool_never_opens_more_than_its_connections() -> None:
    open_now = peak = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak
        open_now += 1
        peak = max(peak, open_now)
        try:
            while True:
                try:
                    await read_request(reader)
                except asyncio.IncompleteReadError:
                    return
                await asyncio.sleep(0.02)
                writer.write(answer("200 OK", b"{}"))
                await writer.drain()
        finally:
            open_now -= 1
            writer.close()

    async def post(http: AiohttpTransport, url: str) -> None:
        assert (await send(http, url)).status == 200

    async with serve(handler) as url, client(connections=2) as http:
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(post, http, url)
    assert peak == 2


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(answer("200 OK", b"{}", "Connection: close"))
    await writer.drain()
    writer.close()


async def test_tls_is_verified_against_the_ca_bundle(ca: trustme.CA, tmp_path: Any) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    async with serve(ok, server_tls(ca)) as url:
        writer = create_writer({"url": url, "caBundle": str(bundle), "maxRetries": "0"})
        with anyio.fail_after(10):
            async with writer:
                await writer.write({"id": 1})
        assert writer.statistics().delivered == 1


async def test_an_unknown_certificate_authority_is_fatal(ca: trustme.CA) -> None:
    async with serve(ok, server_tls(ca)) as url:
        writer = create_writer({"url": url, "maxRetries": "3"})
        with anyio.fail_after(10), pytest.raises(FatalError, match="caBundle"):
            async with writer:
                await writer.write({"id": 1})
    assert writer.statistics().requests == 1  # not retried


async def test_tls_verify_false_accepts_any_certificate(ca: trustme.CA) -> None:
    async with serve(ok, server_tls(ca)) as url:
        writer = create_writer({"url": url, "tlsVerify": "false"})
        with anyio.fail_after(10):
            async with writer:
                await writer.write({"id": 1})
    assert writer.statistics().delivered == 1


@pytest.fixture
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


async def test_requests_go_through_the_proxy_the_environment_names(
    clean_proxy_env: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, _, body = await read_request(reader)
        lines.append(f"{line} {body.decode()}")
        writer.write(answer("200 OK", b"{}", "Connection: close"))
        await writer.drain()

    async with serve(proxy) as proxy_url:
        clean_proxy_env.setenv("HTTP_PROXY", proxy_url.removeprefix("http://"))
        async with client() as http:
            response = await send(http, "http://127.0.0.1:9/ingest", b"[1]")
    assert response.status == 200
    assert lines == ["POST http://127.0.0.1:9/ingest HTTP/1.1 [1]"]  # absolute form


async def test_a_refusing_proxy_is_named_in_the_error_masked(
    clean_proxy_env: pytest.MonkeyPatch,
) -> None:
    port = closed_port()
    clean_proxy_env.setenv("HTTP_PROXY", f"http://user:Zq7secret@127.0.0.1:{port}")
    writer = create_writer({"url": "http://127.0.0.1:9/ingest", "maxRetries": "0"})
    with pytest.raises(FatalError) as caught:
        async with writer:
            await writer.write({"id": 1})
    text = str(caught.value)
    assert f"(through the proxy http://***@127.0.0.1:{port}) refused the connection" in text
    assert "Zq7secret" not in text
    clean_proxy_env.setenv("NO_PROXY", "127.0.0.1")  # bypassed: the URL alone
    assert writer.describe_destination() == "http://127.0.0.1:9/ingest"


async def test_no_proxy_hosts_are_reached_directly(clean_proxy_env: pytest.MonkeyPatch) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise AssertionError("the proxy was used")

    async with serve(refuse) as proxy_url, serve(ok) as url:
        clean_proxy_env.setenv("HTTP_PROXY", proxy_url)
        clean_proxy_env.setenv("NO_PROXY", "localhost,127.0.0.1")
        async with client() as http:
            assert (await send(http, url)).status == 200
