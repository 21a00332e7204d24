"""The clients (transports, see ``asyncsink.sinks.web.transport``) of the sinks that talk
HTTP: how one is opened, and those their writers share, one per event loop and
configuration (see ``asyncsink.clients.per_loop``).

A writer given neither a client nor a transport uses its loop's shared client for its
``ClientSettings``: everything that shapes a client (the origins its requests go to, the
TLS verification and CA bundle, the pool's size, HTTP/2). Timeouts are not part of it:
every request carries its writer's own. So the writers of the partitions a Spark worker
runs one after the other on its loop reuse the connections (TCP, TLS) the previous ones
kept alive, and the loop's end, or ``close_clients()``, closes them.

A shared client keeps no cookies: one writer's session must not ride on another's requests.
"""

from __future__ import annotations

import functools
import http.cookiejar
import logging
import ssl
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import httpx

from asyncsink.clients import connections as pooled
from asyncsink.clients import per_loop
from asyncsink.errors import OptionError

from .aiohttp_transport import AiohttpTransport
from .httpx_transport import HttpxTransport
from .transport import Transport

__all__ = [
    "ClientCertificate",
    "ClientSettings",
    "check_client_certificate",
    "close_clients",
    "get_transport",
    "open_client_count",
    "open_transport",
    "tls_context",
]

log = logging.getLogger("asyncsink.http")

_KIND = "HTTP"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientCertificate:
    """The certificate a client presents in mutual TLS (``clientCert``, ``clientKey``,
    ``clientKeyPassword``): paths read where the writer runs. ``repr`` hides the password."""

    cert: str
    key: str | None = None
    password: str | None = field(default=None, repr=False)

    def load_into(self, context: ssl.SSLContext) -> None:
        """Load the certificate and its key into ``context``.

        Raises:
            OSError, ssl.SSLError: a file cannot be read, the key does not match the
                certificate, or the password does not open the key.
        """
        # Never None: OpenSSL would prompt on the terminal for an encrypted key's password.
        password = self.password if self.password is not None else _no_password
        context.load_cert_chain(self.cert, self.key, password)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """What shapes a writer's client; writers with equal settings share one. Timeouts
    do not: every request carries its writer's own."""

    origins: tuple[str, ...]
    tls_verify: bool
    ca_bundle: str | None
    connections: int
    http2: bool = False
    client_cert: ClientCertificate | None = None

    @classmethod
    def for_urls(cls, urls: Iterable[str], **settings: object) -> ClientSettings:
        """Settings for requests to ``urls`` (only their origins count: scheme, host and
        port, never the credentials a URL may hold); ``settings``: the other fields."""
        return cls(origins=_origins(urls), **settings)  # type: ignore[arg-type]


async def get_transport(settings: ClientSettings) -> Transport:
    """The running event loop's shared transport for ``settings``, opened on first use.

    The transport is shared: do not close it; the loop's end or ``close_clients`` does.

    Raises:
        RuntimeError: not running on an asyncio event loop.
        OptionError: ``caBundle`` is not a readable PEM file of CA certificates.
        ImportError: ``http2`` without the h2 package (with an install hint).
    """
    opener = functools.partial(_open_shared, settings)
    transport: Transport = await per_loop.shared_client(_KIND, settings, opener)
    return transport


async def close_clients() -> None:
    """Close the running event loop's shared HTTP clients, those of the HTTP and the
    Elasticsearch sinks (no writer may be using them).

    Loops ended by ``asyncio.run``/``anyio.run`` close their clients themselves; call this
    before closing a loop you manage by hand, or to drop connections early.
    """
    await per_loop.close_clients(_KIND)


def open_client_count() -> int:
    """How many shared HTTP clients this process holds open, over all event loops."""
    return per_loop.open_client_count(_KIND)


async def _open_shared(settings: ClientSettings, stack: AsyncExitStack) -> Transport:
    transport = open_transport(settings, cookies=_NoCookies())
    stack.push_async_callback(transport.aclose)
    log.debug("opened a shared HTTP client: %r", settings)
    return transport


