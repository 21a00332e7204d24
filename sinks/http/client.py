"""What the sinks that talk HTTP with httpx share: a writer sending with an
``httpx.AsyncClient``, the checks and headers of their credential and TLS options, and
request-body compression.

``HttpClientWriter`` is the base of ``HttpWriter`` and ``ElasticsearchWriter``: when
entered it takes its event loop's shared client (see ``asyncsink.sinks.http.clients``),
or opens its own around a transport it was given, or uses a client it was given; it
sends every request with ``_exchange`` (see ``asyncsink.sinks.http.exchange``); while
open it keeps its credentials out of the log records of the HTTP client, of asyncsink
and of the loggers its sink declares, and it closes only the client it opened.
``ClientOptions`` is the base of their option groups; each declares the option fields
itself, documented for its destination.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import functools
import gzip
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

import anyio.to_thread
import httpx

from asyncsink.errors import OptionError, WriterStateError
from asyncsink.masking import mask_url
from asyncsink.options import Options, option_specs, spark_name
from asyncsink.writer import AsyncSinkWriter

from .clients import ClientSettings, get_client, open_client
from .exchange import Answer, Exchange
from .redact import Redactor, mask_in_logs, unmask_in_logs
from .transport import environment_proxy

__all__ = [
    "ClientOptions",
    "HttpClientWriter",
    "check_http_url",
    "gzip_compress",
    "is_header_text",
]

InputT = TypeVar("InputT")
EntryT = TypeVar("EntryT")

_THREAD_GZIP_BYTES = 256 * 1024
_CONTROL_CHARS = "\r\n\0"
_CREDENTIAL_KINDS = {
    "api_key": "API key",
    "basic_username": "basic",
    "bearer_token": "bearer token",
}


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
        ``httpx.MockTransport``); see ``asyncsink.sinks.http.exchange``. ``within``: the
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


class ClientOptions(Options):
    """Base of the option groups of sinks that talk HTTP: the checks and headers of their
    credentials (``bearerToken``, ``basicUsername`` with ``basicPassword``, ``apiKey``)
    and of ``tlsVerify`` with ``caBundle``.

    Not a dataclass itself: each sink's group declares these fields, documented for its
    destination and in the order of its option table.
    """

    basic_username: str | None
    basic_password: str | None
    bearer_token: str | None
    api_key: str | None
    tls_verify: bool
    ca_bundle: str | None

    def _check_credentials(self, kinds: Sequence[str], *, username_refuses: str = ":") -> None:
        """At most one kind of credentials (``kinds``: field names, in the order the
        messages name them), a password only with a user name, and a user name without
        any of the characters ``username_refuses``.

        Raises:
            OptionError: naming the option, never showing a secret.
        """
        given = [spark_name(kind) for kind in kinds if getattr(self, kind) is not None]
        if len(given) > 1:
            described = [_CREDENTIAL_KINDS[kind] for kind in kinds]
            listed = ", ".join(described[:-1]) + ", or " + described[-1]
            raise OptionError(
                given[1],
                None,
                "one kind of authentication",
                message=f"options {given[0]!r} and {given[1]!r} contradict each other: "
                f"set one kind of authentication ({listed})",
            )
        if self.basic_password is not None and self.basic_username is None:
            raise OptionError(
                "basicUsername",
                None,
                "a user name",
                message="option 'basicPassword' needs 'basicUsername' as well",
            )
        username = self.basic_username
        if username is not None and any(ch in username for ch in username_refuses):
            raise OptionError("basicUsername", username, "a user name without ':'")

    def _check_secret_values(self, sent_as_is: Iterable[str] = ()) -> None:
        """Every secret option given is a non-empty string without line breaks, and those
        named in ``sent_as_is`` (field names: sent in a header as they are, not encoded)
        are printable ASCII, as header values must be.

        Raises:
            OptionError: naming the option and the rule, never showing the value.
        """
        as_is = set(sent_as_is)
        for spec in option_specs(type(self)):
            value = getattr(self, spec.name)
            if not spec.secret or value is None:
                continue
            if not isinstance(value, str) or not value or _has_control(value):
                raise OptionError(
                    spec.spark_name, "<hidden>", "a non-empty string without line breaks"
                )
            if spec.name in as_is and not is_header_text(value):
                raise OptionError(
                    spec.spark_name,
                    "<hidden>",
                    "printable ASCII characters (it is sent as a header value)",
                )

    def _check_tls(self) -> None:
        """``caBundle`` only with ``tlsVerify``.

        Raises:
            OptionError: both ``caBundle`` and ``tlsVerify=false`` are set.
        """
        if self.ca_bundle is not None and not self.tls_verify:
            raise OptionError(
                "caBundle",
                self.ca_bundle,
                "no caBundle when tlsVerify is false",
                message="options 'caBundle' and 'tlsVerify=false' contradict each other: "
                "certificates are either verified against the bundle or not at all",
            )

    def basic_authorization(self) -> str:
        """The ``Authorization`` value of basic authentication with these options."""
        pair = f"{self.basic_username}:{self.basic_password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


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


def _has_control(text: str) -> bool:
    return any(ch in text for ch in _CONTROL_CHARS)


def is_header_text(text: str) -> bool:
    """Whether ``text`` can be sent as a header value: printable ASCII (and tabs)."""
    return all(" " <= ch <= "~" or ch == "\t" for ch in text)


def check_http_url(name: str, url: object) -> httpx.URL:
    """``url`` parsed, if it is an http:// or https:// URL with a host, a port from 1 to
    65535 (when given), and no ``@`` after its credentials: an ``@`` elsewhere is
    percent-encoded (``%40``), so that credentials holding a ``/``, ``?`` or ``#`` are
    never read as a host and a path.

    Raises:
        OptionError: naming option ``name`` and the rule; the URL is shown masked.
    """
    shown = url if isinstance(url, str) else f"<{type(url).__name__}>"
    try:
        parsed = httpx.URL(url) if isinstance(url, str) else None
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise OptionError(name, shown, "an http:// or https:// URL with a host")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise OptionError(name, shown, "a URL whose port is from 1 to 65535")
    after_credentials = parsed.raw_path + parsed.fragment.encode()
    if b"@" in after_credentials or "@" in parsed.host:
        raise OptionError(
            name,
            shown,
            "a URL whose user name and password, if any, are percent-encoded (an '@' "
            "outside them is written %40)",
        )
    return parsed
