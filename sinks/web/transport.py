"""The transport contract: how a request of the sinks that talk HTTP goes out and its
answer comes back.

A ``Transport`` has one method, ``handle_async_request(request) -> Answer``, the shape
of httpx's ``AsyncBaseTransport``. Everything above it (headers, idempotency keys,
compression, statuses, answer parsing, retries, redaction) is the same code whichever
transport runs::

    class Recorded(Transport):
        async def handle_async_request(self, request: Request) -> Answer:
            seen.append(request)
            return Answer(200, "OK", httpx.Headers(), b"", method=request.method,
                          url=request.url)

A writer's own requests go through ``AiohttpTransport`` (aiohttp's compiled parser and
pool); a client or httpx transport you pass in (respx, ``httpx.MockTransport``, HTTP/2)
goes through ``HttpxTransport``; a test double implements the method itself.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

__all__ = ["Answer", "Request", "Timeout", "Transport"]


@dataclass(frozen=True, slots=True)
class Timeout:
    """Seconds to wait for a connection and for each read; ``None`` waits as long as the
    request's caller does."""

    connect: float | None
    read: float | None


@dataclass(frozen=True, slots=True)
class Request:
    """One request, its body whole.

    ``url`` is sent as written (percent-encoded already, never re-quoted); ``headers`` are
    sent as given, names in lower case; no redirect is followed and no cookie is kept.
    """

    method: str
    url: str
    headers: Mapping[str, str]
    content: bytes
    timeout: Timeout


class Transport(abc.ABC):
    """Sends requests and reads their answers whole (see the module docstring)."""

    @abc.abstractmethod
    async def handle_async_request(self, request: Request) -> Answer:
        """Send ``request`` and read its whole answer, its ``Content-Encoding`` undone.

        Raises:
            httpx.HTTPError: no (readable) answer came (``ConnectError``, ``ReadTimeout``,
                ``RemoteProtocolError``...); its ``request`` is set.
        """

    async def aclose(self) -> None:
        """Release the connections (the default holds none)."""
        return None


class Answer:
    """An HTTP answer, read in full.

    Attributes:
        status: the HTTP status code.
        reason: the reason phrase (may be empty).
        headers: the answer's headers; ``headers.get(name)`` ignores the name's case.
        content: the body, its ``Content-Encoding`` undone.
        method, url: the request's method and URL (for messages: see ``where``).
    """

    __slots__ = ("content", "headers", "method", "reason", "status", "url", "_raw", "_response")

    def __init__(
        self,
        status: int,
        reason: str,
        headers: Mapping[str, str],
        content: bytes,
        *,
        method: str,
        url: str,
        raw: bytes | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content = content
        self.method = method
        self.url = url
        self._raw = content if raw is None else raw
        self._response = response

    @property
    def where(self) -> str:
        """``METHOD scheme://host:port/path`` of the request: no credentials, no query."""
        url = httpx.URL(self.url)
        return f"{self.method} {url.scheme}://{url.netloc.decode('ascii')}{url.path}"

    def response(self) -> httpx.Response:
        """The answer as an ``httpx.Response`` (for ``parseResponse`` hooks and messages):
        the client's own on the httpx route; built from the answer, with its headers as
        they came and its body decoded by httpx, on the direct one."""
        if self._response is None:
            response = httpx.Response(
                self.status,
                headers=list(self.headers.items()),
                stream=httpx.ByteStream(self._raw),
                request=httpx.Request(self.method, self.url),
                extensions={
                    "http_version": b"HTTP/1.1",
                    "reason_phrase": self.reason.encode("ascii", "replace"),
                },
            )
            response.read()
            self._response = response
        return self._response
