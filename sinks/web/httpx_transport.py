"""``HttpxTransport``: requests sent with an ``httpx.AsyncClient``.

It takes the requests of a writer given a client or an httpx transport (a mock such as
respx or ``httpx.MockTransport``, a proxy's), and of one with ``http2``: httpx's own
stack speaks HTTP/2 (with the h2 package). The client keeps its own settings (TLS,
proxies, pool); each request brings its timeouts, the write timeout equal to the read
one, and follows no redirect.
"""

from __future__ import annotations

import httpx

from .classify import request_of
from .transport import Answer, Request, Timeout, Transport

__all__ = ["HttpxTransport"]


class HttpxTransport(Transport):
    """Sends requests with ``client``, closed by ``aclose`` only if ``owned``."""

    def __init__(self, client: httpx.AsyncClient, *, owned: bool = False) -> None:
        self.client = client
        self._owned = owned
        self._timeouts: dict[Timeout, httpx.Timeout] = {}

    async def handle_async_request(self, request: Request) -> Answer:
        client = self.client
        sent = client.build_request(
            request.method,
            request.url,
            content=request.content or None,
            headers=request.headers,
            timeout=self._timeout(request.timeout),
        )
        try:
            response = await client.send(sent, follow_redirects=False)
        except httpx.HTTPError as exc:
            if request_of(exc) is None:
                exc.request = sent
            raise
        return Answer(
            response.status_code,
            response.reason_phrase,
            response.headers,
            response.content,
            method=request.method,
            url=request.url,
            response=response,
        )

    async def aclose(self) -> None:
        if self._owned:
            await self.client.aclose()

    def _timeout(self, timeout: Timeout) -> httpx.Timeout:
        found = self._timeouts.get(timeout)
        if found is None:
            found = httpx.Timeout(
                connect=timeout.connect, read=timeout.read, write=timeout.read, pool=None
            )
            self._timeouts[timeout] = found
        return found
