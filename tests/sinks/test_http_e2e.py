"""The HTTP sink end to end, through the fault-injecting endpoint in its own process.

Whatever the endpoint does wrong, every entry must land exactly once: the writer retries
what failed, and the idempotency key makes the endpoint drop what it already applied
(``slow_answers``: a re-send that arrives while the first request is still being applied
is answered 409 and retried, and once it completed, answered from the endpoint's memory).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from asyncsink import CallLog, FatalError, Scope, SubmitResult
from asyncsink.sinks.http import HttpOptions, HttpWriter, create_writer
from asyncsink.stores.memory import MemoryStore
from asyncsink.testing import Faults, FaultServer

pytestmark = pytest.mark.anyio

TOKEN = "e2e-t0ken-Qz9"
PASSWORD = "pa55-w0rd-Kx7"


@pytest.fixture(scope="module")
def shared() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


@pytest.fixture
def server(shared: FaultServer) -> FaultServer:
    shared.set_faults(Faults())
    shared.reset()
    return shared


@pytest.fixture(scope="module")
def guarded() -> Iterator[FaultServer]:
    with FaultServer(require_auth=f"Bearer {TOKEN}") as server:
        yield server


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "v": i, "pad": "x" * 40} for i in range(count)]


def spark_options(url: str, **overrides: str) -> dict[str, Any]:
    base = {"url": url, "maxBatchSize": "50", "maxInFlightRequests": "8", "maxRetries": "40"}
    return {**base, "initialBackoffMs": "1", "maxBackoffMs": "100", **overrides}


async def deliver(
    target: str | HttpWriter, data: list[dict[str, Any]], **overrides: str
) -> HttpWriter:
    """Write ``data`` through a writer (or one made for the URL ``target``) and close it."""
    w = (
        target
        if isinstance(target, HttpWriter)
        else create_writer(spark_options(target, **overrides))
    )
    with anyio.fail_after(30):
        async with w:
            await w.write_all(data)
    return w


def assert_exactly_once(server: FaultServer, data: list[dict[str, Any]]) -> None:
    applied = server.applied_ids()
    assert sorted(applied) == sorted(row["id"] for row in data)  # nothing lost, nothing twice
    assert server.stats().duplicates == 0


FAULTS = {
    "latency": (Faults(latency_ms=20, latency_jitter_ms=10), {}),
    "throttling": (Faults(throttle_rate=0.3, retry_after_s=0.02, seed=1), {}),
    "server_errors": (Faults(error_rate=0.3, seed=2), {}),
    "timeouts": (Faults(timeout_rate=0.15, hang_s=5, seed=3), {"requestTimeoutMs": "300"}),
    "timeout_after_apply": (
        Faults(timeout_after_apply_rate=0.15, latency_ms=5, hang_s=5, seed=4),
        {"requestTimeoutMs": "300"},
    ),
    "slow_answers": (
        Faults(latency_ms=50, latency_jitter_ms=400, seed=11),
        {"requestTimeoutMs": "250"},
    ),
    "resets": (Faults(reset_rate=0.2, seed=5), {}),
    "reset_after_apply": (Faults(reset_after_apply_rate=0.3, seed=6), {}),
    "partial_items": (Faults(partial_failure_rate=0.1, partial_response_status=207, seed=7), {}),
    "everything": (
        Faults(latency_ms=3, latency_jitter_ms=5, error_rate=0.08, throttle_rate=0.08,
               retry_after_s=0.01, timeout_rate=0.03, timeout_after_apply_rate=0.03,
               reset_rate=0.05, reset_after_apply_rate=0.08, partial_failure_rate=0.05,
               hang_s=5, seed=8),
        {"requestTimeoutMs": "400"},
    ),
}  # fmt: skip


def fault_happened(name: str, server: FaultServer, writer: HttpWriter) -> bool:
    stats = server.stats()
    statuses = stats.statuses
    return {
        "latency": statuses.get(200, 0) == stats.requests,
        "throttling": bool(statuses.get(429) or statuses.get(503)),
        "server_errors": any(statuses.get(s) for s in (500, 502, 504)),
        "timeouts": stats.timeouts > 0 and writer.statistics().timeouts > 0,
        "timeout_after_apply": stats.replays + stats.conflicts > 0,
        "slow_answers": stats.conflicts > 0 and stats.replays > 0,
        "resets": stats.resets > 0,
        "reset_after_apply": stats.resets > 0 and stats.replays > 0,
        "partial_items": stats.entries_rejected > 0 and statuses.get(207, 0) > 0,
        "everything": sum(
            (
                any(statuses.get(s) for s in (429, 503)),
                any(statuses.get(s) for s in (500, 502, 504)),
                stats.timeouts > 0,
                stats.resets > 0,
                stats.replays > 0,
                stats.entries_rejected > 0,
            )
        )
        >= 4,
    }[name]


@pytest.mark.parametrize("name", list(FAULTS))
async def test_every_entry_lands_exactly_once_under_each_fault(
    server: FaultServer, name: str
) -> None:
    faults, overrides = FAULTS[name]
    server.set_faults(faults)
    data = rows(name, 400 if name == "slow_answers" else 1500)
    writer = await deliver(server.ingest_url, data, **overrides)
    assert_exactly_once(server, data)
    assert fault_happened(name, server, writer)
    assert writer.statistics().delivered == len(data)


async def test_gzip_ndjson_and_http2_deliver_through_faults(server: FaultServer) -> None:
    server.set_faults(Faults(reset_after_apply_rate=0.2, partial_failure_rate=0.05, seed=9))
    data = rows("gz", 800)
    await deliver(server.ingest_url, data, gzip="true", gzipLevel="3", bodyFormat="ndjson",
                  http2="true", method="PUT")  # fmt: skip
    assert_exactly_once(server, data)
    assert server.stats().replays > 0


async def test_bad_records_reported_by_the_endpoint_go_to_dead_letter(
    server: FaultServer,
) -> None:
    server.set_faults(Faults(bad_record_field="poison"))
    letters: list[Any] = []
    data = rows("dl", 200)
    for row in data[::50]:
        row["poison"] = True
    writer = create_writer({**spark_options(server.ingest_url), "deadLetter": letters.append})
    await deliver(writer, data)
    assert sorted(letter.position for letter in letters) == [0, 50, 100, 150]
    assert all("mapping error" in letter.reason for letter in letters)
    assert sorted(server.applied_ids()) == sorted(r["id"] for r in data if "poison" not in r)
    assert server.stats().duplicates == 0


class Crash(BaseException):
    """Stands for the worker process dying."""


class CrashingWriter(HttpWriter):
    """Dies right after its ``crash_after``-th request was answered."""

    crash_after = 3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = 0

    async def submit_request_entries(self, entries: list[bytes]) -> SubmitResult | None:
        result = await super().submit_request_entries(entries)
        self.sent += 1
        if self.sent == self.crash_after:
            raise Crash("died after the endpoint applied the request")
        return result


@pytest.mark.parametrize("mode", ["reconcile", "same_key"])
async def test_a_retried_task_settles_the_unfinished_call_without_duplicates(
    server: FaultServer, mode: str
) -> None:
    store = MemoryStore()
    scope = Scope("http-e2e", 0, 0)
    data = rows(f"task-{mode}", 300)
    http = HttpOptions(
        url=server.ingest_url,
        reconcile_url=server.url + "/_control/status/{key}" if mode == "reconcile" else None,
    )
    sink = create_writer(spark_options(server.ingest_url, maxInFlightRequests="1")).options
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - the crash, maybe in a group
        await deliver(CrashingWriter(http, options=sink, call_log=CallLog(store, scope)), data)
    assert "died after" in repr(caught.value)
    landed = len(server.applied_ids())
    assert landed == 150
    retry = await deliver(HttpWriter(http, options=sink, call_log=CallLog(store, scope)), data)
    assert_exactly_once(server, data)
    stats = retry.statistics()
    if mode == "reconcile":
        assert stats.reconciled >= 1
        assert stats.skipped == landed
        assert server.stats().replays == 0  # the endpoint was asked, not sent it again
    else:
        assert stats.skipped == landed - 50
        assert server.stats().replays == 1  # re-sent with its key, answered from memory


async def test_wrong_credentials_fail_fast_with_a_clear_message(guarded: FaultServer) -> None:
    guarded.reset()
    with anyio.fail_after(5), pytest.raises(FatalError) as caught:
        await deliver(guarded.ingest_url, rows("auth", 10), bearerToken="wrong-token")
    assert caught.value.status == 401
    assert "HTTP 401" in str(caught.value) and "bearerToken" in str(caught.value)
    assert guarded.stats().requests == 1
    assert "wrong-token" not in str(caught.value)


# The two HTTP stacks under httpx: aiohttp's (HTTP/1.1, the default) and httpx's own
# (httpcore, taken when HTTP/2 is offered), which logs headers at DEBUG.
STACKS = {"aiohttp": {}, "httpcore": {"http2": "true"}}


@pytest.mark.parametrize("stack", STACKS)
async def test_secrets_stay_out_of_debug_logs_reprs_and_errors(
    guarded: FaultServer, caplog: pytest.LogCaptureFixture, stack: str
) -> None:
    guarded.reset()
    caplog.set_level(logging.DEBUG)
    data = rows("secret", 100)
    writer = await deliver(guarded.url + "/ingest", data, bearerToken=TOKEN, **STACKS[stack])
    assert sorted(guarded.applied_ids()) == sorted(r["id"] for r in data)
    if stack == "httpcore":  # httpx and httpcore did log, headers too
        assert "HTTP Request: POST" in caplog.text
        assert "receive_response_headers" in caplog.text
    texts = [caplog.text, repr(writer), repr(writer.http)]
    with pytest.raises(FatalError) as caught:
        await deliver(guarded.ingest_url, data, basicUsername="ann", basicPassword=PASSWORD,
                      **STACKS[stack])  # fmt: skip
    texts += [caplog.text, str(caught.value), repr(caught.value)]
    for text in texts:
        assert TOKEN not in text and PASSWORD not in text
        assert base64.b64encode(f"ann:{PASSWORD}".encode()).decode() not in text


@pytest.mark.parametrize("stack", STACKS)
async def test_credentials_echoed_by_a_server_are_masked_in_debug_logs(
    caplog: pytest.LogCaptureFixture, stack: str
) -> None:
    """A server that echoes the Authorization header in a response header and its body:
    httpcore logs response headers at DEBUG, and the error carries a body excerpt."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {
            name.lower(): value
            for name, _, value in (line.partition(": ") for line in lines[1:] if line)
        }
        length = int(headers.get("content-length", "0"))
        await reader.readexactly(length)
        auth = headers.get("authorization", "")
        body = f'{{"error": "unauthorized", "you_sent": "{auth}"}}'.encode()
        reply = (
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
            f"X-Echo: {auth}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(reply.encode() + body)
        await writer.drain()
        writer.close()

    caplog.set_level(logging.DEBUG)
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(FatalError) as caught:
            await deliver(f"http://127.0.0.1:{port}/ingest", rows("echo", 5), apiKey=TOKEN,
                          apiKeyHeader="Authorization", **STACKS[stack])  # fmt: skip
    finally:
        server.close()
        await server.wait_closed()
    if stack == "httpcore":
        assert "x-echo" in caplog.text.lower()  # the echoing header was logged...
    assert TOKEN not in caplog.text  # ...masked
    assert TOKEN not in str(caught.value)
    assert '"you_sent": "***"' in str(caught.value)
