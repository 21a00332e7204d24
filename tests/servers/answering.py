"""An HTTP endpoint that answers each entry with the status the entry asks for.

A request body is a JSON array (or NDJSON) of objects; an entry's ``answer`` field (an
integer) is its item status, 201 without one. The answer is ``{"errors": ..., "items":
[{"status": ...}, ...]}`` with status 200, or, when every entry of the request asks for
one ``whole`` status, that status for the whole request. The server records each entry's
``id`` with the status it got, and the arrival time of each request, for the tests to
count. It listens on 127.0.0.1 only, in a thread of the test process.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import orjson

__all__ = ["AnsweringServer"]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        arrived = time.monotonic()
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        text = body.strip()
        if text.startswith(b"["):
            entries = orjson.loads(text)
        else:
            entries = [orjson.loads(line) for line in text.splitlines() if line.strip()]
        wholes = {entry.get("whole") for entry in entries}
        statuses = [int(entry.get("answer") or 201) for entry in entries]
        with self.server.lock:
            self.server.arrivals.append((arrived, len(entries)))
            whole = next(iter(wholes)) if len(wholes) == 1 else None
            for entry, status in zip(entries, statuses, strict=True):
                self.server.answered.append((entry.get("id"), int(whole or status)))
        if whole:
            payload = b'{"error": "as asked"}'
            self.send_response(int(whole))
        else:
            items = [
                {"status": s} if s < 300 else {"status": s, "error": f"answer {s}"}
                for s in statuses
            ]
            payload = orjson.dumps({"errors": any(s >= 300 for s in statuses), "items": items})
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    lock: threading.Lock
    answered: list[tuple[Any, int]]
    arrivals: list[tuple[float, int]]


class AnsweringServer:
    """``with AnsweringServer() as server``: ``server.url``, ``server.answered`` (entry id,
    status), ``server.arrivals`` (monotonic time, entries) of each request."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.lock = threading.Lock()
        self._server.answered = []
        self._server.arrivals = []
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/ingest"

    @property
    def answered(self) -> list[tuple[Any, int]]:
        with self._server.lock:
            return list(self._server.answered)

    @property
    def arrivals(self) -> list[tuple[float, int]]:
        with self._server.lock:
            return list(self._server.arrivals)

    def ids_with(self, *statuses: int) -> set[Any]:
        return {entry for entry, status in self.answered if status in statuses}

    def __enter__(self) -> AnsweringServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
