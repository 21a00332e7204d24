"""An OAuth2 client-credentials token endpoint and a resource endpoint that takes its tokens,
for the HTTP sink's tests, on one local HTTP server in a thread.

``POST /token`` issues ``Bearer`` tokens that live ``life_s`` seconds (``expires_in``) to the
one client it knows, authenticated by HTTP basic (``client_secret_basic``) or in the form
(``client_secret_post``); it refuses any other with 401 ``invalid_client``, as RFC 6749
section 5.2 says. ``POST /ingest`` takes a JSON array of entries with a live token and
answers 401 ``invalid_token`` (with ``WWW-Authenticate``) to an expired, revoked or unknown
one. ``revoke()`` ends every token at once, as an authorization server restarting would;
``revoke_every_s`` does so on a timer, so that requests in flight meet a refused token.
``latency_s`` delays every ingest answer.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

__all__ = ["OAuth2Server"]


@dataclass
class _State:
    client_id: str
    client_secret: str
    life_s: float
    tokens: dict[str, float] = field(default_factory=dict)  # token -> expiry (monotonic)
    issued: int = 0
    refused_clients: int = 0
    unauthorized: int = 0
    forms: list[dict[str, list[str]]] = field(default_factory=list)
    ids: list[Any] = field(default_factory=list)
    latency_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        state: _State = self.server.state  # type: ignore[attr-defined]
        if self.path == "/token":
            self._token(state, body)
        else:
            self._ingest(state, body)

    def _token(self, state: _State, body: bytes) -> None:
        form = parse_qs(body.decode())
        client = (form.get("client_id", [""])[0], form.get("client_secret", [""])[0])
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            pair = base64.b64decode(auth[6:]).decode()
            given_id, _, given_secret = pair.partition(":")
            client = (unquote(given_id), unquote(given_secret))
        with state.lock:
            state.forms.append(form)
            if form.get("grant_type") != ["client_credentials"] or client != (
                state.client_id,
                state.client_secret,
            ):
                state.refused_clients += 1
                self._answer(401, {"error": "invalid_client"})
                return
            token = secrets.token_urlsafe(16)
            state.tokens[token] = time.monotonic() + state.life_s
            state.issued += 1
        self._answer(200, {"access_token": token, "token_type": "Bearer",
                           "expires_in": state.life_s})  # fmt: skip

    def _ingest(self, state: _State, body: bytes) -> None:
        if state.latency_s:
            time.sleep(state.latency_s)
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        with state.lock:
            expiry = state.tokens.get(token)
            if expiry is None or time.monotonic() >= expiry:
                state.unauthorized += 1
                self._answer(401, {"error": "invalid_token"},
                             ("WWW-Authenticate", 'Bearer error="invalid_token"'))  # fmt: skip
                return
            entries = json.loads(body)
            state.ids.extend(entry["id"] for entry in entries)
        self._answer(200, {"errors": False})

    def _answer(self, status: int, payload: Any, *headers: tuple[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class OAuth2Server:
    """The token and resource endpoints on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        life_s: float = 2.0,
        latency_s: float = 0.0,
        revoke_every_s: float | None = None,
    ) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self.state = _State(client_id, client_secret, life_s, latency_s=latency_s)
        self._server.state = self.state  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._revoke_every_s = revoke_every_s
        self._stop = threading.Event()
        self._revoker = threading.Thread(target=self._revoke_on_time, daemon=True)

    def __enter__(self) -> OAuth2Server:
        self._thread.start()
        if self._revoke_every_s:
            self._revoker.start()
        return self

    def _revoke_on_time(self) -> None:
        assert self._revoke_every_s is not None
        while not self._stop.wait(self._revoke_every_s):
            self.revoke()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._revoker.is_alive():
            self._revoker.join(5)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def revoke(self) -> None:
        """End every token issued so far."""
        with self.state.lock:
            self.state.tokens.clear()
