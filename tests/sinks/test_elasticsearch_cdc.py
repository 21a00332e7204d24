"""Change data capture into the Elasticsearch test endpoint: with ``versionField`` every
key ends with its last change and deleted keys stay deleted, however the faults reorder
the requests; without it, the same run stores an older change last (the negative
control, proving the check can fail)."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import anyio
import pytest

from asyncsink.sinks.elasticsearch import ElasticsearchWriter, create_writer
from tests.servers.elasticsearch import ElasticsearchServer, EsFaults
from tests.sinks.cdc import FAULTS, KEYS, PER_KEY, changes, final_state, wrong_keys

pytestmark = pytest.mark.anyio

ROWS = changes()
EXPECTED = final_state(ROWS)


@pytest.fixture(scope="module")
def es_server() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer() as server:
        yield server


@pytest.fixture
def es(es_server: ElasticsearchServer) -> ElasticsearchServer:
    es_server.set_faults(EsFaults())
    es_server.reset()
    create_index(es_server.url, "events")
    es_server.set_faults(FAULTS)
    return es_server


def create_index(url: str, index: str) -> None:
    """The index exists before the first delete (a delete does not create it)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("PUT", f"/{index}")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def cdc_options(url: str, **overrides: str) -> dict[str, str]:
    base = {"hosts": url, "index": "events", "idField": "id", "operationField": "op",
            "excludeFields": "op", "maxBatchSize": "200", "maxInFlightRequests": "8",
            "maxRetries": "40", "initialBackoffMs": "1", "maxBackoffMs": "50",
            "rateLimiting": "false", "adaptiveConcurrency": "false"}  # fmt: skip
    return {**base, **overrides}


async def write(options: dict[str, str]) -> ElasticsearchWriter:
    writer = create_writer(options)
    with anyio.fail_after(120):
        async with writer:
            await writer.write_all(ROWS)
    return writer


def test_the_workload_has_the_shape_the_issue_asks_for() -> None:
    assert len(ROWS) == KEYS * PER_KEY
    deletes = sum(row["op"] == "delete" for row in ROWS)
    assert 0.1 < deletes / len(ROWS) < 0.2
    assert 0 < len(EXPECTED) < KEYS  # some keys end deleted, most do not
    lsns = [row["lsn"] for row in ROWS]
    assert lsns == sorted(lsns)


async def test_versioned_writes_end_with_every_keys_last_change(es: ElasticsearchServer) -> None:
    writer = await write(cdc_options(es.url, versionField="lsn"))
    stats, seen = writer.statistics(), es.stats()
    assert wrong_keys(EXPECTED, es.documents("events")) == []
    # the faults happened, and reordered writes were refused as stale, not retried
    assert seen.items_by_status.get(503, 0) > 0 and seen.responses_by_status.get(503, 0) > 0
    assert seen.items_by_status.get(409, 0) == stats.skipped_stale > 0
    assert stats.delivered == len(ROWS) and stats.failed == 0


async def test_without_versions_the_same_run_stores_an_older_change_last(
    es: ElasticsearchServer,
) -> None:
    await write(cdc_options(es.url))
    wrong = wrong_keys(EXPECTED, es.documents("events"))
    assert len(wrong) >= 1, "the faults did not reorder any key: the test cannot fail"
    held = es.documents("events")
    last = {row["id"]: row["lsn"] for row in ROWS}
    for key in wrong:  # an older change stored last: an older write, or an older delete
        stored = held.get(key)
        assert (stored is None and key in EXPECTED) or stored["lsn"] < last[key]