def open_transport(
    settings: ClientSettings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    cookies: http.cookiejar.CookieJar | None = None,
) -> Transport:
    """A transport for ``settings`` (closed by its ``aclose``): a pool of ``connections``
    connections, no redirects followed, and certificates verified (against ``ca_bundle``
    if given) when ``tls_verify`` is on and any origin is https. HTTP/1.1 goes through
    aiohttp (``AiohttpTransport``); ``http2``, or an httpx ``transport`` to send through,
    through an ``httpx.AsyncClient`` (``HttpxTransport``) with the cookie jar ``cookies``.

    Raises:
        OptionError: ``caBundle`` is not a readable PEM file of CA certificates.
        ImportError: ``http2`` without the h2 package (with an install hint).
    """
    verify: ssl.SSLContext | bool = False
    http2, connections = settings.http2, settings.connections
    secure = any(url.startswith("https:") for url in settings.origins)
    if settings.tls_verify and secure:
        try:
            verify = tls_context(settings.ca_bundle, http2, settings.client_cert)
        except (OSError, ssl.SSLError) as exc:
            if settings.client_cert is not None:
                check_client_certificate(settings.client_cert)
            raise OptionError(
                "caBundle",
                settings.ca_bundle,
                f"a readable PEM file of CA certificates ({exc})",
            ) from exc
    elif settings.client_cert is not None and secure:
        check_client_certificate(settings.client_cert)
        verify = unverified_context(http2, settings.client_cert)
    if transport is None and not http2:
        return AiohttpTransport(connections=connections, verify=verify)
    try:
        client = httpx.AsyncClient(
            http2=http2,
            verify=verify,
            limits=httpx.Limits(
                max_connections=connections,
                max_keepalive_connections=connections,
                keepalive_expiry=pooled.IDLE_CONNECTION_S,
            ),
            transport=transport,
            follow_redirects=False,
            trust_env=transport is None,  # a transport given by the caller decides alone
            cookies=cookies,
        )
    except ImportError as exc:
        raise ImportError(
            f"option 'http2' needs the h2 package: pip install asyncsink[http2] ({exc})"
        ) from exc
    return HttpxTransport(client, owned=True)


@functools.lru_cache(maxsize=16)
def tls_context(
    ca_bundle: str | None, http2: bool, client_cert: ClientCertificate | None = None
) -> ssl.SSLContext:
    """A verifying TLS context, shared by the writers of a process: loading the CA
    certificates takes a tenth of a second or more, too long to repeat for every writer.
    Keyed by ``http2`` too, since the connection pool sets its ALPN protocols on it, and
    by the client certificate it presents (mutual TLS), if any.

    Raises:
        OSError, ssl.SSLError: ``ca_bundle`` cannot be read or holds no certificate, or
            the client certificate cannot be loaded.
    """
    if ca_bundle is None:
        context = httpx.create_ssl_context()
    else:
        context = ssl.create_default_context(cafile=ca_bundle)
    if client_cert is not None:
        client_cert.load_into(context)
    return context


@functools.lru_cache(maxsize=16)
def unverified_context(http2: bool, client_cert: ClientCertificate) -> ssl.SSLContext:
    """A TLS context that presents ``client_cert`` and verifies nothing (``tlsVerify``
    off, for tests).

    Raises:
        OSError, ssl.SSLError: the client certificate cannot be loaded.
    """
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    client_cert.load_into(context)
    return context


@functools.lru_cache(maxsize=16)
def check_client_certificate(client_cert: ClientCertificate) -> None:
    """The certificate and key load (``clientCert``, ``clientKey``, ``clientKeyPassword``).

    Raises:
        OptionError: naming the option at fault, never showing the password.
    """
    for name, path in (("clientCert", client_cert.cert), ("clientKey", client_cert.key)):
        if path is not None:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise OptionError(name, path, f"a readable PEM file ({exc.strerror})") from exc
    try:
        client_cert.load_into(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    except ssl.SSLError as exc:
        named = "clientKeyPassword" if client_cert.password is not None else "clientKey"
        raise OptionError(
            named,
            "<hidden>" if named == "clientKeyPassword" else client_cert.key,
            "a PEM certificate (clientCert) with its private key (clientKey, or in the "
            f"same file), and the password that opens the key if it is encrypted ({exc})",
        ) from exc


def _origins(urls: Iterable[str]) -> tuple[str, ...]:
    found = set()
    for url in urls:
        if url:
            parsed = httpx.URL(url)
            found.add(f"{parsed.scheme}://{parsed.host}:{parsed.port or ''}")
    return tuple(sorted(found))


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing."""

    def __init__(self) -> None:
        super().__init__(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


def _no_password() -> bytes:
    return b""
