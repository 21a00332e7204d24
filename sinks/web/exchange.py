"""One request and its answer: how the writers of the sinks that talk HTTP send.

A writer describes a request (method, URL, headers, body) and gets an ``Answer``: the
status, the reason, the headers (looked up case-insensitively), and the body with its
``Content-Encoding`` undone. ``Exchange.send`` is the one way there, whatever the client:

- the client a writer normally takes (``asyncsink.sinks.web.clients``) sends its HTTP/1.1
  requests with aiohttp (``AiohttpTransport``). For it, the exchange hands each request
  to the transport's aiohttp session itself, with the URL, the timeouts and the proxy
  prepared once per writer, and reads the whole answer. httpx's request and response
  models, which cost more CPU than everything else a request takes, stay out of the way;
  what the client would add is done here: no redirects followed, no cookies, the
  environment's proxies, the writer's connect and read timeouts, and answers decoded
  (gzip, deflate) as httpx decodes them;
- any other client (one given by the caller, one around a transport given by tests,
  HTTP/2 with httpx's own stack, or a client whose transport a mock such as respx picks)
  builds an ``httpx.Request``, sends it with ``client.send``, and its ``httpx.Response``
  becomes the same ``Answer``.

Either way a request that gets no answer raises the ``httpx.HTTPError`` for its failure
(``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``RemoteProtocolError``...), its
``request`` set, so everything above the exchange (statuses, errors, answer parsing,
redaction) is one code path.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import aiohttp
import httpx
import yarl

from .classify import request_of
from .transport import AiohttpTransport, httpx_error

__all__ = ["Answer", "Exchange"]

_URL_CACHE = 64  # URLs an exchange keeps prepared (a writer sends to a handful)


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


class Exchange:
    """Sends a writer's requests with its client (see the module docstring).

    Args:
        client: the writer's open client.
        timeout: the writer's timeouts (``connect``, ``read``) for every request.
        direct: the ``AiohttpTransport`` the client sends through, to hand requests to
            it directly; ``None`` to send everything with ``client.send``.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timeout: httpx.Timeout,
        direct: AiohttpTransport | None = None,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._direct = direct
        self._aiohttp_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout.connect, sock_read=timeout.read
        )
        # For a request its caller bounds as a whole: aiohttp resets a read timer for
        # every chunk it reads, a cost worth skipping when that timer cannot fire first.
        self._bounded_timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect)
        self._targets: dict[str, tuple[yarl.URL, str | None]] = {}

    @classmethod
    def for_client(cls, client: httpx.AsyncClient, url: str, *, timeout: httpx.Timeout) -> Exchange:
        """The exchange for ``client``: direct when the transport httpx would send a
        request to ``url`` with is an ``AiohttpTransport`` (a mock, a mounted proxy or
        HTTP/2 stack picks another)."""
        return cls(client, timeout=timeout, direct=_aiohttp_transport(client, url))

    @property
    def direct(self) -> bool:
        """Whether requests skip httpx (see the module docstring)."""
        return self._direct is not None

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes = b"",
        *,
        within: float | None = None,
    ) -> Answer:
        """Send one request and read its whole answer.

        ``headers`` are sent as given (lower-case names, so that none is sent twice);
        ``url`` is sent as written (percent-encoded already, never re-quoted). ``within``
        says that the caller gives up on the request after that many seconds: a read
        timeout no shorter could never fire first, so none is set.

        Raises:
            httpx.HTTPError: the request got no (readable) answer; its ``request`` is set.
        """
        if self._direct is None:
            return await self._send_httpx(method, url, headers, content)
        read = self._timeout.read
        bounded = within is not None and read is not None and within <= read
        limits = self._bounded_timeout if bounded else self._aiohttp_timeout
        return await self._send_direct(self._direct, method, url, headers, content, limits)

    async def _send_httpx(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes
    ) -> Answer:
        client = self._client
        request = client.build_request(
            method, url, content=content or None, headers=headers, timeout=self._timeout
        )
        try:
            response = await client.send(request)
        except httpx.HTTPError as exc:
            if request_of(exc) is None:
                exc.request = request
            raise
        return Answer(
            response.status_code,
            response.reason_phrase,
            response.headers,
            response.content,
            method=method,
            url=url,
            response=response,
        )

    async def _send_direct(
        self,
        transport: AiohttpTransport,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes,
        limits: aiohttp.ClientTimeout,
    ) -> Answer:
        target = self._targets.get(url)
        if target is None:
            target = self._target(transport, url)
        location, proxy = target
        try:
            async with transport.session().request(
                method,
                location,
                data=content or None,
                headers=headers,
                allow_redirects=False,
                timeout=limits,
                proxy=proxy,
            ) as response:
                raw = await response.read()
                status, reason, answer_headers = response.status, response.reason, response.headers
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise httpx_error(exc, httpx.Request(method, url)) from exc
        content_encoding = answer_headers.get("content-encoding")
        body = raw if content_encoding is None else _decoded(raw, content_encoding, method, url)
        return Answer(status, reason or "", answer_headers, body, method=method, url=url, raw=raw)

    def _target(self, transport: AiohttpTransport, url: str) -> tuple[yarl.URL, str | None]:
        location = yarl.URL(str(httpx.URL(url)), encoded=True)  # as httpx would send it
        proxy = transport.proxy_for(location.scheme, location.host or "", location.port)
        target = (location, proxy)
        if len(self._targets) < _URL_CACHE:
            self._targets[url] = target
        return target


def _aiohttp_transport(client: httpx.AsyncClient, url: str) -> AiohttpTransport | None:
    # httpx picks a request's transport by its URL (mounts, proxies); mocks such as respx
    # take over that choice, so asking it is how a mocked client keeps its mock.
    pick: Any = getattr(client, "_transport_for_url", None)
    if pick is None:
        return None
    transport = pick(httpx.URL(url))
    return transport if isinstance(transport, AiohttpTransport) else None


def _decoded(raw: bytes, content_encoding: str, method: str, url: str) -> bytes:
    """``raw`` with its content codings undone, the last applied first, as httpx does:
    ``gzip`` and ``deflate`` (zlib-wrapped or raw); ``identity`` and codings it does not
    know are left as they are.

    Raises:
        httpx.DecodingError: the body is not what its coding says.
    """
    data = raw
    for coding in reversed(content_encoding.split(",")):
        coding = coding.strip().lower()
        try:
            if coding == "gzip":
                data = _inflate(data, zlib.MAX_WBITS | 16)
            elif coding == "deflate":
                try:
                    data = _inflate(data, zlib.MAX_WBITS)
                except zlib.error:
                    data = _inflate(data, -zlib.MAX_WBITS)
        except zlib.error as exc:
            request = httpx.Request(method, url)
            raise httpx.DecodingError(str(exc), request=request) from exc
    return data


def _inflate(data: bytes, wbits: int) -> bytes:
    decompressor = zlib.decompressobj(wbits)
    return decompressor.decompress(data) + decompressor.flush()
