"""A small HTTP/1.1 server on asyncio streams, the transport of the Elasticsearch test endpoint.

It speaks just enough HTTP/1.1 for real clients (httpx, aiohttp, urllib3): keep-alive,
requests one after another on a connection, ``Content-Length`` and chunked request bodies,
``Expect: 100-continue``, ``HEAD``. A handler gets an :class:`HttpRequest` and returns an
:class:`HttpResponse`, or raises :class:`DropConnection` to close the connection without
answering (how a test server imitates a crash or a reset after the work was done).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl

__all__ = ["DropConnection", "HttpRequest", "HttpResponse", "HttpServer"]

_HEAD_LIMIT = 1 << 20
_STREAM_LIMIT = 4 << 20
_DRAIN_ABOVE = 1 << 20
_CLOSE_WAIT_S = 2.0


class DropConnection(Exception):
    """Raised by a handler: close the connection at once (TCP reset) without a response."""


@dataclass(slots=True)
class HttpRequest:
    """One request: header names are lower case; a repeated header's values are comma-joined."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""


@dataclass(slots=True)
class HttpResponse:
    """One response; ``Content-Length`` and the server's default headers are added on sending."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


_REASONS = {status.value: status.phrase for status in HTTPStatus}


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one) until :meth:`close`.

    ``default_headers`` go on every response. Bodies above ``max_body`` are refused with 413.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_headers: tuple[tuple[str, str], ...] = (),
        max_body: int = 100 << 20,
    ) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._default_headers = "".join(f"{k}: {v}\r\n" for k, v in default_headers)
        self._max_body = max_body
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Bind and listen; return the port."""
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=_STREAM_LIMIT, backlog=1024
        )
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        """Stop listening, end every connection and wait for them (bounded)."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_CLOSE_WAIT_S)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), _CLOSE_WAIT_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        transport = writer.transport
        try:
            await self._requests(reader, writer)
        except DropConnection:
            _reset(transport)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Only close() cancels this task, which nothing awaits; ending it normally keeps
            # asyncio from reporting the cancellation as an error of the stream callback.
            pass
        finally:
            self._connections.discard(task)
            transport.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            except asyncio.LimitOverrunError:
                self._write(writer, HttpResponse(431), head_only=False, keep_alive=False)
                return
            try:
                request, keep_alive = _parse_head(head)
                headers = request.headers
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    request.body = await _read_chunked(reader, self._max_body)
                else:
                    length = _content_length(headers)
                    if length > self._max_body:
                        raise _BadRequest(413, "request body too large")
                    if length:
                        request.body = await reader.readexactly(length)
            except _BadRequest as exc:
                response = HttpResponse(exc.status, str(exc).encode(), "text/plain")
                self._write(writer, response, head_only=False, keep_alive=False)
                await writer.drain()
                return
            response = await self._handler(request)
            self._write(writer, response, head_only=request.method == "HEAD", keep_alive=keep_alive)
            if not keep_alive:
                await writer.drain()
                return
            if writer.transport.get_write_buffer_size() > _DRAIN_ABOVE:
                await writer.drain()

    def _write(
        self,
        writer: asyncio.StreamWriter,
        response: HttpResponse,
        *,
        head_only: bool,
        keep_alive: bool,
    ) -> None:
        body = response.body
        status = response.status
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n",
            f"content-type: {response.content_type}\r\ncontent-length: {len(body)}\r\n",
            self._default_headers,
        ]
        lines.extend(f"{k}: {v}\r\n" for k, v in response.headers)
        if not keep_alive:
            lines.append("connection: close\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode("latin-1")
        if head_only or not body:
            writer.write(head)
        elif len(body) < 65536:
            writer.write(head + body)
        else:
            writer.write(head)
            writer.write(body)


def _parse_head(head: bytes) -> tuple[HttpRequest, bool]:
    lines = head[:-4].lstrip(b"\r\n").split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, sep, value = raw.partition(b":")
        if not sep:
            raise _BadRequest(400, "malformed header line")
        key = name.strip().lower().decode("latin-1")
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    path, _, query_string = target.partition("?")
    query = dict(parse_qsl(query_string, keep_blank_values=True)) if query_string else {}
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.1":
        keep_alive = "close" not in connection
    else:
        keep_alive = "keep-alive" in connection
    return HttpRequest(method.upper(), path, query, headers), keep_alive


def _content_length(headers: dict[str, str]) -> int:
    value = headers.get("content-length")
    if value is None:
        return 0
    try:
        length = int(value)
    except ValueError:
        raise _BadRequest(400, "malformed content-length") from None
    if length < 0:
        raise _BadRequest(400, "malformed content-length")
    return length


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(400, "malformed chunk size") from None
        if size == 0:
            break
        total += size
        if total > max_body:
            raise _BadRequest(413, "request body too large")
        chunk = await reader.readexactly(size + 2)
        chunks.append(chunk[:-2])
    while (await reader.readuntil(b"\r\n")) != b"\r\n":
        pass
    return b"".join(chunks)


def _reset(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if isinstance(transport, asyncio.WriteTransport):
        transport.abort()
