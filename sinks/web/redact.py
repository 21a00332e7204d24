"""Keeping credentials out of error messages, response excerpts and logs.

``Redactor`` replaces every known secret (in its raw, percent-encoded and JSON-escaped
forms) with ``***``. ``mask_in_logs`` lets the HTTP client's own loggers (httpx,
httpcore, hpack, aiohttp), asyncsink's and those a sink names share that protection while a writer
is open: at DEBUG level they log response headers, and hpack logs the request headers of
HTTP/2 connections, which is where a server echoing a credential, or an API-key header,
would otherwise surface.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from urllib.parse import quote

import orjson

__all__ = ["MASK", "Redactor", "mask_in_logs", "unmask_in_logs"]

MASK = "***"

_CLIENT_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "hpack.hpack",
    "hpack.table",
    "aiohttp.client",
    "botocore.auth",
    "asyncsink",
    "asyncsink.durable",
    "asyncsink.spark",
)


def _forms(secret: str) -> set[str]:
    forms = {secret, quote(secret, safe=""), orjson.dumps(secret).decode()[1:-1]}
    return {form for form in forms if form}


class Redactor:
    """Masks a set of secrets in text: those it was made with, and those ``add`` gives it
    later (a token fetched while the writer runs)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._forms: list[str] = []
        self.longest = 0
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Mask ``secrets`` as well from now on."""
        forms = set(self._forms)
        for secret in secrets:
            if secret:
                forms |= _forms(secret)
        self._forms = sorted(forms, key=len, reverse=True)
        self.longest = len(self._forms[0]) if self._forms else 0

    def __bool__(self) -> bool:
        return bool(self._forms)

    def __call__(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        return text

    def excerpt(self, data: bytes, limit: int = 500) -> str:
        """At most ``limit`` characters of a response body, secrets masked first (so that
        no secret is cut in two at the limit and half shown)."""
        text = data[: 4 * (limit + self.longest)].decode("utf-8", errors="replace")
        text = self(text[: limit + self.longest])
        return text if len(text) <= limit else text[:limit] + "..."


class _SecretFilter(logging.Filter):
    """Rewrites a log record whose message holds a registered secret."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._redactor = Redactor(())

    def add(self, secrets: Iterable[str]) -> None:
        with self._lock:
            self._counts.update(secrets)
            self._redactor = Redactor(self._counts)

    def remove(self, secrets: Iterable[str]) -> None:
        with self._lock:
            self._counts.subtract(secrets)
            self._counts = +self._counts
            self._redactor = Redactor(self._counts)

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = self._redactor
        if not redactor:
            return True
        message = record.getMessage()
        masked = redactor(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_text:
            record.exc_text = redactor(record.exc_text)
        return True


_FILTER = _SecretFilter()
_INSTALLED: set[str] = set()
_INSTALL_LOCK = threading.Lock()


def mask_in_logs(secrets: Iterable[str], loggers: Iterable[str] = ()) -> None:
    """From now on, log records of the HTTP client, of asyncsink and of the loggers named
    in ``loggers`` never show ``secrets`` (until ``unmask_in_logs`` is called with the same
    secrets).

    A logger's filters see only the records logged to that very logger, not those its
    children pass up, so a sink names each logger it logs to (``"asyncsink.http"``...).
    The filter is installed once per process on each of those loggers and only rewrites
    records holding a registered secret, whichever writer registered it. Secrets are
    counted, so writers sharing one may open and close in any order.
    """
    values = [s for s in secrets if s]
    if not values:
        return
    with _INSTALL_LOCK:
        for name in (*_CLIENT_LOGGERS, *loggers):
            if name not in _INSTALLED:
                logging.getLogger(name).addFilter(_FILTER)
                _INSTALLED.add(name)
    _FILTER.add(values)


def unmask_in_logs(secrets: Iterable[str]) -> None:
    """Undo one ``mask_in_logs`` of the same secrets."""
    values = [s for s in secrets if s]
    if values:
        _FILTER.remove(values)
