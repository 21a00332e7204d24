"""Idempotency keys, entry identity and accounting of the fault server, from httpx."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from asyncsink.testing import Faults, FaultServer

pytestmark = pytest.mark.anyio


def batch(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "value": i} for i in range(count)]


async def test_reset_after_apply_is_absorbed_by_an_idempotency_key(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    entries = batch("key", 3)
    headers = {"Idempotency-Key": "call-1"}
    fault_server.set_faults(Faults(reset_after_apply_rate=1.0))
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await http_client.post(fault_server.ingest_url, json=entries, headers=headers)
    fault_server.set_faults(Faults())
    response = await http_client.post(fault_server.ingest_url, json=entries, headers=headers)
    assert response.status_code == 200
    assert response.headers["idempotent-replayed"] == "true"
    assert response.json()["items"] == [{"status": 200}] * 3
    stats = fault_server.stats()
    assert (stats.entries_received, stats.duplicates, stats.replays) == (3, 0, 1)


async def test_replay_returns_the_stored_response_without_applying_again(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(bad_record_field="bad"))
    entries = [{"id": "x"}, {"id": "y", "bad": 1}]
    first = await http_client.post(
        fault_server.ingest_url, json=entries, headers={"Idempotency-Key": "r"}
    )
    fault_server.set_faults(Faults())
    # A structured-field string: the quoted form names the same key.
    again = await http_client.post(
        fault_server.ingest_url, json=entries, headers={"Idempotency-Key": '"r"'}
    )
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert fault_server.applied_ids() == ["x"]
    assert fault_server.stats().replays == 1


async def test_same_key_with_another_body_is_422(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    headers = {"Idempotency-Key": "k"}
    assert (
        await http_client.post(fault_server.ingest_url, json=[{"id": 1}], headers=headers)
    ).is_success
    response = await http_client.post(fault_server.ingest_url, json=[{"id": 2}], headers=headers)
    assert response.status_code == 422
    assert fault_server.applied_ids() == [1]
    assert fault_server.stats().mismatches == 1


async def test_same_key_while_in_flight_is_409_and_status_reports_it(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(latency_ms=600))
    headers = {"Idempotency-Key": "slow/key 1"}
    entries = batch("s", 2)
    results: dict[str, httpx.Response] = {}

    async def send(name: str) -> None:
        results[name] = await http_client.post(
            fault_server.ingest_url, json=entries, headers=headers
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(send, "first")
        await anyio.sleep(0.2)
        assert await anyio.to_thread.run_sync(fault_server.key_status, "slow/key 1") == {
            "state": "in_flight"
        }
        tg.start_soon(send, "second")
    assert results["first"].status_code == 200
    assert results["second"].status_code == 409
    assert fault_server.stats().conflicts == 1
    assert fault_server.key_status("slow/key 1") == {
        "state": "completed",
        "status": 200,
        "response": {"errors": False, "items": [{"status": 200}] * 2},
    }
    assert fault_server.key_status("unknown") is None


async def test_a_key_is_not_stored_when_a_fault_struck_before_applying(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    fault_server.set_faults(Faults(fail_statuses=(503,)))
    headers = {"Idempotency-Key": "retry-me"}
    assert (
        await http_client.post(fault_server.ingest_url, json=[{"id": 1}], headers=headers)
    ).status_code == 503
    assert fault_server.key_status("retry-me") is None
    response = await http_client.post(fault_server.ingest_url, json=[{"id": 1}], headers=headers)
    assert response.status_code == 200
    assert "idempotent-replayed" not in response.headers
    assert fault_server.applied_ids() == [1]


async def test_reset_clears_counts_ids_and_keys(
    fault_server: FaultServer, http_client: httpx.AsyncClient
) -> None:
    headers = {"Idempotency-Key": "once"}
    await http_client.post(fault_server.ingest_url, json=[{"id": "z"}], headers=headers)
    fault_server.reset()
    assert fault_server.stats().entries_received == 0
    assert fault_server.applied_ids() == []
    response = await http_client.post(fault_server.ingest_url, json=[{"id": "z"}], headers=headers)
    assert "idempotent-replayed" not in response.headers
    assert fault_server.applied_ids() == ["z"]


async def test_identity_uses_id_field_or_the_canonical_entry() -> None:
    with FaultServer(in_thread=True, id_field="key", idempotency_header="X-Call") as fault_server:
        async with httpx.AsyncClient(timeout=10) as http_client:
            entries = [{"key": "k1", "v": 1}, {"a": 1, "b": 2}, {"b": 2, "a": 1}, {"key": "k1"}]
            await http_client.post(fault_server.ingest_url, json=entries, headers={"X-Call": "c"})
            replay = await http_client.post(
                fault_server.ingest_url, json=entries, headers={"X-Call": "c"}
            )
        assert replay.headers["idempotent-replayed"] == "true"
        assert fault_server.applied_ids() == ["k1", '{"a":1,"b":2}', '{"a":1,"b":2}', "k1"]
        stats = fault_server.stats()
        assert (stats.unique_ids, stats.duplicates, stats.replays) == (2, 2, 1)


async def test_the_key_store_is_bounded() -> None:
    with FaultServer(in_thread=True, idempotency_capacity=2) as fault_server:
        async with httpx.AsyncClient(timeout=10) as http_client:
            for key in ("a", "b", "c", "a"):
                await http_client.post(
                    fault_server.ingest_url, json=[{"id": key}], headers={"Idempotency-Key": key}
                )
        assert fault_server.applied_ids() == ["a", "b", "c", "a"]
        assert fault_server.key_status("b") is None
        assert fault_server.key_status("c") is not None
