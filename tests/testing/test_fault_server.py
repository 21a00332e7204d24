"""The fault-injecting endpoint, observed from a real httpx client.

Most tests share one server in a spawned process (``conftest.py``), so every assertion on
``stats()`` and ``applied_ids()`` crosses the process boundary; tests that need other
server settings start a cheap one in a thread. Idempotency has its own module.
"""

from __future__ import annotations

import gzip
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from asyncsink.testing import Faults, FaultServer

pytestmark = pytest.mark.anyio


def batch(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "value": i} for i in range(count)]


async def test_success_answers_every_entry_positionally_and_records_it(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    entries = batch("ok", 3)
    response = await http_client.post(fault_server.ingest_url, json=entries)
    assert response.status_code == 200
    assert response.json() == {"errors": False, "items": [{"status": 200}] * 3}
    response = await http_client.put(fault_server.url + "/any/path", json=[{"id": "put-1"}])
    assert response.status_code == 200
    assert (await http_client.get(fault_server.ingest_url)).status_code == 405
    stats = fault_server.stats()
    assert stats.requests == 3
    assert stats.statuses == {200: 2, 405: 1}
    assert stats.entries_received == 4
    assert stats.unique_ids == 4
    assert stats.duplicates == 0
    assert fault_server.applied_ids() == ["ok-0", "ok-1", "ok-2", "put-1"]


async def test_latency_delays_the_response(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    async def timed() -> float:
        started = time.perf_counter()
        response = await http_client.post(fault_server.ingest_url, json=batch("l", 1))
        assert response.status_code == 200
        return time.perf_counter() - started

    fast = min([await timed() for _ in range(3)])
    fault_server.set_faults(Faults(latency_ms=300))
    slow = await timed()
    assert fast < 0.3 <= slow
    fault_server.set_faults(Faults(latency_ms=50, latency_jitter_ms=400, seed=1))
    jittered = [await timed() for _ in range(5)]
    assert min(jittered) >= 0.05
    assert max(jittered) - min(jittered) > 0.1


async def test_capacity_serves_that_many_at_once_and_queues_the_rest(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(latency_ms=100, capacity=4))
    limits = httpx.Limits(max_connections=12)
    finished: list[float] = []
    async with httpx.AsyncClient(limits=limits, timeout=10) as wide:

        async def send(i: int) -> None:
            response = await wide.post(fault_server.ingest_url, json=batch(f"q{i}", 2))
            assert response.status_code == 200
            finished.append(time.perf_counter() - started)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(send, i)
    # twelve at once through four slots of 100 ms: three waves, ~100, ~200 and ~300 ms
    finished.sort()
    assert 0.09 <= finished[0] and finished[3] < 0.19
    assert 0.19 <= finished[4] and finished[7] < 0.29
    assert 0.29 <= finished[8]
    stats = fault_server.stats()
    assert stats.entries_received == 24
    assert stats.max_waiting == 8
    waits = sorted(stats.queue_waits_ms)
    assert len(waits) == 12 and waits[3] < 10 and 90 <= waits[4] and 190 <= waits[8] < 290
    fault_server.set_faults(Faults())
    fault_server.reset()
    assert (await http_client.post(fault_server.ingest_url, json=batch("n", 1))).status_code == 200
    assert (fault_server.stats().max_waiting, fault_server.stats().queue_waits_ms) == (0, ())


async def test_throttle_answers_429_or_503_with_retry_after_and_applies_nothing(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(throttle_rate=1.0, retry_after_s=0.05, seed=3))
    statuses = set()
    for _ in range(20):
        response = await http_client.post(fault_server.ingest_url, json=batch("t", 2))
        statuses.add(response.status_code)
        assert response.headers["retry-after"] == "0.05"
    assert statuses == {429, 503}
    stats = fault_server.stats()
    assert stats.entries_received == 0
    assert sum(stats.statuses.values()) == stats.requests == 20


async def test_error_rate_answers_5xx_at_the_configured_fraction(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(error_rate=0.5, seed=11))
    statuses = [
        (await http_client.post(fault_server.ingest_url, json=batch(f"e{i}", 2))).status_code
        for i in range(200)
    ]
    errors = [s for s in statuses if s != 200]
    assert set(errors) == {500, 502, 504}
    assert 60 <= len(errors) <= 140
    assert fault_server.stats().entries_received == 2 * statuses.count(200)


async def test_seed_makes_the_draws_reproducible_and_reset_rearms_them(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(error_rate=0.3, throttle_rate=0.3, seed=42))

    async def run() -> list[int]:
        return [
            (await http_client.post(fault_server.ingest_url, json=[{}])).status_code
            for _ in range(30)
        ]

    first = await run()
    fault_server.reset()
    assert await run() == first
    assert len(set(first)) > 2


async def test_timeout_holds_the_connection_until_the_client_gives_up(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(timeout_rate=1.0))
    started = time.perf_counter()
    with pytest.raises(httpx.ReadTimeout):
        await http_client.post(fault_server.ingest_url, json=batch("h", 2), timeout=0.3)
    assert 0.3 <= time.perf_counter() - started < 2
    stats = fault_server.stats()
    assert stats.timeouts == 1
    assert stats.entries_received == 0


async def test_timeout_is_bounded_by_hang_s(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(timeout_rate=1.0, hang_s=0.3))
    started = time.perf_counter()
    with pytest.raises(httpx.RemoteProtocolError):
        await http_client.post(fault_server.ingest_url, json=batch("h", 1), timeout=10)
    assert 0.3 <= time.perf_counter() - started < 5


async def test_timeout_after_apply_stores_the_entries_the_client_never_hears_of(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(timeout_after_apply_rate=1.0))
    with pytest.raises(httpx.ReadTimeout):
        await http_client.post(
            fault_server.ingest_url,
            json=batch("late", 2),
            headers={"Idempotency-Key": "late"},
            timeout=0.3,
        )
    assert fault_server.applied_ids() == ["late-0", "late-1"]
    status = fault_server.key_status("late")
    assert status is not None and status["state"] == "completed"


async def test_reset_drops_the_connection_without_applying(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(reset_rate=1.0))
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await http_client.post(fault_server.ingest_url, json=batch("r", 3))
    stats = fault_server.stats()
    assert (stats.resets, stats.entries_received, stats.statuses) == (1, 0, {})


async def test_reset_after_apply_duplicates_on_a_plain_resend(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    entries = batch("dup", 3)
    fault_server.set_faults(Faults(reset_after_apply_rate=1.0))
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await http_client.post(fault_server.ingest_url, json=entries)
    fault_server.set_faults(Faults())
    assert (await http_client.post(fault_server.ingest_url, json=entries)).status_code == 200
    stats = fault_server.stats()
    assert (stats.entries_received, stats.unique_ids, stats.duplicates) == (6, 3, 3)
    assert fault_server.applied_ids() == [e["id"] for e in entries] * 2


@pytest.mark.parametrize("partial_status", [200, 207])
async def test_partial_failures_are_positional_and_only_accepted_entries_are_stored(
    fault_server: FaultServer, http_client: httpx.AsyncClient, partial_status: int
) -> None:
    fault_server.set_faults(
        Faults(partial_failure_rate=0.4, partial_response_status=partial_status, seed=5)
    )
    entries = batch("p", 200)
    response = await http_client.post(fault_server.ingest_url, json=entries)
    assert response.status_code == partial_status
    body = response.json()
    assert body["errors"] is True
    assert len(body["items"]) == len(entries)
    accepted = [
        e["id"] for e, item in zip(entries, body["items"], strict=True) if item["status"] == 200
    ]
    failed = [item for item in body["items"] if item["status"] != 200]
    assert {item["status"] for item in failed} <= {429, 500, 503}
    assert all(item["error"] for item in failed)
    assert 40 <= len(failed) <= 120
    assert fault_server.applied_ids() == accepted
    stats = fault_server.stats()
    assert (stats.entries_received, stats.entries_rejected) == (len(accepted), len(failed))


async def test_bad_records_and_non_objects_get_item_status_400(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(bad_record_field="bad"))
    entries = [{"id": "a"}, {"id": "b", "bad": True}, [1, 2], {"id": "c", "bad": False}]
    response = await http_client.post(fault_server.ingest_url, json=entries)
    items = response.json()["items"]
    assert [item["status"] for item in items] == [200, 400, 400, 200]
    assert items[1]["error"] == "mapping error"
    assert fault_server.applied_ids() == ["a", "c"]


async def test_fail_statuses_answers_the_next_requests_in_order(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(fail_statuses=(401, 503), retry_after_s=2))
    first = await http_client.post(fault_server.ingest_url, json=batch("f", 1))
    second = await http_client.post(fault_server.ingest_url, json=batch("f", 1))
    third = await http_client.post(fault_server.ingest_url, json=batch("f", 1))
    assert [first.status_code, second.status_code, third.status_code] == [401, 503, 200]
    assert second.headers["retry-after"] == "2"
    assert fault_server.stats().entries_received == 1


@pytest.mark.parametrize(
    ("content_type", "encode"),
    [
        ("application/json", orjson.dumps),
        ("application/x-ndjson", lambda e: b"\n".join(orjson.dumps(x) for x in e) + b"\n"),
    ],
)
@pytest.mark.parametrize("gzipped", [False, True])
async def test_json_and_ndjson_bodies_plain_or_gzipped(
    fault_server: FaultServer,
    http_client: httpx.AsyncClient,
    content_type: str,
    encode: Any,
    gzipped: bool,
) -> None:
    entries = batch("enc", 4)
    body = encode(entries)
    headers = {"content-type": content_type}
    if gzipped:
        body = gzip.compress(body)
        headers["content-encoding"] = "gzip"
    response = await http_client.post(fault_server.ingest_url, content=body, headers=headers)
    assert response.status_code == 200
    assert len(response.json()["items"]) == 4
    assert fault_server.applied_ids() == [e["id"] for e in entries]


async def test_a_streamed_chunked_body_is_read(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    async def chunks() -> Any:
        yield b'[{"id": "c1"},'
        yield b'{"id": "c2"}]'

    response = await http_client.post(fault_server.ingest_url, content=chunks())
    assert response.status_code == 200
    assert fault_server.applied_ids() == ["c1", "c2"]


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"{not json", {}, 400),
        (b'{"id": 1}', {}, 400),
        (b"not gzip", {"content-encoding": "gzip"}, 400),
        (b"[]", {"content-encoding": "br"}, 415),
    ],
)
async def test_malformed_bodies_are_rejected_whole(
    fault_server: FaultServer,
    http_client: httpx.AsyncClient,
    body: bytes,
    headers: dict[str, str],
    status: int,
) -> None:
    response = await http_client.post(fault_server.ingest_url, content=body, headers=headers)
    assert response.status_code == status
    assert response.json()["error"]
    assert fault_server.stats().applied_requests == 0


async def test_many_concurrent_keep_alive_connections(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(limits=limits, timeout=10) as wide:

        async def send(i: int) -> None:
            for j in range(3):
                response = await wide.post(fault_server.ingest_url, json=batch(f"c{i}-{j}", 10))
                assert response.status_code == 200

        async with anyio.create_task_group() as tg:
            for i in range(32):
                tg.start_soon(send, i)
    stats = fault_server.stats()
    assert (stats.requests, stats.entries_received, stats.unique_ids) == (96, 960, 960)
    # 32 ingest connections, each reused for 3 requests, and the connection of stats() itself.
    assert stats.connections == 33


async def test_faults_round_trip_and_bad_faults_are_refused(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    faults = Faults(latency_ms=1, fail_statuses=(500, 401), seed=9, bad_record_field="bad")
    fault_server.set_faults(faults)
    assert fault_server.faults() == faults
    response = await http_client.post(fault_server.url + "/_control/faults", json={"error_rate": 2})
    assert response.status_code == 400
    response = await http_client.post(fault_server.url + "/_control/faults", json={"nope": 1})
    assert response.status_code == 400
    assert fault_server.faults() == faults


def test_faults_validate_their_values() -> None:
    with pytest.raises(ValueError, match="add up"):
        Faults(error_rate=0.6, reset_rate=0.6)
    with pytest.raises(ValueError, match="partial_failure_rate"):
        Faults(partial_failure_rate=-0.1)
    with pytest.raises(ValueError, match="fail_statuses"):
        Faults(fail_statuses=(99,))
    with pytest.raises(ValueError, match="capacity"):
        Faults(capacity=-1)
    with pytest.raises(ValueError, match="unknown"):
        Faults.from_json({"latency": 5})
    wrong_types = [
        ({"error_rate": "0.5"}, "Faults.error_rate must be a number, got '0.5'"),
        ({"latency_ms": "5"}, "Faults.latency_ms must be a number"),
        ({"fail_statuses": 429}, "Faults.fail_statuses must be a sequence of statuses"),
        ({"capacity": True}, "Faults.capacity must be an integer"),
        ({"bad_record_field": 3}, "Faults.bad_record_field must be a field name or None"),
    ]
    for settings, message in wrong_types:
        with pytest.raises(ValueError, match=re.escape(message)):
            Faults(**settings)
        with pytest.raises(ValueError, match=re.escape(message)):
            Faults.from_json(settings)
    assert Faults(fail_statuses=[503, 401]).fail_statuses == (503, 401)
    faults = Faults(throttle_rate=0.2, fail_statuses=(401,), seed=1)
    assert Faults.from_json(orjson.loads(orjson.dumps(faults.to_json()))) == faults


async def test_auth_is_required_when_configured_but_not_for_control() -> None:
    with FaultServer(in_thread=True, require_auth="Bearer s3cret") as fault_server:
        assert "s3cret" not in repr(fault_server)
        async with httpx.AsyncClient(timeout=10) as http_client:
            missing = await http_client.post(fault_server.ingest_url, json=[{"id": 1}])
            wrong = await http_client.post(
                fault_server.ingest_url, json=[{"id": 1}], headers={"Authorization": "Bearer nope"}
            )
            right = await http_client.post(
                fault_server.ingest_url,
                json=[{"id": 2}],
                headers={"Authorization": "Bearer s3cret"},
            )
        assert (missing.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert fault_server.applied_ids() == [2]


async def test_malformed_http_gets_400_and_the_connection_closed(fault_server: FaultServer) -> None:
    async with await anyio.connect_tcp("127.0.0.1", fault_server.port) as stream:
        await stream.send(b"NONSENSE\r\n\r\n")
        reply = b""
        with anyio.fail_after(5):
            async for chunk in stream:
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in reply


@pytest.mark.parametrize("in_thread", [False, True])
async def test_stop_ends_the_server_even_with_a_held_connection(in_thread: bool) -> None:
    fault_server = FaultServer(Faults(timeout_rate=1.0), in_thread=in_thread).start()
    port = fault_server.port
    pid = fault_server.pid
    assert (pid is None) == in_thread
    async with httpx.AsyncClient(timeout=30) as http_client:
        async with anyio.create_task_group() as tg:

            async def hang() -> None:
                with pytest.raises(httpx.TransportError):
                    await http_client.post(fault_server.ingest_url, json=[{"id": 1}])

            tg.start_soon(hang)
            await anyio.sleep(0.2)
            started = time.perf_counter()
            await anyio.to_thread.run_sync(fault_server.stop)
            assert time.perf_counter() - started < 5
    fault_server.stop()
    assert not fault_server.running
    if pid is not None:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass


_ORPHAN_SCRIPT = """
import sys, time
from asyncsink.testing import FaultServer
if __name__ == "__main__":
    server = FaultServer().start()
    print(server.pid, flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_server_process_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env) as proc:
        try:
            assert proc.stdout is not None
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                assert selector.select(timeout=30), "the parent printed no pid"
            child = int(proc.stdout.readline())
            assert _alive(child)
        finally:
            proc.kill()
            proc.wait(10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_server_settings_are_checked_before_starting() -> None:
    with pytest.raises(ValueError, match="idempotency_capacity"):
        FaultServer(idempotency_capacity=0)
    with pytest.raises(ValueError, match="id_field"):
        FaultServer(id_field="")
    with pytest.raises(ValueError, match="faults must be a Faults, got dict"):
        FaultServer({"error_rate": 0.1})  # type: ignore[arg-type]


@pytest.mark.parametrize(("seconds", "header"), [(1234567, "1234567"), (0.00001, "0.00001")])
async def test_retry_after_is_written_in_plain_digits(
    fault_server: FaultServer, http_client: httpx.AsyncClient, seconds: float, header: str
) -> None:
    fault_server.set_faults(Faults(fail_statuses=(429,), retry_after_s=seconds))
    response = await http_client.post(fault_server.ingest_url, json=batch("r", 1))
    assert (response.status_code, response.headers["retry-after"]) == (429, header)


def test_command_line_serves_until_interrupted() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [
        sys.executable,
        "-m",
        "asyncsink.testing.fault_server",
        "--port",
        "0",
        "--latency-ms",
        "5",
        "--fail-statuses",
        "418",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        try:
            assert proc.stdout is not None
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                assert selector.select(timeout=30), "the command printed no URL"
            url = proc.stdout.readline().decode().strip()
            assert url.startswith("http://127.0.0.1:")
            with httpx.Client(timeout=10) as http_client:
                assert http_client.post(url + "/ingest", json=[{"id": 1}]).status_code == 418
                assert http_client.post(url + "/ingest", json=[{"id": 1}]).status_code == 200
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=10)
        finally:
            proc.kill()
    assert proc.returncode == 0
    assert b"Warning" not in stderr
