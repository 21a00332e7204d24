"""``HttpWriter``: batches of rows POSTed (or PUT) to any HTTP endpoint, sent through aiohttp
(a client you pass in, a mocked one and ``http2=true`` through httpx), the same code above
either transport."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, cast
from urllib.parse import quote

import httpx
import orjson

from asyncsink.encoding import JsonEntryEncoder
from asyncsink.entries.packed import PackedEntries
from asyncsink.request import CallInfo, SubmitResult, as_result, current_call
from asyncsink.writer.sink_contract import Reconcile

from ..registry import SinkEntry
from ..web.classify import error_for_transport, parse_retry_after, request_of
from ..web.clients import ClientSettings
from ..web.oauth2 import OAuth2
from ..web.transport import Timeout, Transport
from ..web.writer import HttpClientWriter, gzip_compress
from .classify import error_for_status, held_by_status, parse_items, rejected_whole
from .encoding import frame_json, frame_ndjson
from .options import BodyEncoder, EntryEncoder, HttpOptions

__all__ = ["HttpWriter", "create_writer"]

log = logging.getLogger("asyncsink.http")


class HttpWriter(HttpClientWriter[Any, bytes]):
    """Delivers rows to an HTTP endpoint: each request carries a batch of entries as a
    JSON array (or NDJSON, or a body of the user's making).

    Every element is encoded once, when written (see ``asyncsink.sinks.http.encoding``), and a
    request's body is its entries joined. Each request carries the call's idempotency key
    (``Idempotency-Key`` by default), the same on every re-send of that call, so an
    endpoint that honours the header drops the duplicates that retries after timeouts and
    lost responses would otherwise create. Answers are judged by status and, on 2xx, by
    per-entry items (see ``asyncsink.sinks.http.classify``): only failed entries are re-sent, and
    entries the endpoint refuses are bad records.

    Every request goes through one transport (see ``asyncsink.sinks.web.transport``): the
    event loop's shared one for the writer's settings (its pool holds
    ``maxInFlightRequests`` connections), or the one its ``client`` or ``transport``
    arguments give (see ``HttpClientWriter``); a given client gets the writer's headers
    and timeouts on each request and is left open. While open, the writer keeps its
    credentials out of the log records of httpx, httpcore, hpack, aiohttp and asyncsink
    (see ``asyncsink.sinks.web.writer``).

    Args:
        http: where and how to send.
        client: an ``httpx.AsyncClient`` to use instead of opening one; not closed here.
        transport: an httpx transport for the client the writer opens (tests, proxies),
            or a ``Transport`` to send through (see ``asyncsink.sinks.web.transport``).
        **kwargs: ``options``, ``call_log`` and the rest of ``AsyncSinkWriter``'s arguments.
    """

    sink_name = "http"
    reconciliation = Reconcile.BY_CALL  # asks reconcileUrl, when set
    takes_mappings = True  # unless a user's entryEncoder is given (HttpOptions says)

    logger_names: ClassVar[tuple[str, ...]] = (log.name,)

    def __init__(
        self,
        http: HttpOptions,
        *,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | Transport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(secrets=http.secrets(), client=client, transport=transport, **kwargs)
        self.http = http
        self._json = JsonEntryEncoder(http.contract)
        encoder: EntryEncoder = http.entry_encoder or self._json
        self._encode = encoder
        self._custom_encoder = http.entry_encoder is not None
        self.takes_mappings = http.takes_mappings
        fmt = http.body_format
        self._frame: BodyEncoder = (
            fmt if callable(fmt) else frame_ndjson if fmt == "ndjson" else frame_json
        )
        self._frame_packed = not callable(fmt)  # a body encoder of the user's gets a list
        self._method = http.method.upper()
        self._url = http.url
        self._gzip_level = http.gzip_level if http.gzip else None
        self._parse_response = http.parse_response
        self._partial_failures = http.parse_partial_failures
        self._rules = http.status_rules
        # Names in lower case, so that the sink's own headers replace the user's of any
        # spelling instead of being sent twice.
        extra = {name.lower(): value for name, value in http.header_map.items()}
        auth = {name.lower(): value for name, value in http.auth_headers().items()}
        self._status_headers = {**extra, **auth}
        headers = {"content-type": http.body_content_type, **extra, **auth}
        if http.gzip:
            headers["content-encoding"] = "gzip"
        self._headers = headers
        self._key_header = http.idempotency_header.lower()
        url = httpx.URL(http.url)
        self._where = self._redact(
            f"{self._method} {url.scheme}://{url.netloc.decode('ascii')}{url.path}"
        )
        read = http.read_timeout_ms / 1000
        self._request_timeout = self.options.request_timeout_ms / 1000
        self._timeouts = Timeout(connect=http.connect_timeout_ms / 1000, read=read)
        client_credentials = http.oauth2_client()
        if client_credentials is not None:
            self._auth = OAuth2(client_credentials, timeout=self._timeouts, redact=self._redact)
        else:
            self._auth = http.signer(self._redact)
        self._hints = self._auth.hints() if self._auth is not None else None

    # ------------------------------------------------------------------ the contract

    def convert(self, element: Any) -> bytes:
        """The element's entry bytes (JSON unless an ``entryEncoder`` is set).

        Raises:
            EntryEncodingError: a value cannot be encoded; the message names its field.
            TypeError: an ``entryEncoder`` returned something other than bytes.
        """
        data = self._encode(element)
        if self._custom_encoder and not isinstance(data, bytes):
            if isinstance(data, bytearray | memoryview):
                return bytes(data)
            raise TypeError(f"entryEncoder returned {type(data).__name__}, expected bytes")
        return data

    def convert_all(self, elements: Sequence[Any]) -> Sequence[bytes]:
        """``convert`` each element, encoding runs of plain dicts or Spark rows of one
        schema as one JSON array kept packed (unless an ``entryEncoder`` is set)."""
        if self._custom_encoder:
            return super().convert_all(elements)
        return self._json.encode_all(elements)

    def entry_size(self, entry: bytes) -> int:
        """The entry's length in bytes. A JSON body adds ``count + 1`` bytes of brackets
        and commas to the sum, an NDJSON body ``count`` newlines."""
        return len(entry)

    def entry_sizes(self, entries: Sequence[bytes]) -> list[int]:
        """The lengths of a run of entries, at once."""
        if type(entries) is PackedEntries:
            return entries.sizes()
        return list(map(len, entries))

    async def submit_request_entries(self, entries: Sequence[bytes]) -> SubmitResult | None:
        """POST/PUT one batch; the entries to retry or reject come from the answer.

        Raises:
            RetryableError, ThrottledError, FatalError: see ``asyncsink.sinks.http.classify``.
        """
        if not self._frame_packed and type(entries) is not list:
            entries = list(entries)
        body = self._frame(entries)
        size = len(body)
        headers = self._headers
        if self._key_header:
            headers = {**headers, self._key_header: current_call().idempotency_key}
        if self._gzip_level is not None:
            body = await gzip_compress(body, self._gzip_level)
        try:
            # The core gives up on the request after requestTimeoutMs.
            answer = await self._exchange(
                self._method, self._url, headers, body, within=self._request_timeout
            )
        except httpx.HTTPError as exc:
            raise error_for_transport(exc, request_of(exc), self._redact) from exc
        status = answer.status
        rules = self._rules
        if not 200 <= status <= 299 or status not in rules.success:
            if status in rules.success:
                return None  # a success status outside 2xx: every entry delivered
            if rules.bad(status):
                return rejected_whole(answer, len(entries), self._redact)
            raise error_for_status(
                answer, self._redact, body_size=size, hints=self._hints, rules=rules
            )
        hook = self._parse_response
        if hook is not None:
            # The hook names failed entries as the objects it was given.
            listed = entries if type(entries) is list else list(entries)
            result = hook(answer.response(), listed)
            if result is not None:
                return as_result(result, listed)
        if not self._partial_failures or status == 204:
            return None
        return parse_items(
            answer.content,
            len(entries),
            self._redact,
            content_type=answer.headers.get("content-type"),
            what=f"the HTTP {status} answer of {self._where}",
            retry_after=parse_retry_after(answer.headers.get("retry-after")),
            rules=rules,
        )

    async def reconcile(self, call: CallInfo) -> Collection[int] | None:
        """With ``reconcileUrl``: ask the endpoint what it holds of a call an earlier
        attempt left unfinished. A completed key gives the entries its stored answer
        accepted; an unknown key (404) gives none, so they are sent again as new; anything
        else (in flight, an error, no answer) cannot tell, and the call is re-sent as it
        was, with the same key."""
        template = self.http.reconcile_url
        if template is None:
            return None
        url = template.replace("{key}", quote(call.idempotency_key, safe=""))
        try:
            answer = await self._exchange("GET", url, self._status_headers)
        except httpx.HTTPError as exc:
            problem = error_for_transport(exc, None, self._redact)
            log.warning("%s: cannot reconcile call %d: %s", call.scope, call.call_id, problem)
            return None
        if answer.status == 404:
            return ()
        if answer.status != 200:
            problem = error_for_status(answer, self._redact, hints=self._hints)
            log.warning("%s: cannot reconcile call %d: %s", call.scope, call.call_id, problem)
            return None
        try:
            payload = orjson.loads(answer.content)
        except orjson.JSONDecodeError:
            return None
        return held_by_status(payload, call.seqs)

    # ------------------------------------------------------------------ the client

    def _first_url(self) -> str:
        return self.http.url

    def _client_settings(self) -> ClientSettings:
        http = self.http
        return ClientSettings.for_urls(
            (http.url, http.reconcile_url or "", http.oauth2_token_url or ""),
            tls_verify=http.tls_verify,
            ca_bundle=http.ca_bundle,
            connections=self.options.max_in_flight_requests,
            http2=http.http2,
            client_cert=http.client_certificate(),
        )


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> HttpWriter:
    """An ``HttpWriter`` from one mapping of Spark options (string values, names matched
    case-insensitively): the writer's ``SinkOptions`` and the ``HttpOptions``.

    Values may also be Python objects (a ``parseResponse`` or ``bodyFormat`` callable, a
    ``deadLetter`` callable). ``kwargs`` go to ``HttpWriter`` (``call_log``, ``client``,
    ``transport``).

    Raises:
        OptionError: an unknown option (named, with the known ones), a missing ``url``, or
            an invalid value.
    """
    return cast(HttpWriter, SinkEntry("http", HttpWriter, HttpOptions).build(options, **kwargs))
