"""``AiohttpTransport``: an httpx transport that sends HTTP/1.1 requests over aiohttp.

The sinks speak httpx (requests, responses, errors, mock transports in tests), but the
transport under an ``httpx.AsyncClient`` decides what a request costs. httpx's own
HTTP/1.1 stack parses in pure Python and costs several times the CPU of aiohttp's, whose
parser is compiled; with batches already cheap to build, that cost is most of what a
sink spends per request. So a writer's client sends its HTTP/1.1 requests through
aiohttp's connection pool, and only HTTP/2 (which aiohttp does not speak) takes httpx's
own stack.

Everything above the transport stays httpx's: headers, timeouts (``connect`` and
``read`` per request), redirects (not followed) and response decoding. aiohttp's errors
come back as the httpx errors for the same failure (``httpx_error``), so callers classify
one family. Proxies come from the environment, as httpx takes them: ``HTTP_PROXY``,
``HTTPS_PROXY`` and ``ALL_PROXY``, except for the hosts ``NO_PROXY`` lists.

The sinks' writers skip even httpx's request and response models when their client's
requests go through this transport: they hand requests to its ``session()`` themselves,
with the proxy of ``proxy_for`` (see ``asyncsink.sinks.web.exchange``).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from urllib.request import getproxies_environment, proxy_bypass_environment  # type: ignore[attr-defined]

import aiohttp
import httpx
import yarl

from asyncsink import connections

__all__ = ["AiohttpTransport", "environment_proxy", "httpx_error"]

_CHUNK = 64 * 1024


def environment_proxy(scheme: str, host: str, env: dict[str, str] | None = None) -> str | None:
    """The proxy the environment (``env``, else ``os.environ``) names for requests to
    ``host`` over ``scheme``: ``HTTP(S)_PROXY`` or ``ALL_PROXY``, unless ``NO_PROXY``
    lists the host."""
    env = getproxies_environment() if env is None else env
    proxy = env.get(scheme) or env.get("all")
    if not proxy or proxy_bypass_environment(host, env):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests with one ``aiohttp.ClientSession`` (opened on first use, in
    the running event loop) holding at most ``connections`` connections.

    Args:
        connections: the pool's size; requests beyond it wait for a connection.
        verify: ``False`` to skip certificate checks, else the TLS context to verify with.
    """

    def __init__(self, *, connections: int, verify: ssl.SSLContext | bool) -> None:
        self.connections = connections
        self._verify = verify
        self._session: aiohttp.ClientSession | None = None
        self._env_proxies = getproxies_environment()
        self._proxies: dict[tuple[str, str, int | None], str | None] = {}

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self.connections,
            limit_per_host=0,
            ssl=self._verify,
            keepalive_timeout=connections.IDLE_CONNECTION_S,
        )
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # httpx decodes the body by its content-encoding
            # what httpx and the sinks' direct route decode, whatever aiohttp could (br...)
            headers={"Accept-Encoding": "gzip, deflate"},
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,  # proxies: see ``_proxy``
            timeout=aiohttp.ClientTimeout(total=None),
        )

    def session(self) -> aiohttp.ClientSession:
        """The transport's aiohttp session, opened on first use in the running event loop
        (again after ``aclose``). It sends no cookies, follows no proxy of its own and
        leaves response bodies as they came (``Content-Encoding`` undone by the caller)."""
        session = self._session
        if session is None or session.closed:
            session = self._session = self._open()
        return session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self.session()
        limits = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=limits.get("connect"), sock_read=limits.get("read")
        )
        body = await request.aread()
        try:
            response = await session.request(
                request.method,
                yarl.URL(str(request.url), encoded=True),
                data=body or None,
                headers=request.headers.multi_items(),
                allow_redirects=False,
                timeout=timeout,
                proxy=self.proxy_for(request.url.scheme, request.url.host, request.url.port),
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise httpx_error(exc, request) from exc
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode("ascii", "replace"),
            },
        )

    def proxy_for(self, scheme: str, host: str, port: int | None) -> str | None:
        """The environment's proxy for requests to an origin, if any (looked up once)."""
        origin = (scheme, host, port)
        if origin not in self._proxies:
            self._proxies[origin] = environment_proxy(scheme, host, self._env_proxies)
        return self._proxies[origin]

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _Body(httpx.AsyncByteStream):
    """A response body read from aiohttp as httpx asks for it."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while chunk := await content.read(_CHUNK):
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise httpx_error(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


def httpx_error(exc: aiohttp.ClientError | TimeoutError, request: httpx.Request) -> httpx.HTTPError:
    """The httpx error for what aiohttp raised (the caller chains ``exc`` as its cause)."""
    message = str(exc) or type(exc).__name__
    error: httpx.HTTPError
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        error = httpx.ConnectTimeout(message, request=request)
    elif isinstance(exc, TimeoutError):
        error = httpx.ReadTimeout(message, request=request)
    elif isinstance(exc, aiohttp.ClientConnectorError):
        error = httpx.ConnectError(message, request=request)
    elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        error = httpx.RemoteProtocolError(message, request=request)
    elif isinstance(exc, aiohttp.ClientResponseError):
        error = httpx.RemoteProtocolError(message, request=request)
    elif isinstance(exc, aiohttp.InvalidURL):
        error = httpx.UnsupportedProtocol(message, request=request)
    else:  # the connection failed while the request was sent or answered
        error = httpx.ReadError(message, request=request)
    return error
