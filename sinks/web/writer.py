"""What the sinks that talk HTTP with httpx share: a writer sending with an
``httpx.AsyncClient``, the checks and headers of their credential and TLS options, and
request-body compression.

``HttpClientWriter`` is the base of ``HttpWriter`` and ``ElasticsearchWriter``: when
entered it takes its event loop's shared client (see ``asyncsink.sinks.web.clients``),
or opens its own around a transport it was given, or uses a client it was given; it
sends every request with ``_exchange`` (see ``asyncsink.sinks.web.exchange``); while
open it keeps its credentials out of the log records of the HTTP client, of asyncsink
and of the loggers its sink declares, and it closes only the client it opened.
``ClientOptions`` is the base of their option groups; each declares the option fields
itself, documented for its destination.
"""

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

from .clients import ClientSettings, get_client, open_client
from .exchange import Answer, Exchange
from .redact import Redactor, mask_in_logs, unmask_in_logs
from .transport import environment_proxy

__all__ = ["HttpClientWriter", "gzip_compress"]

InputT = TypeVar("InputT")
EntryT = TypeVar("EntryT")

_THREAD_GZIP_BYTES = 256 * 1024


class HttpClientWriter(AsyncSinkWriter[InputT, EntryT]):
    """An ``AsyncSinkWriter`` that sends its requests with one ``httpx.AsyncClient``.

    Entering the writer takes the client for its ``_client_settings()``: the running
    event loop's shared one, whose connections outlive the writer and serve the next
    writers of the loop; or, given a ``transport`` (or off asyncio), one of its own. Its
    requests then go through ``_exchange``: straight to aiohttp for a client whose
    transport is the aiohttp one, through ``client.send`` for any other. From then on
    until it leaves, log records of httpx, httpcore, hpack, asyncsink and the
    loggers named in ``logger_names`` never show the writer's secrets. Leaving closes the
    client it opened, also when entering or leaving fails; a given client and a shared
    one are left open (the loop's end, or ``close_clients()``, closes a shared one).

    Args:
        secrets: the values to keep out of logs and errors (``self._redact`` masks them).
        client: an ``httpx.AsyncClient`` to use instead of opening one; not closed here.
        transport: the transport of a client the writer opens for itself and closes
            (tests, proxies).
        **kwargs: ``options``, ``call_log`` and the rest of ``AsyncSinkWriter``'s arguments.
    """

    logger_names: ClassVar[tuple[str, ...]] = ()
    """The sink's own loggers, whose records must not show its secrets either."""

    _timeouts: httpx.Timeout
    """Every request's timeouts (``connect``, ``read``): set by the sink's ``__init__``."""

    def __init__(
        self,
        *,
        secrets: Iterable[str],
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._client = client
        self._given_client = client is not None
        self._owns_client = False
        self._transport = transport
        self._secrets = list(secrets)
        self._redact = Redactor(self._secrets)
        self._masking = False
        self._exchanger: Exchange | None = None

    @abc.abstractmethod
    def _client_settings(self) -> ClientSettings:
        """What shapes this writer's client (writers with equal settings share one)."""

    async def _take_client(self) -> httpx.AsyncClient:
        """The shared client for the writer's settings, or, given a transport (or off
        asyncio, which the shared clients need), a client of its own.

        Raises:
            OptionError: the options do not allow one (an unreadable ``caBundle``...).
            ImportError: ``http2`` without the h2 package.
        """
        settings = self._client_settings()
        if self._transport is None and _on_asyncio():
            return await get_client(settings)
        self._owns_client = True
        return open_client(settings, transport=self._transport)

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

    def _require_client(self) -> httpx.AsyncClient:
        """The open client.

        Raises:
            WriterStateError: the writer is not open.
        """
        if self._client is None:
            raise WriterStateError("the writer is not open: use it inside 'async with'")
        return self._client

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes = b"",
        *,
        within: float | None = None,
    ) -> Answer:
        """Send one request with the writer's client and timeouts, and read its whole
        answer: the one way the writer's requests go, whether its client sends through
        aiohttp (handed the request directly), httpx's own stack, or a mock (respx,
        ``httpx.MockTransport``); see ``asyncsink.sinks.web.exchange``. ``within``: the
        caller gives up on the request after that many seconds (see ``Exchange.send``).

        Raises:
            httpx.HTTPError: the request got no answer (its ``request`` is set).
            WriterStateError: the writer is not open.
        """
        exchange = self._exchanger
        if exchange is None:
            raise WriterStateError("the writer is not open: use it inside 'async with'")
        return await exchange.send(method, url, headers, content, within=within)

    async def __aenter__(self) -> Self:
        if self._masking:  # already open: let the core say so
            return await super().__aenter__()
        if self._client is None:
            self._client = await self._take_client()
        self._exchanger = self._open_exchange(self._client)
        mask_in_logs(self._secrets, self.logger_names)
        self._masking = True
        try:
            return await super().__aenter__()
        except BaseException:
            await self._release()
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
            await self._release()

    def _open_exchange(self, client: httpx.AsyncClient) -> Exchange:
        """How the writer's requests go: a client given by the caller gets them through
        its ``send``; the one it took, directly when its transport allows."""
        if self._given_client:
            return Exchange(client, timeout=self._timeouts)
        return Exchange.for_client(client, self._first_url(), timeout=self._timeouts)

    async def _release(self) -> None:
        client, owned = self._client, self._owns_client
        self._exchanger = None
        try:
            if not self._given_client:
                self._client, self._owns_client = None, False
            if owned and client is not None:
                await client.aclose()
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
