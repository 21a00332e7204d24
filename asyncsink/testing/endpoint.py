"""The fault-injecting endpoint itself: ingest and control requests on an asyncio server.

``serve`` runs it until told to stop; ``asyncsink.testing.fault_server`` wraps it in a
process or a thread and documents the wire protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gzip
import hashlib
import hmac
import random
import socket
import struct
import zlib
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson

from asyncsink.testing.accounting import Ledger, entry_identity
from asyncsink.testing.faults import Faults
from asyncsink.testing.http11 import HttpError, Request, read_request, render_response
from asyncsink.testing.idempotency import IdempotencyStore, Verdict
from asyncsink.testing.sigv4 import SigV4Check, verify

__all__ = ["ServerConfig", "FaultEndpoint", "serve"]

CONTROL_PREFIX = "/_control/"
_OK_ITEM = b'{"status":200}'
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerConfig:
    """How the endpoint is set up; fixed for its lifetime (faults can change at runtime)."""

    host: str = "127.0.0.1"
    port: int = 0
    faults: Faults = field(default_factory=Faults)
    id_field: str = "id"
    require_auth: str | None = field(default=None, repr=False)
    sigv4: SigV4Check | None = field(default=None, repr=False)
    idempotency_header: str = "Idempotency-Key"
    idempotency_capacity: int = 1_000_000
    keep_ids: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.faults, Faults):
            raise ValueError(
                f"faults must be a Faults, got {type(self.faults).__name__} "
                "(Faults.from_json turns a dict into one)"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be within 0..65535, got {self.port!r}")
        if not self.id_field:
            raise ValueError("id_field must not be empty")
        if not self.idempotency_header or ":" in self.idempotency_header:
            raise ValueError(f"not a header name: {self.idempotency_header!r}")
        if self.idempotency_capacity < 1:
            raise ValueError(
                f"idempotency_capacity must be >= 1, got {self.idempotency_capacity!r}"
            )


class _Drop(enum.Enum):
    """A request left without a response."""

    RESET = "reset"
    HANG = "hang"


class _Band(enum.Enum):
    NONE = 0
    ERROR = 1
    THROTTLE = 2
    TIMEOUT = 3
    RESET = 4
    TIMEOUT_AFTER_APPLY = 5
    RESET_AFTER_APPLY = 6


_Response = tuple[int, bytes, tuple[tuple[str, str], ...]]


class _BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str, *headers: tuple[str, str]) -> _Response:
    return status, orjson.dumps({"error": message}), headers


def _decode_entries(request: Request) -> tuple[bytes, list[Any]]:
    """The decompressed body of an ingest request and the entries it holds.

    Raises:
        _BadBody: an unknown content encoding (415), or a body that is not gzip, JSON or
            NDJSON as announced (400).
    """
    body = request.body
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise _BadBody(400, f"body is not valid gzip: {exc}") from None
    elif encoding not in ("identity", ""):
        raise _BadBody(415, f"unsupported content-encoding {encoding!r}")
    content_type = request.headers.get("content-type", "").lower()
    try:
        if "ndjson" in content_type or "jsonl" in content_type:
            return body, [orjson.loads(line) for line in body.splitlines() if line.strip()]
        entries = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _BadBody(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(entries, list):
        raise _BadBody(400, "body must be a JSON array of entries")
    return body, entries


class FaultEndpoint:
    """Answers ingest and control requests, injecting faults and keeping the accounts.

    All state lives on one event loop; nothing here is thread-safe.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.ledger = Ledger(keep_ids=config.keep_ids)
        self.keys = IdempotencyStore(config.idempotency_capacity)
        self._key_header = config.idempotency_header.lower()
        self._auth = config.require_auth.encode() if config.require_auth is not None else None
        self._success_bodies: dict[int, bytes] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.set_faults(config.faults)

    def set_faults(self, faults: Faults) -> None:
        """Switch to ``faults``: reseed the random draws and restart the scripted statuses."""
        self.faults = faults
        self._rng = random.Random(faults.seed)
        self._slots = asyncio.Semaphore(faults.capacity) if faults.capacity else None
        self._script = deque(faults.fail_statuses)

    def reset(self) -> None:
        """Clear the accounts and the idempotency keys, and re-arm the current faults."""
        self.ledger.clear()
        self.keys.clear()
        self.set_faults(self.faults)

    async def close_connections(self) -> None:
        """Cancel every open connection (at shutdown) and wait for them to end."""
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve requests on one connection until it closes, a fault drops it, or shutdown."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.ledger.connections += 1
        try:
            try:
                await self._serve_connection(reader, writer)
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()
        except asyncio.CancelledError:
            # asyncio's stream callback logs a cancelled connection task as an error: end
            # quietly when the endpoint itself is closing.
            if not self._closing:
                raise
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            try:
                request = await read_request(reader, writer)
            except HttpError as exc:
                status, body, _ = _error(exc.status, exc.message)
                writer.write(render_response(status, body, keep_alive=False))
                await writer.drain()
                return
            if request is None:
                return
            if request.path.startswith(CONTROL_PREFIX):
                status, body, headers = self._control(request)
            else:
                outcome = await self._ingest_in_line(request)
                if outcome is _Drop.RESET:
                    self.ledger.resets += 1
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                    writer.transport.abort()
                    return
                if outcome is _Drop.HANG:
                    self.ledger.timeouts += 1
                    await _hold(reader, self.faults.hang_s)
                    return
                status, body, headers = outcome
                self.ledger.statuses[status] += 1
            writer.write(
                render_response(status, body, headers=headers, keep_alive=request.keep_alive)
            )
            await writer.drain()
            if not request.keep_alive:
                return

    def _draw(self) -> _Band:
        faults = self.faults
        point = self._rng.random()
        for band, rate in (
            (_Band.ERROR, faults.error_rate),
            (_Band.THROTTLE, faults.throttle_rate),
            (_Band.TIMEOUT, faults.timeout_rate),
            (_Band.RESET, faults.reset_rate),
            (_Band.TIMEOUT_AFTER_APPLY, faults.timeout_after_apply_rate),
            (_Band.RESET_AFTER_APPLY, faults.reset_after_apply_rate),
        ):
            if point < rate:
                return band
            point -= rate
        return _Band.NONE

    def _scripted(self, status: int) -> _Response:
        if status in (429, 503):
            return _error(status, f"injected {status}", ("retry-after", self._retry_after()))
        return _error(status, f"injected {status}")

    def _retry_after(self) -> str:
        """``retry_after_s`` in plain digits: ``1234567``, ``0.05`` (no exponent)."""
        return f"{self.faults.retry_after_s:.6f}".rstrip("0").rstrip(".")

    def _refusal(self, request: Request) -> _Response | None:
        """The answer to a request turned away before any random fault is drawn."""
        if request.method not in ("POST", "PUT"):
            return _error(405, "ingest takes POST or PUT", ("allow", "POST, PUT"))
        if self._auth is not None and not hmac.compare_digest(
            request.headers.get("authorization", "").encode(), self._auth
        ):
            scheme = self._auth.decode().partition(" ")[0] or "Bearer"
            return _error(401, "unauthorized", ("www-authenticate", f'{scheme} realm="fault"'))
        check = self.config.sigv4
        if check is not None:
            url = f"http://{request.headers.get('host', '')}{request.target}"
            refused = verify(check, request.method, url, request.headers, request.body)
            if refused is not None:
                status, message = refused
                return status, orjson.dumps({"message": message}), ()
        if self._script:
            return self._scripted(self._script.popleft())
        return None

    def _fault_before_apply(self, band: _Band) -> _Response | _Drop | None:
        if band is _Band.ERROR:
            status = self._rng.choice((500, 502, 504))
            return _error(status, f"injected {status}")
        if band is _Band.THROTTLE:
            status = self._rng.choice((429, 503))
            return _error(status, f"injected {status}", ("retry-after", self._retry_after()))
        if band is _Band.TIMEOUT:
            return _Drop.HANG
        if band is _Band.RESET:
            return _Drop.RESET
        return None

    async def _ingest_in_line(self, request: Request) -> _Response | _Drop:
        """``_ingest``, once one of ``capacity`` slots is free (when the faults set one)."""
        slots = self._slots
        if slots is None:
            return await self._ingest(request)
        ledger = self.ledger
        queued = asyncio.get_running_loop().time()
        if slots.locked():  # every slot taken: wait in line
            ledger.waiting += 1
            ledger.max_waiting = max(ledger.max_waiting, ledger.waiting)
            try:
                await slots.acquire()
            finally:
                ledger.waiting -= 1
        else:
            await slots.acquire()
        try:
            ledger.queue_waits.append(asyncio.get_running_loop().time() - queued)
            return await self._ingest(request)
        finally:
            slots.release()

    async def _ingest(self, request: Request) -> _Response | _Drop:
        """Answer an ingest request in the order the ``fault_server`` docstring gives."""
        faults = self.faults
        self.ledger.requests += 1
        delay = faults.latency_ms / 1000
        if faults.latency_jitter_ms:
            delay += self._rng.uniform(0, faults.latency_jitter_ms / 1000)
        band = _Band.NONE
        early: _Response | _Drop | None = self._refusal(request)
        if early is None:
            band = self._draw()
            early = self._fault_before_apply(band)
        if early is None:
            try:
                raw, entries = _decode_entries(request)
            except _BadBody as exc:
                early = _error(exc.status, str(exc))
        if early is not None:
            if delay and early is not _Drop.HANG:
                await asyncio.sleep(delay)
            return early

        key = request.headers.get(self._key_header)
        if key is not None and len(key) >= 2 and key[0] == key[-1] == '"':
            key = key[1:-1]
        response: _Response
        if key is None:
            if delay:
                await asyncio.sleep(delay)
            response = self._apply(entries)
        else:
            digest = hashlib.sha256(raw).digest()
            verdict, record = self.keys.check(key, digest)
            if verdict is Verdict.NEW:
                self.keys.begin(key, digest)
                try:
                    if delay:
                        await asyncio.sleep(delay)
                except BaseException:
                    self.keys.abandon(key)
                    raise
                response = self._apply(entries)
                self.keys.complete(key, digest, response[0], response[1])
            else:
                if delay:
                    await asyncio.sleep(delay)
                if verdict is Verdict.MISMATCH:
                    self.ledger.mismatches += 1
                    response = _error(422, "idempotency key reused with a different body")
                elif verdict is Verdict.CONFLICT:
                    self.ledger.conflicts += 1
                    response = _error(409, "a request with this idempotency key is in flight")
                else:
                    assert record is not None and record.status is not None
                    assert record.body is not None
                    self.ledger.replays += 1
                    response = record.status, record.body, (("idempotent-replayed", "true"),)
        if band is _Band.RESET_AFTER_APPLY:
            return _Drop.RESET
        if band is _Band.TIMEOUT_AFTER_APPLY:
            return _Drop.HANG
        return response

    def _apply(self, entries: list[Any]) -> _Response:
        """Store the accepted entries and build the positional per-item response."""
        faults = self.faults
        id_field = self.config.id_field
        rate = faults.partial_failure_rate
        bad_field = faults.bad_record_field
        if not rate and bad_field is None:
            try:
                identities: list[Hashable] = [entry[id_field] for entry in entries]
                hash(tuple(identities))
            except (KeyError, TypeError):
                pass  # not an object, no id field, or an unhashable id: the slow path
            else:
                self.ledger.apply(identities, 0)
                return 200, self._success_body(len(entries)), ()
        identities = []
        items: list[bytes] = []
        rejected = 0
        rng = self._rng
        for entry in entries:
            if not isinstance(entry, dict):
                items.append(b'{"status":400,"error":"entry is not a JSON object"}')
            elif bad_field is not None and entry.get(bad_field):
                items.append(b'{"status":400,"error":"mapping error"}')
            elif rate and rng.random() < rate:
                status = rng.choice((429, 500, 503))
                items.append(b'{"status":%d,"error":"injected partial failure"}' % status)
            else:
                identities.append(entry_identity(entry, id_field))
                items.append(_OK_ITEM)
                continue
            rejected += 1
        self.ledger.apply(identities, rejected)
        if not rejected:
            return 200, self._success_body(len(entries)), ()
        body = b'{"errors":true,"items":[' + b",".join(items) + b"]}"
        return faults.partial_response_status, body, ()

    def _success_body(self, count: int) -> bytes:
        body = self._success_bodies.get(count)
        if body is None:
            if len(self._success_bodies) >= 1024:
                self._success_bodies.clear()
            body = b'{"errors":false,"items":[' + b",".join([_OK_ITEM] * count) + b"]}"
            self._success_bodies[count] = body
        return body

    def _control(self, request: Request) -> _Response:
        route = request.path[len(CONTROL_PREFIX) :]
        method = request.method
        if route == "stats" and method == "GET":
            return 200, orjson.dumps(self.ledger.snapshot().to_json()), ()
        if route == "ids" and method == "GET":
            if not self.ledger.keep_ids:
                return _error(404, "the endpoint does not keep entry ids (keep_ids=False)")
            return 200, orjson.dumps(self.ledger.ids), ()
        if route == "faults" and method == "GET":
            return 200, orjson.dumps(self.faults.to_json()), ()
        if route == "faults" and method == "POST":
            try:
                self.set_faults(Faults.from_json(orjson.loads(request.body)))
            except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
                return _error(400, f"bad faults: {exc}")
            return 200, orjson.dumps(self.faults.to_json()), ()
        if route == "reset" and method == "POST":
            self.reset()
            return 200, b'{"reset":true}', ()
        if route == "health" and method == "GET":
            return 200, b'{"ok":true}', ()
        if route.startswith("status/") and method == "GET":
            record = self.keys.get(unquote(route[len("status/") :]))
            if record is None:
                return _error(404, "unknown idempotency key")
            if record.status is None or record.body is None:
                return 200, b'{"state":"in_flight"}', ()
            head = b'{"state":"completed","status":%d,"response":' % record.status
            return 200, head + record.body + b"}", ()
        return _error(404, f"no control route {method} {request.path}")


async def _hold(reader: asyncio.StreamReader, hang_s: float) -> None:
    """Keep a connection open, unanswered, until the peer closes it or ``hang_s`` passes."""
    with contextlib.suppress(TimeoutError, ConnectionError, OSError):
        async with asyncio.timeout(hang_s):
            while await reader.read(65536):
                pass


async def serve(
    config: ServerConfig,
    stop: asyncio.Event,
    started: Callable[[int, FaultEndpoint], None],
) -> None:
    """Run the endpoint on ``config.host:config.port`` until ``stop`` is set.

    ``started(port, endpoint)`` is called once the socket listens. On the way out every
    connection is closed, held ones included.
    """
    endpoint = FaultEndpoint(config)
    server = await asyncio.start_server(
        endpoint.handle_connection,
        config.host,
        config.port,
        backlog=2048,
        limit=1024 * 1024,
        reuse_address=True,
    )
    try:
        port = int(server.sockets[0].getsockname()[1])
        started(port, endpoint)
        await stop.wait()
    finally:
        server.close()
        await endpoint.close_connections()
        await server.wait_closed()
