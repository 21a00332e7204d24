"""An Elasticsearch-compatible test endpoint with fault injection and exact accounting.

No Elasticsearch server can run in the test environment, so tests, benchmarks and the demo
(from a source checkout) use this one. It lives with the tests, not in the ``asyncsink``
package, since nothing in production needs it. It is good enough for the official
``elasticsearch`` client (the product check, compatibility media types, ``bulk``, ``mget``,
``count``, ``get``, the bulk helpers) and for testing a sink's retries, duplicates and bad
records: per-item 429/503, whole-request 429/503, hangs, resets after the work was applied,
mapping errors, auth failures, all seeded and changeable at run time (:class:`EsFaults`), and
counters that say what the destination really received (:class:`EsStats`).

::

    with ElasticsearchServer(EsFaults(item_throttle_rate=0.1, seed=7)) as es:
        run_the_sink(es.url)
        assert es.stats().duplicate_applications == 0
        assert len(es.documents("events")) == 10_000

By default the server runs in a child process (``spawn``), so its CPU does not compete with
the client for one GIL; ``in_thread=True`` runs it on a thread of this process, cheaper for
unit tests. ``flavor="opensearch"`` or ``"aoss"`` answers as OpenSearch or an OpenSearch
Serverless collection does, and ``sigv4`` checks AWS signatures (see :mod:`.app`).
Either way it is reached over HTTP on loopback, and the Python methods below use
the ``/_control/...`` endpoints. Endpoint details: :mod:`tests.servers.elasticsearch.app`;
document rules: :mod:`tests.servers.elasticsearch.store`.

Command line, from the repository's root: ``python -m tests.servers.elasticsearch --port 0
--latency-ms 5`` prints the URL and serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import http.client
import multiprocessing
import signal
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any
from urllib.parse import quote

import orjson

from asyncsink.testing.sigv4 import SigV4Check

from .app import PRODUCT_HEADERS, EsApp
from .http_server import HttpServer
from .model import EsFaults, EsStats

__all__ = ["ElasticsearchServer", "EsFaults", "EsStats", "main"]

_START_TIMEOUT_S = 60.0
_STOP_WAIT_S = 5.0
_CONTROL_TIMEOUT_S = 30.0


_NO_FAULTS = EsFaults()


class ElasticsearchServer:
    """An Elasticsearch-compatible endpoint on ``host:port`` (port 0: a free one).

    Use it as a context manager, or call :meth:`start` and :meth:`stop`; a stopped server
    can be started again (with empty indices). The child process is started with
    multiprocessing's ``spawn`` method, so a plain script that creates the server must keep
    its top-level code under ``if __name__ == "__main__":``.

    Raises:
        RuntimeError: from :meth:`start`, when the server cannot bind or does not come up.
    """

    def __init__(
        self,
        faults: EsFaults = _NO_FAULTS,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        in_thread: bool = False,
        flavor: str = "elasticsearch",
        sigv4: SigV4Check | None = None,
    ) -> None:
        self._faults = faults
        self._flavor = flavor
        self._sigv4 = sigv4
        self._host = host
        self._port = port
        self._in_thread = in_thread
        self._bound_port: int | None = None
        self._process: BaseProcess | None = None
        self._pipe: Connection | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_stop: asyncio.Event | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> ElasticsearchServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._bound_port is None:
            raise RuntimeError("ElasticsearchServer is not running; call start() first")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._bound_port}"

    @property
    def pid(self) -> int | None:
        """The child process id (None in thread mode or when not running)."""
        return self._process.pid if self._process is not None else None

    @property
    def faults(self) -> EsFaults:
        """The faults last given to the constructor or :meth:`set_faults`."""
        return self._faults

    def start(self) -> ElasticsearchServer:
        """Start serving and wait until the port is bound (at most 60 s)."""
        if self._bound_port is not None:
            raise RuntimeError("ElasticsearchServer is already running")
        if self._in_thread:
            self._start_thread()
        else:
            self._start_process()
        return self

    def stop(self) -> None:
        """Stop serving; safe to call twice.

        A child process is asked to stop, then terminated, then killed, waiting at most a few
        seconds at each step, so no process outlives this call. A thread is asked to stop and
        joined for at most 5 s.

        Raises:
            RuntimeError: the serving thread did not end in time.
        """
        self._bound_port = None
        if self._process is not None:
            self._stop_process()
        if self._thread is not None:
            self._stop_thread()

    def _start_process(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_child_main,
            args=(self._host, self._port, self._faults, child, self._flavor, self._sigv4),
            name="asyncsink-es-test-server",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._process, self._pipe = process, parent
        try:
            message = parent.recv() if parent.poll(_START_TIMEOUT_S) else None
        except EOFError:
            message = None
        if not isinstance(message, int):
            self._stop_process()
            raise RuntimeError(f"Elasticsearch test server did not start: {message!r}")
        self._bound_port = message

    def _stop_process(self) -> None:
        process, pipe = self._process, self._pipe
        self._process = self._pipe = None
        assert process is not None and pipe is not None
        with contextlib.suppress(OSError, ValueError):
            pipe.send("stop")
        process.join(_STOP_WAIT_S)
        if process.is_alive():
            process.terminate()
            process.join(_STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join(_STOP_WAIT_S)
        pipe.close()
        process.close()

    def _start_thread(self) -> None:
        ready = threading.Event()
        outcome: list[int | BaseException] = []

        def run() -> None:
            asyncio.run(self._thread_main(ready, outcome))

        self._thread = threading.Thread(target=run, name="asyncsink-es-test-server", daemon=True)
        self._thread.start()
        if not ready.wait(_START_TIMEOUT_S) or not outcome or not isinstance(outcome[0], int):
            problem = outcome[0] if outcome else "timed out"
            self._stop_thread()
            raise RuntimeError(f"Elasticsearch test server did not start: {problem!r}")
        self._bound_port = outcome[0]

    async def _thread_main(
        self, ready: threading.Event, outcome: list[int | BaseException]
    ) -> None:
        stop = asyncio.Event()
        self._thread_loop, self._thread_stop = asyncio.get_running_loop(), stop
        server = _http_server(self._host, self._port, self._faults, self._flavor, self._sigv4)
        try:
            outcome.append(await server.start())
        except OSError as exc:
            outcome.append(exc)
            ready.set()
            return
        ready.set()
        try:
            await stop.wait()
        finally:
            await server.close()

    def _stop_thread(self) -> None:
        thread, loop, stop = self._thread, self._thread_loop, self._thread_stop
        self._thread = self._thread_loop = self._thread_stop = None
        assert thread is not None
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(_STOP_WAIT_S)
        if thread.is_alive():
            raise RuntimeError("Elasticsearch test server thread did not stop")

    # -- control ----------------------------------------------------------------------------

    def stats(self) -> EsStats:
        """What the server saw since start or :meth:`reset`."""
        return EsStats.from_json(self._control("GET", "/_control/stats"))

    def documents(self, index: str) -> dict[str, Any]:
        """``{_id: source}`` of every document ``index`` holds now (``{}`` if it is missing)."""
        result: dict[str, Any] = self._control(
            "GET", f"/_control/documents/{quote(index, safe='')}"
        )
        return result

    def reset(self) -> None:
        """Forget every index, document and counter; the faults stay, reseeded."""
        self._control("POST", "/_control/reset")

    def set_faults(self, faults: EsFaults) -> None:
        """Replace the faults from the next request on (restarts ``fail_statuses``)."""
        self._control("PUT", "/_control/faults", orjson.dumps(faults.to_json()))
        self._faults = faults

    def _control(self, method: str, path: str, body: bytes | None = None) -> Any:
        if self._bound_port is None:
            raise RuntimeError("ElasticsearchServer is not running; call start() first")
        conn = http.client.HTTPConnection(self._host, self._bound_port, timeout=_CONTROL_TIMEOUT_S)
        try:
            conn.request(method, path, body=body, headers={"content-type": "application/json"})
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(
                f"control request {method} {path} failed: {response.status} {data!r}"
            )
        return orjson.loads(data)


def _http_server(
    host: str,
    port: int,
    faults: EsFaults,
    flavor: str = "elasticsearch",
    sigv4: SigV4Check | None = None,
) -> HttpServer:
    app = EsApp(faults, flavor=flavor, sigv4=sigv4)
    product = PRODUCT_HEADERS if flavor == "elasticsearch" else ()
    return HttpServer(app.handle, host=host, port=port, default_headers=product)


def _child_main(
    host: str,
    port: int,
    faults: EsFaults,
    pipe: Connection,
    flavor: str = "elasticsearch",
    sigv4: SigV4Check | None = None,
) -> None:
    # Ctrl-C reaches the whole process group; the parent decides when the child stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The child holds many small objects none of which form cycles; collecting less often
    # saves about a fifth of its CPU while an index grows.
    gc.set_threshold(50_000, 20, 100)
    try:
        asyncio.run(_child_serve(host, port, faults, pipe, flavor, sigv4))
    finally:
        pipe.close()


async def _child_serve(
    host: str,
    port: int,
    faults: EsFaults,
    pipe: Connection,
    flavor: str = "elasticsearch",
    sigv4: SigV4Check | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    server = _http_server(host, port, faults, flavor, sigv4)
    try:
        bound = await server.start()
    except OSError as exc:
        pipe.send(f"{type(exc).__name__}: {exc}")
        return
    # Anything readable on the pipe is a stop request, and so is its end (the parent died).
    loop.add_reader(pipe.fileno(), stop.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    pipe.send(bound)
    try:
        await stop.wait()
    finally:
        loop.remove_reader(pipe.fileno())
        await server.close()


async def _serve_until_cancelled(host: str, port: int, faults: EsFaults) -> None:
    server = _http_server(host, port, faults)
    bound = await server.start()
    shown = f"[{host}]" if ":" in host else host
    print(f"http://{shown}:{bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: serve until interrupted, printing the URL first."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.servers.elasticsearch",
        description="Serve an Elasticsearch-compatible test endpoint until interrupted.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--latency-jitter-ms", type=float, default=0.0)
    for name in (
        "item_throttle_rate",
        "item_unavailable_rate",
        "request_throttle_rate",
        "request_unavailable_rate",
        "timeout_rate",
        "reset_after_apply_rate",
    ):
        parser.add_argument("--" + name.replace("_", "-"), type=float, default=0.0)
    parser.add_argument("--hang-s", type=float, default=10.0)
    parser.add_argument("--require-auth", default=None, help='e.g. "ApiKey abc"')
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    options = vars(args)
    host, port = options.pop("host"), options.pop("port")
    try:
        faults = EsFaults(**options)
    except ValueError as exc:
        parser.error(str(exc))
    gc.set_threshold(50_000, 20, 100)  # as in the child process: a dedicated server
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_until_cancelled(host, port, faults))
    return 0
