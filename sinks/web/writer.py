"""``HttpClientWriter``, the base of ``HttpWriter`` and ``ElasticsearchWriter``: a writer
that sends every request through one ``Transport`` (see ``asyncsink.sinks.web.transport``),
keeps its credentials out of the logs while open, and compresses request bodies
(``gzip_compress``)."""

from __future__ import annotations

import abc
import asyncio
import functools
import gzip
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

import anyio.to_thread
import httpx

from asyncsink.errors import WriterStateError
from asyncsink.masking import mask_url
from asyncsink.writer import AsyncSinkWriter

from . import clients
from .aiohttp_transport import environment_proxy
from .auth import Auth, AuthenticatedTransport
from .clients import ClientSettings
from .httpx_transport import HttpxTransport
from .redact import Redactor, mask_in_logs, unmask_in_logs
from .transport import Answer, Request, Timeout, Transport

__all__ = ["HttpClientWriter", "gzip_compress"]

InputT = TypeVar("InputT")
EntryT = TypeVar("EntryT")

_THREAD_GZIP_BYTES = 256 * 1024


class HttpClientWriter(AsyncSinkWriter[InputT, EntryT]):
    """An ``AsyncSinkWriter`` that sends every request through one ``Transport``.

    Entering the writer takes its transport: the running event loop's shared one for its
    ``_client_settings()`` (aiohttp, or httpx for HTTP/2), whose connections outlive the
    writer and serve the next writers of the loop; one around a ``client`` or httpx
    ``transport`` it was given (``HttpxTransport``); a ``Transport`` it was given (a test
    double); or, off asyncio, one of its own. Its requests then all go through
    ``_exchange``, the same code whichever transport runs. From then on until it leaves,
    log records of httpx, httpcore, hpack, aiohttp, asyncsink and the loggers named in
    ``logger_names`` never show the writer's secrets. With an ``Auth`` (AWS SigV4, OAuth2;
    see ``asyncsink.sinks.web.auth``), every attempt of every request is authenticated
    anew on its way to the transport. Leaving closes what the writer
    opened, also when entering or leaving fails; what it was given and a shared
    transport are left open (the loop's end, or ``close_clients()``, closes a shared one).

    Args:
        secrets: the values to keep out of logs and errors (``self._redact`` masks them).
        client: an ``httpx.AsyncClient`` to send with; not closed here.
        transport: an httpx transport for a client the writer opens for itself and closes
            (tests, proxies), or a ``Transport`` to send through; not closed here.
        **kwargs: ``options``, ``call_log`` and the rest of ``AsyncSinkWriter``'s arguments.
    """

    logger_names: ClassVar[tuple[str, ...]] = ()
    """The sink's own loggers, whose records must not show its secrets either."""

    _timeouts: Timeout
    """Every request's timeouts (``connect``, ``read``): set by the sink's ``__init__``."""

    def __init__(
        self,
        *,
        secrets: Iterable[str],
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | Transport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        given: Transport | None = HttpxTransport(client) if client is not None else None
        if isinstance(transport, Transport):
            given, transport = transport, None
        self._given = given
        self._httpx_transport = transport
        self._web: Transport | None = None
        self._owns_web = False
        self._secrets = list(secrets)
        self._redact = Redactor(self._secrets)
        self._masking = False
        self._auth: Auth | None = None
        """Authenticates every attempt (SigV4, OAuth2): set by the sink's ``__init__``."""

    @abc.abstractmethod
    def _client_settings(self) -> ClientSettings:
        """What shapes this writer's client (writers with equal settings share one)."""

    async def _take_transport(self) -> Transport:
        """The transport given, the shared one for the writer's settings, or, given an
        httpx transport (or off asyncio, which the shared ones need), one of its own.

        Raises:
            OptionError: the options do not allow one (an unreadable ``caBundle``...).
            ImportError: ``http2`` without the h2 package.
        """
        if self._given is not None:
            return self._given
        settings = self._client_settings()
        if self._httpx_transport is None and _on_asyncio():
            return await clients.get_transport(settings)
        self._owns_web = True
        return clients.open_transport(settings, transport=self._httpx_transport)

    @abc.abstractmethod
    def _first_url(self) -> str:
        """The URL the writer's requests go to (the first one, if several)."""

    def destination_name(self) -> str:
        """The host, port and path the writer's requests go to: no userinfo, no query."""
        url = httpx.URL(self._first_url())
        port = f":{url.port}" if url.port is not None else ""
        return f"{url.host}{port}{url.path}"

    def describe_destination(self) -> str:
        """The URL the writer's requests go to, masked (``mask_url``), and the proxy the
        environment sends them through, if any: it may be what refused them."""
        first = self._first_url()
        url = httpx.URL(first)
        proxy = environment_proxy(url.scheme, url.host)
        shown = mask_url(first)
        return f"{shown} (through the proxy {mask_url(proxy)})" if proxy else shown

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes = b"",
        *,
        within: float | None = None,
    ) -> Answer:
        """Send one request with the writer's timeouts through its transport, and read its
        whole answer: the one way the writer's requests go. ``headers`` are sent as given
        (lower-case names, so that none is sent twice). ``within`` says that the caller
        gives up on the request after that many seconds: a read timeout no shorter could
        never fire first, so none is set.

        Raises:
            httpx.HTTPError: the request got no answer (its ``request`` is set).
            WriterStateError: the writer is not open.
        """
        transport = self._web
        if transport is None:
            raise WriterStateError("the writer is not open: use it inside 'async with'")
        timeout = self._timeouts
        if within is not None and timeout.read is not None and within <= timeout.read:
            timeout = Timeout(timeout.connect, None)
        request = Request(method, url, headers, content, timeout)
        return await transport.handle_async_request(request)

    async def __aenter__(self) -> Self:
        if self._masking:  # already open: let the core say so
            return await super().__aenter__()
        if self._web is None:
            transport = await self._take_transport()
            if self._auth is not None:
                transport = AuthenticatedTransport(transport, self._auth, owned=self._owns_web)
            self._web = transport
        mask_in_logs(self._secrets, self.logger_names)
        self._masking = True
        try:
            return await super().__aenter__()
        except BaseException:
            await self._release_transport()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await super().__aexit__(exc_type, exc, tb)
        finally:
            await self._release_transport()

    async def _release_transport(self) -> None:
        transport, owned = self._web, self._owns_web
        self._web, self._owns_web = None, False
        try:
            if owned and transport is not None:
                await transport.aclose()
        finally:
            if self._masking:
                self._masking = False
                unmask_in_logs(self._secrets)


async def gzip_compress(body: bytes, level: int = 6) -> bytes:
    """``body`` compressed with gzip, the same bytes for the same body every time (a
    re-sent call carries the very bytes of its first send). Large bodies are compressed
    in a worker thread, so that the event loop keeps serving other requests."""
    compress = functools.partial(gzip.compress, body, compresslevel=level, mtime=0)
    if len(body) >= _THREAD_GZIP_BYTES:
        return await anyio.to_thread.run_sync(compress)
    return compress()


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
