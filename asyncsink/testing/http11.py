"""A small, fast HTTP/1.1 server-side codec over asyncio streams.

It reads one request at a time from a keep-alive connection (``Content-Length`` or chunked
bodies, ``Expect: 100-continue``, HTTP/1.0 and 1.1 connection semantics) and renders
responses. It is just enough HTTP for a test endpoint: no pipelining guarantees beyond
answering requests in order, no trailers, no upgrades.
"""

from __future__ import annotations

import asyncio
import functools
import http
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["HttpError", "Request", "read_request", "render_response"]

MAX_BODY_BYTES = 256 * 1024 * 1024


class HttpError(Exception):
    """A request the codec cannot accept; answer ``status`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Request:
    """One parsed request. Header names are lower case; repeated headers are joined."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.partition("?")[0]


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    """Read the next request from a connection, or ``None`` on a clean end of stream.

    Raises:
        HttpError: the request is malformed or too large.
        ConnectionError: the peer went away in the middle of a request.
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise ConnectionResetError("connection closed inside a request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "request head too large") from exc
    lines = head.lstrip(b"\r\n")[:-4].split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported version {version!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name.strip() != name:
            raise HttpError(400, "malformed header line")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.1":
        keep_alive = "close" not in connection
    else:
        keep_alive = "keep-alive" in connection
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    transfer_encoding = headers.get("transfer-encoding")
    if transfer_encoding is not None:
        if transfer_encoding.lower() != "chunked":
            raise HttpError(501, f"unsupported transfer-encoding {transfer_encoding!r}")
        body = await _read_chunked(reader)
    else:
        body = await _read_sized(reader, headers.get("content-length"))
    return Request(method, target, headers, body, keep_alive)


async def _read_sized(reader: asyncio.StreamReader, content_length: str | None) -> bytes:
    if content_length is None:
        return b""
    try:
        size = int(content_length)
    except ValueError:
        raise HttpError(400, f"bad content-length {content_length!r}") from None
    if size < 0:
        raise HttpError(400, f"bad content-length {content_length!r}")
    if size > MAX_BODY_BYTES:
        raise HttpError(413, f"body of {size} bytes is over {MAX_BODY_BYTES}")
    if size == 0:
        return b""
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ConnectionResetError("connection closed inside a request body") from exc


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    total = 0
    try:
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HttpError(400, "malformed chunk size") from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_BODY_BYTES:
                raise HttpError(413, f"chunked body is over {MAX_BODY_BYTES} bytes")
            chunk = await reader.readexactly(size + 2)
            if chunk[-2:] != b"\r\n":
                raise HttpError(400, "malformed chunk")
            chunks.append(chunk[:-2])
    except asyncio.IncompleteReadError as exc:
        raise ConnectionResetError("connection closed inside a chunked body") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError(400, "chunk line too long") from exc


@functools.lru_cache(maxsize=128)
def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def render_response(
    status: int,
    body: bytes,
    *,
    content_type: str = "application/json",
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = True,
) -> bytes:
    """A complete response (status line, headers, body) ready to write."""
    head = [
        _status_line(status),
        b"content-type: ",
        content_type.encode("latin-1"),
        b"\r\ncontent-length: ",
        str(len(body)).encode("ascii"),
        b"\r\n",
    ]
    for name, value in headers:
        head.append(f"{name}: {value}\r\n".encode("latin-1"))
    if not keep_alive:
        head.append(b"connection: close\r\n")
    head.append(b"\r\n")
    head.append(body)
    return b"".join(head)
