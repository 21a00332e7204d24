"""Options of the HTTP sink: where batches go, how they are encoded, authenticated and
judged.

``HttpOptions`` is built from Python keywords or, together with the writer's
``SinkOptions``, from one mapping of Spark string options (``create_writer``). Credentials
(``bearerToken``, ``basicPassword``, ``apiKey``) are secrets: masked in ``repr``, never
shown in errors or logs, and redacted from response excerpts. Header values are masked in
``repr`` too, since they often carry credentials of their own; so are the URLs' query
values, and those whose names look sensitive (``token``, ``key``, ``secret``...) are
redacted from excerpts and logs as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, unquote_plus

import httpx
import orjson

from asyncsink.encoding.options import JsonOptions
from asyncsink.errors import OptionError
from asyncsink.options import OptionSpec, option, spark_name
from asyncsink.request import SubmitResult

from ..web.oauth2 import ClientCredentials
from ..web.options import (
    ClientCertOptions,
    ClientOptions,
    SigningOptions,
    check_http_url,
    is_header_text,
)
from .statuses import StatusRules

__all__ = ["BodyEncoder", "EntryEncoder", "HttpOptions", "ResponseParser"]

BodyEncoder = Callable[[Sequence[bytes]], bytes]
"""Builds a request body from the encoded entries of one request, in order."""

EntryEncoder = Callable[[Any], bytes]
"""Turns one written element into its entry bytes (instead of the JSON encoding)."""

ResponseParser = Callable[[httpx.Response, Sequence[bytes]], SubmitResult | None]
"""Judges a 2xx response to a request carrying the given entries: a ``SubmitResult`` naming
the entries to retry or reject, or ``None`` to fall back to the built-in parsing."""

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_SENSITIVE_HEADER = re.compile(r"auth|cookie|key|token|secret|passw|signature|credential", re.I)
_FORMATS = ("json", "ndjson")


@dataclass(frozen=True, kw_only=True, repr=False)
class HttpOptions(ClientOptions, SigningOptions, ClientCertOptions, JsonOptions):
    """Where the HTTP sink sends batches and how each request is made and judged.

    Raises:
        OptionError: a value is not allowed or two options contradict each other; the
            message names the option, and never shows a secret or a header value.
    """

    url: str = option(
        doc="Endpoint every batch is sent to, http:// or https://. Required. Credentials in "
        "the URL (https://user:pass@host/) are moved to basic authentication.",
    )
    method: Literal["post", "put"] = option("post", doc="HTTP method: POST or PUT.")
    headers: Mapping[str, str] | str | None = option(
        None,
        kind="object",
        doc='Extra request headers: a JSON object (\'{"X-Team": "data"}\') or '
        "'name1:value1,name2:value2'; from Python, a mapping. The sink's own headers "
        "(authentication, idempotency key, content encoding) take precedence.",
    )
    bearer_token: str | None = option(
        None, secret=True, doc="Sends 'Authorization: Bearer <token>'. Never shown."
    )
    basic_username: str | None = option(
        None, doc="User name for basic authentication (with basicPassword)."
    )
    basic_password: str | None = option(
        None, secret=True, doc="Password for basic authentication. Never shown."
    )
    api_key: str | None = option(
        None, secret=True, doc="API key sent in the header apiKeyHeader. Never shown."
    )
    api_key_header: str = option("X-API-Key", doc="Header that carries apiKey.")
    oauth2_token_url: str | None = option(
        None,
        doc="Token endpoint of OAuth2 client credentials: each executor fetches a token "
        "there, shares it among its writers and renews it before it expires. See "
        "[Authentication](../authentication.md#oauth2-client-credentials).",
    )
    oauth2_client_id: str | None = option(
        None, doc="OAuth2 client id; required with oauth2TokenUrl."
    )
    oauth2_client_secret: str | None = option(
        None, secret=True, doc="OAuth2 client secret; required with oauth2TokenUrl. Never shown."
    )
    oauth2_scope: str | None = option(None, doc="Space-separated scopes asked for with each token.")
    oauth2_audience: str | None = option(
        None, doc="Audience asked for with each token (Auth0, Okta and others want one)."
    )
    oauth2_client_auth: Literal["basic", "post"] = option(
        "basic",
        doc="How the client authenticates to the token endpoint: 'basic' (an Authorization "
        "header) or 'post' (client_id and client_secret in the form).",
    )
    body_format: str | BodyEncoder = option(
        "json",
        kind="object",
        doc="Request body: 'json' (a JSON array of the entries) or 'ndjson' (one entry per "
        "line, each line ending in a newline); from Python, a callable that builds the body "
        "from the list of encoded entries.",
    )
    content_type: str | None = option(
        None,
        doc="Content-Type of request bodies; defaults to application/json for 'json', "
        "application/x-ndjson for 'ndjson' and application/octet-stream for a callable.",
    )
    entry_encoder: EntryEncoder | None = option(
        None,
        kind="object",
        doc="From Python only: a callable turning each written element into its bytes, "
        "replacing the JSON encoding (the JSON contract: rows as objects, timestamps in "
        "RFC 3339 with their offset, binary as base64).",
    )
    gzip: bool = option(
        False,
        doc="Compress request bodies with gzip (Content-Encoding: gzip). Batch size limits "
        "apply to the uncompressed entries.",
    )
    gzip_level: int = option(6, minimum=0, maximum=9, doc="gzip compression level, 0 (none) to 9.")
    tls_verify: bool = option(
        True, doc="Verify the server's TLS certificate. Turn off only for tests."
    )
    ca_bundle: str | None = option(
        None,
        doc="Path to a PEM file of CA certificates to verify the server with, instead of the "
        "system's. The path is read where the writer runs (on the executors).",
    )
    connect_timeout_ms: int = option(
        10_000, kind="duration", minimum=1, doc="Longest wait to open a connection."
    )
    read_timeout_ms: int = option(
        60_000,
        kind="duration",
        minimum=1,
        doc="Longest wait for the next bytes of a response (and to send a request's). The "
        "whole request is bounded by requestTimeoutMs as well.",
    )
    http2: bool = option(
        False,
        doc="Offer HTTP/2 (needs the h2 package: pip install asyncsink[http2]). Negotiated "
        "over TLS; plain http:// URLs keep HTTP/1.1. Requests then go through httpx's own "
        "HTTP stack instead of aiohttp's, at a higher CPU cost per request.",
    )
    idempotency_header: str = option(
        "Idempotency-Key",
        doc="Header carrying each request's idempotency key, identical on every re-send of "
        "the same call; an empty value sends none.",
    )
    parse_partial_failures: bool = option(
        True,
        doc="Read per-entry outcomes from 2xx responses shaped like Elasticsearch bulk "
        "answers. Retryable items are sent again; other 4xx items are bad records. See "
        "[Partial failures](#partial-failures).",
    )
    parse_response: ResponseParser | None = option(
        None,
        kind="object",
        doc="From Python only: a callable (response, entries) -> SubmitResult or None that "
        "judges 2xx responses before the built-in parsing. None falls back to it. See "
        "[Custom responses](#custom-responses).",
    )
    success_status_codes: str | None = option(
        None,
        kind="str",
        doc="Statuses that mean delivered, for whole answers and items: codes and ranges, "
        "like '200-299,409'. Default 200-299. See [Status codes](#status-codes).",
    )
    retry_status_codes: str | None = option(
        None,
        kind="str",
        doc="Statuses sent again after a backoff, for whole answers and items. Default "
        "408,409,425,429,500-599, less the codes the other two options name.",
    )
    bad_record_status_codes: str | None = option(
        None,
        kind="str",
        doc="Statuses that make the entry (for a whole answer, every entry of the request) a "
        "bad record. Default none: another status fails a whole answer.",
    )
    reconcile_url: str | None = option(
        None,
        doc="URL template of the endpoint's idempotency status resource, with {key} for the "
        "key. A call an earlier attempt left unfinished is then settled by asking it. "
        "See [Settling calls](#settling-calls).",
    )

    def __post_init__(self) -> None:
        self._normalise()
        JsonOptions.__post_init__(self)
        check_http_url("url", self.url)
        self._check_auth()
        self._check_formats()
        self._check_tls()
        if self.idempotency_header and not _TOKEN.match(self.idempotency_header):
            raise OptionError("idempotencyHeader", self.idempotency_header, "a header name")
        if self.reconcile_url is not None:
            if "{key}" not in self.reconcile_url:
                raise OptionError(
                    "reconcileUrl", self.reconcile_url, "a URL template containing {key}"
                )
            check_http_url("reconcileUrl", self.reconcile_url.replace("{key}", "key"))
        self._set(
            "_status_rules",
            StatusRules.from_options(
                self.success_status_codes, self.retry_status_codes, self.bad_record_status_codes
            ),
        )
        if self.parse_response is not None and not callable(self.parse_response):
            raise OptionError(
                "parseResponse", self.parse_response, "a callable (response, entries)"
            )

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _normalise(self) -> None:
        if isinstance(self.method, str):
            self._set("method", self.method.strip().lower())
        if isinstance(self.body_format, str):
            self._set("body_format", self.body_format.strip().lower())
        self._set("headers", _parse_headers(self.headers))
        if isinstance(self.url, str):
            url = self.url.strip()
            try:
                parsed = httpx.URL(url)
            except (httpx.InvalidURL, TypeError):
                parsed = None
            if parsed is not None and (parsed.username or parsed.password):
                if self.basic_username is not None or self.basic_password is not None:
                    raise OptionError(
                        "url",
                        "<not shown>",
                        "a URL without credentials when basicUsername is set",
                        message="option 'url' holds credentials and 'basicUsername' is set "
                        "too: give the credentials once",
                    )
                self._set("basic_username", unquote(parsed.username))
                self._set("basic_password", unquote(parsed.password))
                url = str(parsed.copy_with(username=None, password=None))
            self._set("url", url)

    def _check_auth(self) -> None:
        self._check_credentials(
            ("bearer_token", "basic_username", "api_key", "aws_service", "oauth2_token_url")
        )
        if self.api_key is not None and not _TOKEN.match(self.api_key_header):
            raise OptionError("apiKeyHeader", self.api_key_header, "a header name")
        self._check_secret_values(sent_as_is=("bearer_token", "api_key"))
        self._check_signing()
        self._check_oauth2()
        self._check_client_cert()

    def _check_oauth2(self) -> None:
        if self.oauth2_token_url is None:
            for name in ("oauth2_client_id", "oauth2_client_secret", "oauth2_scope",
                         "oauth2_audience"):  # fmt: skip
                if getattr(self, name) is not None:
                    raise OptionError(
                        spark_name(name),
                        None,
                        "oauth2TokenUrl with it",
                        message=f"option {spark_name(name)!r} needs 'oauth2TokenUrl'",
                    )
            return
        check_http_url("oauth2TokenUrl", self.oauth2_token_url)
        for name in ("oauth2_client_id", "oauth2_client_secret"):
            if not getattr(self, name):
                raise OptionError(
                    spark_name(name),
                    None,
                    "a non-empty string",
                    message=f"option {spark_name(name)!r} is required with 'oauth2TokenUrl'",
                )
        for name in ("oauth2_client_id", "oauth2_scope", "oauth2_audience"):
            value = getattr(self, name)
            if value is not None and (not value.strip() or not is_header_text(value)):
                raise OptionError(
                    spark_name(name), value, "a non-empty string of printable ASCII characters"
                )

    def oauth2_client(self) -> ClientCredentials | None:
        """The OAuth2 client these options name, or ``None`` without ``oauth2TokenUrl``."""
        if self.oauth2_token_url is None:
            return None
        return ClientCredentials(
            token_url=self.oauth2_token_url,
            client_id=self.oauth2_client_id or "",
            client_secret=self.oauth2_client_secret or "",
            scope=self.oauth2_scope,
            audience=self.oauth2_audience,
            client_auth=self.oauth2_client_auth,
        )

    def _check_formats(self) -> None:
        fmt = self.body_format
        if not (fmt in _FORMATS or callable(fmt)):
            raise OptionError("bodyFormat", fmt, "json, ndjson or (from Python) a callable")
        if self.entry_encoder is not None and not callable(self.entry_encoder):
            raise OptionError("entryEncoder", self.entry_encoder, "a callable (element) -> bytes")
        if self.content_type is not None and (
            not self.content_type.strip() or not is_header_text(self.content_type)
        ):
            raise OptionError("contentType", self.content_type, "a media type in ASCII")

    @property
    def status_rules(self) -> StatusRules:
        """What each answer status means (``successStatusCodes`` and the others)."""
        rules: StatusRules = self.__dict__["_status_rules"]
        return rules

    @property
    def takes_mappings(self) -> bool:
        """Whether rows may reach the writer as dicts of their fields: not for a user's
        ``entryEncoder``, which may expect a ``Row``."""
        return self.entry_encoder is None

    @property
    def header_map(self) -> Mapping[str, str]:
        """The extra request headers, parsed."""
        headers = self.headers
        assert isinstance(headers, Mapping)  # parsed in __post_init__
        return headers

    @property
    def body_content_type(self) -> str:
        """The Content-Type of request bodies."""
        if self.content_type:
            return self.content_type
        if self.body_format == "json":
            return "application/json"
        if self.body_format == "ndjson":
            return "application/x-ndjson"
        return "application/octet-stream"

    def auth_headers(self) -> dict[str, str]:
        """The authentication header(s) these options call for."""
        if self.bearer_token is not None:
            return {"Authorization": f"Bearer {self.bearer_token}"}
        if self.basic_username is not None:
            return {"Authorization": self.basic_authorization()}
        if self.api_key is not None:
            return {self.api_key_header: self.api_key}
        return {}

    def secrets(self) -> list[str]:
        """Every value to keep out of logs, errors and excerpts: the credentials, the
        Authorization value built from them, the values of sensitive-looking headers, and
        those of sensitive-looking query parameters of ``url`` and ``reconcileUrl``
        (``?token=...``, ``&api_key=...``; as written and decoded)."""
        values = [self.bearer_token, self.basic_password, self.api_key]
        values += [self.oauth2_client_secret, self.client_key_password, *self.aws_secrets]
        client = self.oauth2_client()
        if client is not None:
            values.append(client.form()[1].get("authorization"))
        values.extend(self.auth_headers().values())
        headers = self.header_map
        values.extend(v for k, v in headers.items() if _SENSITIVE_HEADER.search(k))
        for url in (self.url, self.reconcile_url or "", self.oauth2_token_url or ""):
            query = url.partition("#")[0].partition("?")[2]
            for item in query.split("&"):
                name, _, value = item.partition("=")
                if value and _SENSITIVE_HEADER.search(unquote_plus(name)):
                    values += [value, unquote_plus(value)]
        return [v for v in values if v]

    def _shown(self, spec: OptionSpec) -> str:
        if spec.name == "headers" and self.headers:
            return repr(dict.fromkeys(self.headers, "***"))
        return super()._shown(spec)


def _parse_headers(raw: Mapping[str, str] | str | None) -> dict[str, str]:
    """Headers from a mapping, a JSON object or 'k1:v1,k2:v2' (values never shown)."""
    allowed = "a JSON object of strings or 'name1:value1,name2:value2'"
    if raw is None:
        return {}
    pairs: list[tuple[Any, Any]]
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}
        if text.startswith("{"):
            try:
                loaded = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise OptionError("headers", "<not shown>", allowed) from None
            if not isinstance(loaded, dict):
                raise OptionError("headers", "<not shown>", allowed)
            pairs = list(loaded.items())
        else:
            pairs = []
            for part in text.split(","):
                name, sep, value = part.partition(":")
                if not sep:
                    raise OptionError("headers", "<not shown>", allowed)
                pairs.append((name.strip(), value.strip()))
    elif isinstance(raw, Mapping):
        pairs = list(raw.items())
    else:
        raise OptionError("headers", f"<{type(raw).__name__}>", allowed)
    headers: dict[str, str] = {}
    for name, value in pairs:
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise OptionError("headers", repr(name), "header names made of token characters")
        if not isinstance(value, str) or not is_header_text(value):
            raise OptionError(
                "headers",
                f"<value of {name}>",
                "string header values of printable ASCII characters (no line breaks)",
            )
        headers[name] = value
    return headers
