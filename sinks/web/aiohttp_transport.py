"""``AiohttpTransport``: the transport of a writer's own requests, over aiohttp.

httpx's own HTTP/1.1 stack parses in pure Python, and its request and response models
cost more CPU than everything else a request takes; aiohttp's parser is compiled. So a
writer's requests go straight to one ``aiohttp.ClientSession`` per transport, with no
httpx object on the way, and only HTTP/2 (which aiohttp does not speak) takes httpx's
stack (``HttpxTransport``).

What an httpx client would add is done here: no redirects followed, no cookies, the
request's connect and read timeouts, answers decoded (gzip, deflate) as httpx decodes
them, and aiohttp's errors raised as the httpx errors for the same failure
(``httpx_error``). Proxies come from the environment, as httpx takes them: ``HTTP_PROXY``,
``HTTPS_PROXY`` and ``ALL_PROXY``, except for the hosts ``NO_PROXY`` lists.
"""

from __future__ import annotations

import ssl
import zlib
from urllib.request import getproxies_environment, proxy_bypass_environment  # type: ignore[attr-defined]

import aiohttp
import httpx
import yarl

from asyncsink.clients import connections

from .transport import Answer, Request, Timeout, Transport

__all__ = ["AiohttpTransport", "environment_proxy", "httpx_error"]

_CACHED = 64  # URLs and timeouts a transport keeps prepared (its writers use a handful)


def environment_proxy(scheme: str, host: str, env: dict[str, str] | None = None) -> str | None:
    """The proxy the environment (``env``, else ``os.environ``) names for requests to
    ``host`` over ``scheme``: ``HTTP(S)_PROXY`` or ``ALL_PROXY``, unless ``NO_PROXY``
    lists the host."""
    env = getproxies_environment() if env is None else env
    proxy = env.get(scheme) or env.get("all")
    if not proxy or proxy_bypass_environment(host, env):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


class AiohttpTransport(Transport):
    """Sends requests with one ``aiohttp.ClientSession`` (opened on first use, in the
    running event loop, again after ``aclose``) holding at most ``connections``
    connections.

    Args:
        connections: the pool's size; requests beyond it wait for a connection.
        verify: ``False`` to skip certificate checks, else the TLS context to verify with.
    """

    def __init__(self, *, connections: int, verify: ssl.SSLContext | bool) -> None:
        self.connections = connections
        self._verify = verify
        self._session: aiohttp.ClientSession | None = None
        self._env_proxies = getproxies_environment()
        self._targets: dict[str, tuple[yarl.URL, str | None]] = {}
        self._limits: dict[Timeout, aiohttp.ClientTimeout] = {}

    async def handle_async_request(self, request: Request) -> Answer:
        method, url = request.method, request.url
        location, proxy = self._targets.get(url) or self._target(url)
        limits = self._limits.get(request.timeout) or self._limit(request.timeout)
        try:
            async with self._open_session().request(
                method,
                location,
                data=request.content or None,
                headers=request.headers,
                allow_redirects=False,
                timeout=limits,
                proxy=proxy,
            ) as response:
                raw = await response.read()
                status, reason, headers = response.status, response.reason, response.headers
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise httpx_error(exc, httpx.Request(method, url)) from exc
        coding = headers.get("content-encoding")
        body = raw if coding is None else _decoded(raw, coding, method, url)
        return Answer(status, reason or "", headers, body, method=method, url=url, raw=raw)

    @property
    def is_open(self) -> bool:
        """Whether the transport holds an open session (and its connections)."""
        return self._session is not None and not self._session.closed

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _open_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.connections,
                limit_per_host=0,
                ssl=self._verify,
                keepalive_timeout=connections.IDLE_CONNECTION_S,
            )
            session = self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,  # decoded here, the codings httpx decodes
                headers={"Accept-Encoding": "gzip, deflate"},
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,  # proxies: see ``_target``
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return session

    def _target(self, url: str) -> tuple[yarl.URL, str | None]:
        location = yarl.URL(str(httpx.URL(url)), encoded=True)  # as httpx would send it
        proxy = environment_proxy(location.scheme, location.host or "", self._env_proxies)
        if len(self._targets) < _CACHED:
            self._targets[url] = (location, proxy)
        return location, proxy

    def _limit(self, timeout: Timeout) -> aiohttp.ClientTimeout:
        # aiohttp resets a read timer for every chunk it reads, a cost skipped when the
        # caller bounds the request as a whole (``read`` is then ``None``).
        limits = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout.connect, sock_read=timeout.read
        )
        if len(self._limits) < _CACHED:
            self._limits[timeout] = limits
        return limits


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
