"""OAuth2 client credentials (RFC 6749 section 4.4) on the requests of the HTTP sink
(``oauth2TokenUrl``, ``oauth2ClientId``, ``oauth2ClientSecret``, ``oauth2Scope``,
``oauth2Audience``, ``oauth2ClientAuth``).

One token per client and process: the writers of an executor share it, whichever event
loop they run on. It is renewed before it expires (once less than a quarter of its
``expires_in``, at most a minute, is left), and at once after a 401, and the request
that got the 401 is sent once more. A token endpoint that refuses the client (400 or 401,
``invalid_client``...) fails the task at once, naming the options to check.

The token request goes through the writer's own transport, so it keeps the sink's TLS
settings (``caBundle``, ``clientCert``), proxy and timeouts.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote, urlencode

import httpx
import orjson

from asyncsink.errors import FatalError, RetryableError

from .auth import Auth
from .classify import error_for_transport, is_retryable_status, request_of
from .redact import Redactor, mask_in_logs
from .transport import Answer, Request, Timeout, Transport

__all__ = ["ClientCredentials", "OAuth2"]

_MAX_MARGIN_S = 60.0
_DEFAULT_LIFE_S = 300.0  # a token without expires_in is renewed after this long
_OPTIONS = "oauth2TokenUrl, oauth2ClientId, oauth2ClientSecret, oauth2ClientAuth"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientCredentials:
    """Which token to ask for, and how the client authenticates. Hashable: equal
    settings share one token per process. ``repr`` hides the secret."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None
    audience: str | None = None
    client_auth: Literal["basic", "post"] = "basic"

    def form(self) -> tuple[bytes, dict[str, str]]:
        """The token request's body and headers."""
        fields = {"grant_type": "client_credentials"}
        headers = {
            "content-type": "application/x-www-form-urlencoded",
            "accept": "application/json",
        }
        if self.client_auth == "post":
            fields |= {"client_id": self.client_id, "client_secret": self.client_secret}
        else:  # RFC 6749 2.3.1: each part form-encoded, then base64
            pair = f"{quote(self.client_id, safe='')}:{quote(self.client_secret, safe='')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        if self.scope:
            fields["scope"] = self.scope
        if self.audience:
            fields["audience"] = self.audience
        return urlencode(fields).encode(), headers


@dataclass(slots=True)
class _Token:
    value: str
    renew_at: float  # monotonic seconds


_TOKENS: dict[ClientCredentials, _Token] = {}
_TOKENS_LOCK = threading.Lock()
_Locks = dict[ClientCredentials, asyncio.Lock]
_FETCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Locks] = weakref.WeakKeyDictionary()


def _fetch_lock(client: ClientCredentials) -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    with _TOKENS_LOCK:
        locks = _FETCHES.setdefault(loop, {})
        return locks.setdefault(client, asyncio.Lock())


class OAuth2(Auth):
    """Puts the process's token for ``client`` on each request (``Authorization: Bearer``).

    Args:
        client: the token endpoint and the client's credentials.
        timeout: the token request's timeouts.
        redact: the writer's redactor, told each new token.
    """

    options = _OPTIONS

    def __init__(
        self,
        client: ClientCredentials,
        *,
        timeout: Timeout,
        redact: Redactor | None = None,
    ) -> None:
        self.client = client
        self._timeout = timeout
        self._redact = redact
        self.fetched = 0  # tokens this writer fetched (tests)
        self._known = ""  # the last token this writer's redactor was told

    def __repr__(self) -> str:
        return f"OAuth2(token_url={self.client.token_url!r}, client_id={self.client.client_id!r})"

    async def authenticate(self, request: Request, transport: Transport) -> Request:
        token = await self._token(transport)
        if token != self._known:  # perhaps fetched by another writer of the process
            self._known = token
            if self._redact is not None:
                self._redact.add([token])
        headers = {**request.headers, "authorization": f"Bearer {token}"}
        return Request(request.method, request.url, headers, request.content, request.timeout)

    async def renew(self, request: Request, answer: Answer, transport: Transport) -> bool:
        sent = request.headers.get("authorization", "").removeprefix("Bearer ")
        with _TOKENS_LOCK:
            held = _TOKENS.get(self.client)
            if held is not None and held.value == sent:
                del _TOKENS[self.client]  # refused early: fetch another
        await self._token(transport)
        return True

    def hints(self) -> Mapping[int, str]:
        return {
            401: "the endpoint refused a token just fetched from oauth2TokenUrl: check "
            "oauth2Scope and oauth2Audience",
            403: "the token is not allowed to write there: check oauth2Scope and oauth2Audience",
        }

    async def _token(self, transport: Transport) -> str:
        held = _TOKENS.get(self.client)
        if held is not None and time.monotonic() < held.renew_at:
            return held.value
        async with _fetch_lock(self.client):
            held = _TOKENS.get(self.client)
            if held is not None and time.monotonic() < held.renew_at:
                return held.value  # another writer of this loop fetched it
            token = await self._fetch(transport)
            with _TOKENS_LOCK:
                _TOKENS[self.client] = token
            return token.value

    async def _fetch(self, transport: Transport) -> _Token:
        client = self.client
        body, headers = client.form()
        request = Request("POST", client.token_url, headers, body, self._timeout)
        started = time.monotonic()
        try:
            answer = await transport.handle_async_request(request)
        except httpx.HTTPError as exc:
            problem = error_for_transport(exc, request_of(exc), self._redact or Redactor(()))
            raise RetryableError(
                f"cannot fetch an OAuth2 token from oauth2TokenUrl: {problem}"
            ) from exc
        token = self._read(answer)
        mask_in_logs([token.value])
        if self._redact is not None:
            self._redact.add([token.value])
        self.fetched += 1
        token.renew_at += started
        return token

    def _read(self, answer: Answer) -> _Token:
        where = f"the token endpoint {answer.where} (option 'oauth2TokenUrl')"
        payload: object = None
        try:
            payload = orjson.loads(answer.content) if answer.content else None
        except orjson.JSONDecodeError:
            payload = None
        fields = payload if isinstance(payload, dict) else {}
        if answer.status != 200:
            redact = self._redact or Redactor(())
            error = redact(str(fields.get("error") or f"HTTP {answer.status}")[:200])
            detail = redact(str(fields.get("error_description") or "")[:200])
            text = f"{where} answered HTTP {answer.status}: {error}"
            text += f" ({detail})" if detail else ""
            if is_retryable_status(answer.status):
                raise RetryableError(text, status=answer.status)
            raise FatalError(
                f"{text}: it refused the client; check {_OPTIONS}", status=answer.status
            )
        value = fields.get("access_token")
        kind = str(fields.get("token_type") or "bearer")
        if not isinstance(value, str) or not value or kind.lower() != "bearer":
            raise FatalError(f"{where} gave no bearer access_token")
        try:
            seconds = float(fields.get("expires_in") or _DEFAULT_LIFE_S)
        except (TypeError, ValueError):
            seconds = _DEFAULT_LIFE_S
        seconds = seconds if seconds > 0 else _DEFAULT_LIFE_S
        return _Token(value, seconds - min(_MAX_MARGIN_S, seconds / 4))
