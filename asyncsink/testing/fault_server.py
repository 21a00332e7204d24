"""A fault-injecting HTTP endpoint: the destination asyncsink's HTTP tests, Spark tests,
benchmarks and demo deliver to.

``FaultServer`` runs it in a separate process (spawned, so its CPU does not share the
client's GIL, and it works from pytest, Spark workers and the demo alike) or, with
``in_thread=True``, in a background thread. It listens on 127.0.0.1 by default and speaks
HTTP/1.1 with keep-alive. As with any spawned process, a script that starts one in process
mode needs the ``if __name__ == "__main__":`` guard::

    with FaultServer(Faults(throttle_rate=0.1, retry_after_s=0.05, seed=7)) as server:
        httpx.post(server.url + "/ingest", json=[{"id": "a-1", "v": 1}])
        assert server.stats().entries_received == 1

Ingest
------
``POST`` or ``PUT`` to any path outside ``/_control/`` (``/ingest`` by convention).
The body is a JSON array of entries, or NDJSON (one entry a line) when the
``Content-Type`` contains ``ndjson`` or ``jsonl``; ``Content-Encoding: gzip`` is accepted.
Entries are JSON objects. An entry's identity (for the duplicate count and
``applied_ids``) is the value of its ``id_field`` (default ``"id"``), or its canonical JSON
when it has none.

A request that gets through the faults is answered::

    200  {"errors": false, "items": [{"status": 200}, {"status": 200}, ...]}

``items`` is positional: item *i* is the outcome of entry *i*. When some entries were
rejected the status is 200 (or 207, ``Faults.partial_response_status``) and::

    {"errors": true, "items": [{"status": 200},
                               {"status": 503, "error": "injected partial failure"},
                               {"status": 400, "error": "mapping error"}, ...]}

Only items with status 200 were stored; 429/500/503 items may be retried, 400 items are
bad records (an entry that is not an object, or one flagged by ``bad_record_field``).

Whole-request answers, all with a JSON body ``{"error": "..."}``:

- 400 malformed body (not gzip, not JSON, not an array); 415 unknown content encoding;
  405 a method other than POST or PUT;
- 401 with ``WWW-Authenticate`` when ``require_auth`` is set and ``Authorization`` differs;
- 403 (400 for a wrong ``x-amz-content-sha256``) with AWS's ``{"message": "..."}`` when
  ``sigv4`` is set and the request's AWS Signature Version 4 does not verify (see
  ``asyncsink.testing.sigv4``);
- 500 / 502 / 504 (``error_rate``); 429 / 503 with ``Retry-After: <seconds>``, possibly
  fractional (``throttle_rate``); any status from ``fail_statuses``;
- 409 the idempotency key's first request is still in flight; 422 the key was used
  with a different body.

No answer at all: ``timeout_rate`` holds the connection (until the client closes it or
``hang_s``), ``reset_rate`` resets it (TCP RST) after reading the body; their
``*_after_apply`` variants first apply the entries and store the key.

Order of processing: method, authorization, scripted ``fail_statuses``, the random
request-level fault, body decoding, the idempotency check, latency, applying the entries,
then a dropped response for the after-apply faults. Latency (``latency_ms`` plus jitter)
delays every answer. With ``capacity`` set, an ingest request first waits in line for one
of ``capacity`` slots and holds it until its answer is ready: a destination that serves
that many requests at once, where latency grows with every request in flight beyond them.

Idempotency
-----------
A request carrying the idempotency header (``Idempotency-Key`` unless configured; a
structured-field string, quotes optional) is judged by the key and a digest of its
decompressed body: an unknown key is applied and its response stored; the same key and
body again gets the stored response replayed, with ``Idempotent-Replayed: true`` and
without applying anything; a key whose request is still in flight gets 409; a key seen
with a different body gets 422. Keys of requests that failed before being applied are not
stored. At most ``idempotency_capacity`` keys are kept (least recently used go first).

Control (never faulted, never delayed, no authorization)
--------------------------------------------------------
- ``GET /_control/stats``: the ``FaultServerStats`` counters as JSON;
- ``GET /_control/ids``: the identities of the applied entries, in order, duplicates
  included (404 when ``keep_ids=False``);
- ``GET /_control/faults``, ``POST /_control/faults`` (``Faults.to_json()`` body);
- ``POST /_control/reset``: clear counters, ids and keys, re-arm the current faults;
- ``GET /_control/status/<key>`` (key percent-encoded): 200
  ``{"state": "completed", "status": 200, "response": {...the stored body...}}``,
  200 ``{"state": "in_flight"}``, or 404 for an unknown key;
- ``GET /_control/health``: 200 ``{"ok": true}``.

Command line: ``python -m asyncsink.testing.fault_server --port 0 --latency-ms 20`` prints
the base URL and serves until interrupted (``--help`` lists every fault).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import http.client
import multiprocessing
import signal
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any
from urllib.parse import quote

import orjson

from asyncsink.testing.accounting import FaultServerStats
from asyncsink.testing.endpoint import CONTROL_PREFIX, FaultEndpoint, ServerConfig, serve
from asyncsink.testing.faults import Faults
from asyncsink.testing.sigv4 import SigV4Check

__all__ = ["FaultServer", "FaultServerStats", "Faults", "main"]

NO_FAULTS = Faults()
_JOIN_S = 5.0
# stats() settles the duplicate count of every id applied since the last call: allow for
# tens of millions of them.
_CONTROL_TIMEOUT_S = 120.0


class FaultServer:
    """Start, steer and stop a fault-injecting endpoint (see the module docstring).

    ``start()`` returns once the endpoint listens; ``stop()`` always ends it (a process
    that does not stop in time is terminated, then killed), and both are idempotent.
    Control methods (``stats``, ``set_faults``...) are blocking HTTP calls to the endpoint,
    so they work the same across the process boundary (and from another thread of an event
    loop, e.g. ``anyio.to_thread.run_sync(server.stats)``).

    Args:
        faults: the faults in force from the start; ``set_faults`` changes them.
        host, port: where to listen; port 0 picks a free one (read it from ``url``).
        in_thread: serve from a background thread of this process instead of a spawned
            process: cheaper to start, but the endpoint's CPU shares this process's GIL.
        id_field: the entry field that identifies an entry for the duplicate count.
        require_auth: the exact ``Authorization`` value ingest requests must carry
            (``"Bearer s3cret"``, ``"Basic ..."``); ``None`` accepts any request.
        idempotency_header: the header carrying idempotency keys.
        idempotency_capacity: how many keys are remembered (least recently used go).
        keep_ids: keep every applied identity for ``applied_ids()`` (this also keeps the
            duplicate count off the request path: it is settled when ``stats()`` asks).
            Off, only distinct identities are kept, which bounds memory in long runs.
        start_timeout_s: how long ``start()`` waits for the endpoint to listen.

    Raises:
        ValueError: a setting is out of range (at construction).
        RuntimeError: from ``start()`` when the endpoint does not come up in
            ``start_timeout_s``, or from a control method when it is not running.
    """

    def __init__(
        self,
        faults: Faults = NO_FAULTS,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        in_thread: bool = False,
        id_field: str = "id",
        require_auth: str | None = None,
        sigv4: SigV4Check | None = None,
        idempotency_header: str = "Idempotency-Key",
        idempotency_capacity: int = 1_000_000,
        keep_ids: bool = True,
        start_timeout_s: float = 30.0,
    ) -> None:
        self._config = ServerConfig(
            host=host,
            port=port,
            faults=faults,
            id_field=id_field,
            require_auth=require_auth,
            sigv4=sigv4,
            idempotency_header=idempotency_header,
            idempotency_capacity=idempotency_capacity,
            keep_ids=keep_ids,
        )
        self.in_thread = in_thread
        self._start_timeout_s = start_timeout_s
        self._port: int | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread_failure: list[BaseException] = []

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not running"
        mode = "thread" if self.in_thread else "process"
        return f"<FaultServer {where} ({mode}) {self._config.faults!r}>"

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the endpoint was started and not stopped."""
        return self._port is not None

    @property
    def port(self) -> int:
        """The port the endpoint listens on."""
        if self._port is None:
            raise RuntimeError("the fault server is not running")
        return self._port

    @property
    def pid(self) -> int | None:
        """The server process's id, or ``None`` in thread mode or when not running."""
        return self._process.pid if self._process is not None else None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
        host = self._config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    @property
    def ingest_url(self) -> str:
        """``url + "/ingest"``: the conventional ingest path."""
        return self.url + "/ingest"

    def start(self) -> FaultServer:
        """Start the endpoint and wait until it listens; returns ``self``."""
        if self._port is not None:
            return self
        try:
            if self.in_thread:
                self._start_thread()
            else:
                self._start_process()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_process(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._conn = parent
        process = context.Process(
            target=_process_main, args=(self._config, child), name="fault-server", daemon=True
        )
        try:
            process.start()
        finally:
            child.close()
        self._process = process
        if not parent.poll(self._start_timeout_s):
            raise RuntimeError(f"the fault server did not start in {self._start_timeout_s} s")
        try:
            kind, value = parent.recv()
        except EOFError:
            raise RuntimeError("the fault server process exited while starting") from None
        if kind != "ready":
            raise RuntimeError(f"the fault server could not start: {value}")
        self._port = int(value)

    def _start_thread(self) -> None:
        ready = threading.Event()
        failure = self._thread_failure

        def started(port: int, endpoint: FaultEndpoint) -> None:
            self._port = port
            ready.set()

        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
            try:
                await serve(self._config, self._stop_event, started)
            except BaseException as exc:
                failure.append(exc)
                raise
            finally:
                ready.set()

        def thread_main() -> None:
            with contextlib.suppress(BaseException):
                asyncio.run(run())

        self._thread = threading.Thread(target=thread_main, name="fault-server", daemon=True)
        self._thread.start()
        if not ready.wait(self._start_timeout_s):
            raise RuntimeError(f"the fault server did not start in {self._start_timeout_s} s")
        if failure:
            raise RuntimeError(f"the fault server could not start: {failure.pop()!r}")

    def stop(self) -> None:
        """Stop the endpoint and release everything it holds. Safe to call twice.

        Raises:
            RuntimeError: the server thread did not end in time (thread mode only; a
                process is always ended, by force if need be).
        """
        self._port = None
        process, self._process = self._process, None
        conn, self._conn = self._conn, None
        if process is not None:
            if conn is not None:
                with contextlib.suppress(OSError, ValueError):
                    conn.send("stop")
            process.join(_JOIN_S)
            if process.is_alive():
                process.terminate()
                process.join(_JOIN_S)
            if process.is_alive():
                process.kill()
                process.join(_JOIN_S)
            with contextlib.suppress(ValueError):
                process.close()
        if conn is not None:
            conn.close()
        thread, self._thread = self._thread, None
        if thread is not None:
            loop, stop_event = self._loop, self._stop_event
            if loop is not None and stop_event is not None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(stop_event.set)
            thread.join(_JOIN_S * 2)
            self._loop = self._stop_event = None
            if thread.is_alive():
                raise RuntimeError("the fault server thread did not stop in time")
            if self._thread_failure:
                failure = self._thread_failure.pop()
                raise RuntimeError(f"the fault server thread failed: {failure!r}") from failure

    def _call(self, method: str, route: str, body: bytes | None = None) -> tuple[int, bytes]:
        host = self._config.host
        connection = http.client.HTTPConnection(host, self.port, timeout=_CONTROL_TIMEOUT_S)
        try:
            headers = {"content-type": "application/json"} if body is not None else {}
            connection.request(method, CONTROL_PREFIX + route, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def _call_ok(self, method: str, route: str, body: bytes | None = None) -> Any:
        status, data = self._call(method, route, body)
        if status != 200:
            raise RuntimeError(f"{method} {CONTROL_PREFIX}{route} answered {status}: {data!r}")
        return orjson.loads(data)

    def stats(self) -> FaultServerStats:
        """A snapshot of the endpoint's counters."""
        return FaultServerStats.from_json(self._call_ok("GET", "stats"))

    def applied_ids(self) -> list[Any]:
        """The identities of every applied entry, in order of application, duplicates
        included.

        Raises:
            RuntimeError: the server runs with ``keep_ids=False``.
        """
        ids: list[Any] = self._call_ok("GET", "ids")
        return ids

    def faults(self) -> Faults:
        """The faults in force now."""
        return Faults.from_json(self._call_ok("GET", "faults"))

    def set_faults(self, faults: Faults) -> None:
        """Switch the endpoint to ``faults``: reseeds the draws, restarts ``fail_statuses``."""
        self._call_ok("POST", "faults", orjson.dumps(faults.to_json()))
        self._config = dataclasses.replace(self._config, faults=faults)

    def reset(self) -> None:
        """Clear counters, applied ids and idempotency keys; re-arm the current faults."""
        self._call_ok("POST", "reset", b"")

    def key_status(self, key: str) -> dict[str, Any] | None:
        """What the endpoint holds for idempotency ``key``: ``None`` if it is unknown, else
        ``{"state": "in_flight"}`` or ``{"state": "completed", "status": ..., "response":
        {...}}``.
        """
        status, data = self._call("GET", "status/" + quote(key, safe=""))
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"GET {CONTROL_PREFIX}status/ answered {status}: {data!r}")
        result: dict[str, Any] = orjson.loads(data)
        return result


def _process_main(config: ServerConfig, conn: Connection) -> None:
    """Entry point of the spawned server process."""
    try:
        asyncio.run(_serve_until_told(config, conn))
    finally:
        conn.close()


async def _serve_until_told(config: ServerConfig, conn: Connection) -> None:
    """Serve until the parent says stop, the parent goes away, or SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def parent_spoke() -> None:
        loop.remove_reader(conn.fileno())
        stop.set()

    loop.add_reader(conn.fileno(), parent_spoke)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def started(port: int, endpoint: FaultEndpoint) -> None:
        conn.send(("ready", port))

    try:
        await serve(config, stop, started)
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", repr(exc)))
    finally:
        loop.remove_reader(conn.fileno())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m asyncsink.testing.fault_server",
        description="Serve the fault-injecting HTTP endpoint until interrupted.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--id-field", default="id")
    parser.add_argument("--require-auth", default=None, help='e.g. "Bearer s3cret"')
    parser.add_argument("--idempotency-header", default="Idempotency-Key")
    parser.add_argument("--no-ids", action="store_true", help="do not keep applied ids")
    kinds: dict[str, Any] = {
        "float": float,
        "int": int,
        "str | None": str,
        "int | None": int,
        "tuple[int, ...]": lambda text: tuple(int(s) for s in text.split(",") if s),
    }
    for item in dataclasses.fields(Faults):
        parser.add_argument(
            "--" + item.name.replace("_", "-"),
            dest=item.name,
            type=kinds[str(item.type)],
            default=item.default,
            help=f"Faults.{item.name} (default {item.default!r})",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the endpoint in the foreground: print its URL, serve until interrupted."""
    args = vars(_parser().parse_args(argv))
    try:
        faults = Faults(**{f.name: args[f.name] for f in dataclasses.fields(Faults)})
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = ServerConfig(
        host=args["host"],
        port=args["port"],
        faults=faults,
        id_field=args["id_field"],
        require_auth=args["require_auth"],
        idempotency_header=args["idempotency_header"],
        keep_ids=not args["no_ids"],
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)

        def started(port: int, endpoint: FaultEndpoint) -> None:
            host = f"[{config.host}]" if ":" in config.host else config.host
            print(f"http://{host}:{port}", flush=True)

        await serve(config, stop, started)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
