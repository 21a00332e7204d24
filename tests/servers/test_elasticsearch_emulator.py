"""The Elasticsearch test endpoint: the official client works against it unmodified, and
every fault and counter a sink test relies on behaves as documented."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from elasticsearch import AsyncElasticsearch, Elasticsearch, helpers

from tests.servers.elasticsearch import ElasticsearchServer, EsFaults, EsStats

ROOT = Path(__file__).resolve().parents[2]
NDJSON = {"content-type": "application/x-ndjson"}


def ndjson(*lines: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def index_ops(index: str, docs: dict[str, dict[str, Any]]) -> bytes:
    lines: list[dict[str, Any]] = []
    for doc_id, source in docs.items():
        lines += [{"index": {"_index": index, "_id": doc_id}}, source]
    return ndjson(*lines)


def auto_id_ops(index: str, sources: list[dict[str, Any]]) -> bytes:
    lines: list[dict[str, Any]] = []
    for source in sources:
        lines += [{"index": {"_index": index}}, source]
    return ndjson(*lines)


def item_results(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    assert response.status_code == 200, response.text
    return [next(iter(item.items())) for item in response.json()["items"]]


@pytest.fixture(scope="module")
def shared_es() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer() as server:
        yield server


@pytest.fixture
def es(shared_es: ElasticsearchServer) -> ElasticsearchServer:
    """The module's server process, with no faults, no documents and nothing counted."""
    shared_es.set_faults(EsFaults())
    shared_es.reset()
    return shared_es


@pytest.fixture
async def http(es: ElasticsearchServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=es.url, timeout=10) as client:
        yield client


@pytest.fixture
async def official(es: ElasticsearchServer) -> AsyncIterator[AsyncElasticsearch]:
    client = AsyncElasticsearch(es.url, request_timeout=5, max_retries=0)
    try:
        yield client
    finally:
        await client.close()


# -- the official client ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_official_client_passes_product_check_and_reads_info(
    official: AsyncElasticsearch,
) -> None:
    info = await official.info()
    assert info.meta.headers["x-elastic-product"] == "Elasticsearch"
    assert info["version"]["number"].startswith("8.")
    assert info["tagline"] == "You Know, for Search"
    assert await official.ping() is True


@pytest.mark.anyio
async def test_official_client_bulk_mget_count_get_round_trip(
    es: ElasticsearchServer, official: AsyncElasticsearch
) -> None:
    operations: list[dict[str, Any]] = []
    for n in range(5):
        operations += [{"index": {"_index": "people", "_id": str(n)}}, {"name": f"p{n}", "n": n}]
    result = await official.bulk(operations=operations, refresh=True)
    assert result["errors"] is False
    assert [item["index"]["status"] for item in result["items"]] == [201] * 5

    found = await official.mget(index="people", ids=["1", "3", "missing"])
    assert [doc["found"] for doc in found["docs"]] == [True, True, False]
    assert found["docs"][1]["_source"] == {"name": "p3", "n": 3}
    assert (await official.count(index="people"))["count"] == 5
    doc = await official.get(index="people", id="4")
    assert doc["_source"] == {"name": "p4", "n": 4} and doc["_version"] == 1
    assert es.documents("people")["2"] == {"name": "p2", "n": 2}


@pytest.mark.anyio
async def test_async_streaming_bulk_retries_throttled_items_until_every_doc_lands(
    es: ElasticsearchServer, official: AsyncElasticsearch
) -> None:
    es.set_faults(EsFaults(item_throttle_rate=0.2, seed=11))
    expected = {str(n): {"n": n, "text": f"row {n}"} for n in range(3000)}
    actions = ({"_index": "stream", "_id": k, "_source": v} for k, v in expected.items())

    # The helper retries rejected items only with raise_on_error=False; with the default it
    # raises BulkIndexError on the first 429 item.
    stream = helpers.async_streaming_bulk(
        official,
        actions,
        chunk_size=500,
        max_retries=12,
        initial_backoff=0.001,
        max_backoff=0.01,
        raise_on_error=False,
    )
    outcomes = [ok async for ok, _ in stream]

    assert outcomes == [True] * 3000
    assert es.documents("stream") == expected
    stats = es.stats()
    assert stats.items_by_status[429] > 300  # about a fifth of every attempt
    assert stats.items_by_status[201] == 3000
    # Rejected items were not applied, so their re-sends created, never overwrote.
    assert stats.duplicate_applications == 0


def test_sync_helpers_bulk_indexes_every_doc(es: ElasticsearchServer) -> None:
    client = Elasticsearch(es.url, request_timeout=5, max_retries=0)
    try:
        actions = ({"_index": "sync", "_id": str(n), "n": n} for n in range(1200))
        success, errors = helpers.bulk(client, actions, chunk_size=500)
    finally:
        client.close()
    assert (success, errors) == (1200, [])
    assert es.stats().bulk_requests == 3
    assert es.documents("sync")["1199"] == {"n": 1199}


@pytest.mark.anyio
async def test_official_client_sends_api_key_and_gzip_bodies(es: ElasticsearchServer) -> None:
    es.set_faults(EsFaults(require_auth="ApiKey c2VjcmV0"))
    client = AsyncElasticsearch(
        es.url, api_key="c2VjcmV0", http_compress=True, request_timeout=5, max_retries=0
    )
    try:
        result = await client.bulk(operations=[{"index": {"_index": "z", "_id": "1"}}, {"a": 1}])
    finally:
        await client.close()
    assert result["errors"] is False
    assert es.documents("z") == {"1": {"a": 1}}


# -- content negotiation ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_compatibility_media_types_are_echoed_and_unknown_versions_refused(
    http: httpx.AsyncClient,
) -> None:
    for version in ("8", "9"):
        mime = f"application/vnd.elasticsearch+json; compatible-with={version}"
        response = await http.get("/", headers={"accept": mime})
        assert response.status_code == 200
        assert response.headers["content-type"] == mime.replace(" ", "")
    plain = await http.get("/")
    assert plain.headers["content-type"] == "application/json"
    assert plain.headers["x-elastic-product"] == "Elasticsearch"
    refused = await http.get(
        "/", headers={"accept": "application/vnd.elasticsearch+json; compatible-with=5"}
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "media_type_header_exception"
    assert refused.headers["x-elastic-product"] == "Elasticsearch"


# -- bulk semantics ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_create_of_an_existing_id_is_a_409_and_keeps_the_first_source(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = ndjson(
        {"create": {"_index": "c", "_id": "a"}},
        {"v": 1},
        {"create": {"_index": "c", "_id": "a"}},
        {"v": 2},
    )
    response = await http.post("/_bulk", content=body, headers=NDJSON)
    (op1, first), (op2, second) = item_results(response)
    assert (op1, first["status"], first["result"], first["_version"]) == (
        "create",
        201,
        "created",
        1,
    )
    assert isinstance(first["_seq_no"], int) and first["_primary_term"] == 1
    assert (op2, second["status"]) == ("create", 409)
    assert second["error"]["type"] == "version_conflict_engine_exception"
    assert response.json()["errors"] is True
    assert es.documents("c") == {"a": {"v": 1}}


@pytest.mark.anyio
async def test_index_on_existing_id_updates_and_counts_a_duplicate_application(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = index_ops("dup", {"x": {"v": 1}})
    first = item_results(await http.post("/_bulk", content=body, headers=NDJSON))[0][1]
    again = item_results(await http.post("/_bulk", content=body, headers=NDJSON))[0][1]
    assert (first["result"], first["status"]) == ("created", 201)
    assert (again["result"], again["status"], again["_version"]) == ("updated", 200, 2)
    assert again["_seq_no"] > first["_seq_no"]
    assert es.stats().duplicate_applications == 1


@pytest.mark.anyio
async def test_update_doc_as_upsert_creates_merges_and_noops(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    upsert = {"update": {"_index": "u", "_id": "1"}}
    body = ndjson(
        upsert,
        {"doc": {"a": 1, "o": {"x": 1}}, "doc_as_upsert": True},
        upsert,
        {"doc": {"b": 2, "o": {"y": 2}}, "doc_as_upsert": True},
        upsert,
        {"doc": {"b": 2}},
        {"update": {"_index": "u", "_id": "missing"}},
        {"doc": {"a": 1}},
    )
    results = item_results(await http.post("/_bulk", content=body, headers=NDJSON))
    assert [(r["result"] if "result" in r else None, r["status"]) for _, r in results] == [
        ("created", 201),
        ("updated", 200),
        ("noop", 200),
        (None, 404),
    ]
    assert results[3][1]["error"]["type"] == "document_missing_exception"
    assert es.documents("u") == {"1": {"a": 1, "b": 2, "o": {"x": 1, "y": 2}}}


@pytest.mark.anyio
async def test_delete_removes_existing_and_reports_missing_as_not_found(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    await http.post("/_bulk", content=index_ops("d", {"1": {"a": 1}}), headers=NDJSON)
    body = ndjson({"delete": {"_index": "d", "_id": "1"}}, {"delete": {"_index": "d", "_id": "2"}})
    response = await http.post("/_bulk", content=body, headers=NDJSON)
    (_, gone), (_, missing) = item_results(response)
    assert (gone["result"], gone["status"], gone["_version"]) == ("deleted", 200, 2)
    assert (missing["result"], missing["status"]) == ("not_found", 404)
    assert "error" not in missing and response.json()["errors"] is False
    assert es.documents("d") == {}


@pytest.mark.anyio
async def test_mapping_conflict_and_bad_marker_fail_only_their_items(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = index_ops(
        "m",
        {
            "1": {"n": 1, "tags": ["a"], "o": {"k": "s"}},
            "2": {"n": "not a number"},
            "3": {"n": 2.5, "tags": "b", "o": {"k": "t"}},
            "4": {"o": {"k": 7}},
            "5": {"tags": [True]},
            "6": {"n": 3, "_bad": True},
            "7": {"n": None, "fresh": "ok"},
        },
    )
    results = item_results(await http.post("/_bulk", content=body, headers=NDJSON))
    statuses = {r["_id"]: r["status"] for _, r in results}
    assert statuses == {"1": 201, "2": 400, "3": 201, "4": 400, "5": 400, "6": 400, "7": 201}
    errors = {r["_id"]: r["error"]["type"] for _, r in results if "error" in r}
    assert errors["2"] == errors["4"] == errors["5"] == "mapper_parsing_exception"
    assert errors["6"] == "document_parsing_exception"
    assert "[n] of type [long]" in next(r for _, r in results if r["_id"] == "2")["error"]["reason"]
    assert sorted(es.documents("m")) == ["1", "3", "7"]
    assert es.stats().items_by_status == {201: 3, 400: 4}


@pytest.mark.anyio
async def test_index_route_fills_in_index_and_generates_ids(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = ndjson({"index": {}}, {"a": 1}, {"create": {"routing": "r", "pipeline": "p"}}, {"a": 2})
    results = item_results(
        await http.post("/logs/_bulk", params={"refresh": "wait_for"}, content=body, headers=NDJSON)
    )
    ids = [r["_id"] for _, r in results]
    assert len(set(ids)) == 2 and all(len(i) == 20 for i in ids)
    assert sorted(v["a"] for v in es.documents("logs").values()) == [1, 2]


@pytest.mark.anyio
async def test_malformed_bulk_bodies_are_refused_whole(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    good = index_ops("bad", {"1": {"a": 1}})
    cases = {
        good + b'{"index": {"_index": "bad"}}\n{"a": \n': "x_content_parse_exception",
        good + b'{"explode": {}}\n{}\n': "illegal_argument_exception",
        good + b'{"index": {"_index": "bad", "colour": 1}}\n{}\n': "illegal_argument_exception",
        good + b'{"index": {"_index": "bad"}}\n': "illegal_argument_exception",
        good + b'{"index": {"_id": "2"}}\n{}\n': "action_request_validation_exception",
        good
        + b'{"index": {"_index": "bad", "_id": ""}}\n{}\n': "action_request_validation_exception",
        good + b'{"delete": {"_index": "bad"}}\n': "action_request_validation_exception",
        good.rstrip(b"\n"): "illegal_argument_exception",
        b"": "action_request_validation_exception",
    }
    for body, error_type in cases.items():
        response = await http.post("/_bulk", content=body, headers=NDJSON)
        assert response.status_code == 400, body
        assert response.json()["error"]["type"] == error_type, body
        assert response.json()["error"]["root_cause"][0]["type"] == error_type
    assert es.documents("bad") == {}
    assert es.stats().items_by_status == {}


@pytest.mark.anyio
async def test_gzip_and_chunked_request_bodies_are_read(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = index_ops("gz", {"1": {"a": 1}, "2": {"a": 2}})
    zipped = await http.post(
        "/_bulk", content=gzip.compress(body), headers={**NDJSON, "content-encoding": "gzip"}
    )
    assert [r["status"] for _, r in item_results(zipped)] == [201, 201]

    async def pieces() -> AsyncIterator[bytes]:
        for line in index_ops("gz", {"3": {"a": 3}}).splitlines(keepends=True):
            yield line

    chunked = await http.post("/_bulk", content=pieces(), headers=NDJSON)
    assert [r["status"] for _, r in item_results(chunked)] == [201]
    assert es.documents("gz") == {"1": {"a": 1}, "2": {"a": 2}, "3": {"a": 3}}


# -- reads and index admin --------------------------------------------------------------------


@pytest.mark.anyio
async def test_mget_docs_and_ids_forms_report_found_missing_and_unknown_index(
    http: httpx.AsyncClient,
) -> None:
    await http.post("/_bulk", content=index_ops("g", {"1": {"a": 1}}), headers=NDJSON)
    by_docs = await http.post(
        "/_mget",
        json={
            "docs": [
                {"_index": "g", "_id": "1"},
                {"_index": "g", "_id": "2"},
                {"_index": "h", "_id": "1"},
            ]
        },
    )
    one, two, other = by_docs.json()["docs"]
    assert one == {
        "_index": "g",
        "_id": "1",
        "_version": 1,
        "_seq_no": 0,
        "_primary_term": 1,
        "found": True,
        "_source": {"a": 1},
    }
    assert two == {"_index": "g", "_id": "2", "found": False}
    assert other["error"]["type"] == "index_not_found_exception"
    by_ids = await http.request(
        "GET", "/g/_mget", params={"_source": "false"}, content=b'{"ids": ["1"]}'
    )
    assert by_ids.json()["docs"][0]["found"] is True
    assert "_source" not in by_ids.json()["docs"][0]
    unnamed = await http.post("/_mget", json={"ids": ["1"]})
    assert unnamed.status_code == 400
    assert unnamed.json()["error"]["type"] == "action_request_validation_exception"


@pytest.mark.anyio
async def test_index_admin_endpoints(es: ElasticsearchServer, http: httpx.AsyncClient) -> None:
    created = await http.put("/made", json={"mappings": {"properties": {"a": {"type": "long"}}}})
    assert created.json() == {"acknowledged": True, "shards_acknowledged": True, "index": "made"}
    assert (await http.put("/made")).json()["error"]["type"] == "resource_already_exists_exception"
    assert (await http.put("/Upper")).json()["error"]["type"] == "invalid_index_name_exception"
    assert (await http.head("/made")).status_code == 200
    assert (await http.get("/made/_count")).json()["count"] == 0
    assert (await http.post("/made/_refresh")).status_code == 200
    await http.post("/_bulk", content=index_ops("made", {"1": {"a": 1}}), headers=NDJSON)
    assert (await http.get("/made/_doc/1")).json()["_source"] == {"a": 1}
    assert (await http.get("/made/_doc/2")).status_code == 404
    assert (await http.delete("/made")).json() == {"acknowledged": True}
    assert (await http.get("/made/_count")).status_code == 404
    assert (await http.delete("/made")).json()["error"]["type"] == "index_not_found_exception"
    assert es.stats().docs_by_index == {}


# -- faults -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_item_throttling_fails_items_without_applying_them(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    es.set_faults(EsFaults(item_throttle_rate=1.0))
    response = await http.post("/_bulk", content=index_ops("t", {"1": {}, "2": {}}), headers=NDJSON)
    results = item_results(response)
    assert [r["status"] for _, r in results] == [429, 429]
    assert results[0][1]["error"]["type"] == "es_rejected_execution_exception"
    assert response.json()["errors"] is True
    es.set_faults(EsFaults(item_unavailable_rate=1.0))
    response = await http.post("/_bulk", content=index_ops("t", {"1": {}}), headers=NDJSON)
    assert item_results(response)[0][1]["error"]["type"] == "unavailable_shards_exception"
    assert es.documents("t") == {}
    assert es.stats().items_by_status == {429: 2, 503: 1}


@pytest.mark.anyio
async def test_seeded_item_faults_repeat_exactly(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = index_ops("s", {str(n): {"n": n} for n in range(200)})
    patterns = []
    for _ in range(2):
        es.reset()
        es.set_faults(EsFaults(item_throttle_rate=0.3, seed=5))
        results = item_results(await http.post("/_bulk", content=body, headers=NDJSON))
        patterns.append([r["status"] for _, r in results])
    assert patterns[0] == patterns[1]
    assert 20 < patterns[0].count(429) < 100


@pytest.mark.anyio
async def test_whole_request_throttle_and_unavailable_apply_nothing(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    body = index_ops("r", {"1": {"a": 1}})
    for faults, status, error_type in (
        (EsFaults(request_throttle_rate=1.0), 429, "es_rejected_execution_exception"),
        (EsFaults(request_unavailable_rate=1.0), 503, "unavailable_shards_exception"),
    ):
        es.set_faults(faults)
        response = await http.post("/_bulk", content=body, headers=NDJSON)
        assert response.status_code == status
        assert response.json()["error"]["type"] == error_type
        assert response.json()["status"] == status
    stats = es.stats()
    assert stats.responses_by_status == {429: 1, 503: 1}
    assert stats.docs == 0 and stats.items == 0


@pytest.mark.anyio
async def test_fail_statuses_answer_the_next_requests_in_order(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    es.set_faults(EsFaults(fail_statuses=[401, 403, 404]))
    body = index_ops("f", {"1": {"a": 1}})
    responses = [await http.post("/_bulk", content=body, headers=NDJSON) for _ in range(4)]
    assert [r.status_code for r in responses] == [401, 403, 404, 200]
    assert [r.json()["error"]["type"] for r in responses[:3]] == [
        "security_exception",
        "security_exception",
        "index_not_found_exception",
    ]
    assert es.stats().docs_by_index == {"f": 1}


@pytest.mark.anyio
async def test_timeout_fault_never_answers_and_applies_nothing(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    es.set_faults(EsFaults(timeout_rate=1.0, hang_s=5))
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        await http.post("/_bulk", content=index_ops("h", {"1": {}}), headers=NDJSON, timeout=0.3)
    assert time.monotonic() - started < 3
    stats = es.stats()
    assert stats.hung_requests == 1 and stats.docs == 0 and stats.responses_by_status == {}
    es.set_faults(EsFaults())
    assert (await http.get("/")).status_code == 200


@pytest.mark.anyio
async def test_reset_after_apply_then_resend_duplicates_generated_ids_only(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    sources = [{"n": n} for n in range(5)]
    auto_body = auto_id_ops("auto", sources)
    explicit_body = index_ops("explicit", {str(s["n"]): s for s in sources})
    es.set_faults(EsFaults(reset_after_apply_rate=1.0))
    for body in (auto_body, explicit_body):
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await http.post("/_bulk", content=body, headers=NDJSON)
    stats = es.stats()
    assert stats.dropped_connections == 2
    assert stats.docs_by_index == {"auto": 5, "explicit": 5}
    assert stats.duplicate_applications == stats.duplicate_sources == 0

    es.set_faults(EsFaults())
    for body in (auto_body, explicit_body):
        assert (await http.post("/_bulk", content=body, headers=NDJSON)).status_code == 200
    stats = es.stats()
    assert stats.docs_by_index == {"auto": 10, "explicit": 5}
    assert stats.duplicate_sources == 5  # every generated-id doc now exists twice
    assert stats.duplicate_applications == 5  # every explicit id was written twice


@pytest.mark.anyio
async def test_require_auth_answers_401_with_security_error_unless_header_matches(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    es.set_faults(EsFaults(require_auth="Basic dXNlcjpwYXNz"))
    missing = await http.get("/")
    wrong = await http.get("/", headers={"authorization": "Basic bm9wZQ=="})
    right = await http.get("/", headers={"authorization": "Basic dXNlcjpwYXNz"})
    assert (missing.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert missing.json()["error"]["type"] == "security_exception"
    assert "missing authentication credentials" in missing.json()["error"]["reason"]
    assert "unable to authenticate" in wrong.json()["error"]["reason"]
    assert any(v.startswith("Basic") for v in missing.headers.get_list("www-authenticate"))
    assert es.stats().responses_by_status == {401: 2, 200: 1}


@pytest.mark.anyio
async def test_latency_delays_every_answer(
    es: ElasticsearchServer, http: httpx.AsyncClient
) -> None:
    es.set_faults(EsFaults(latency_ms=150))
    started = time.monotonic()
    assert (await http.get("/")).status_code == 200
    assert time.monotonic() - started >= 0.15


@pytest.mark.anyio
async def test_many_concurrent_connections_are_served_together(
    es: ElasticsearchServer,
) -> None:
    es.set_faults(EsFaults(latency_ms=100))
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=es.url, timeout=10, limits=limits) as client:

        async def send(batch: int) -> None:
            body = index_ops("many", {f"{batch}-{n}": {"n": n} for n in range(50)})
            response = await client.post("/_bulk", content=body, headers=NDJSON)
            assert response.json()["errors"] is False

        started = time.monotonic()
        async with anyio.create_task_group() as group:
            for batch in range(64):
                group.start_soon(send, batch)
        elapsed = time.monotonic() - started
    stats = es.stats()
    assert stats.docs_by_index == {"many": 64 * 50}
    assert stats.max_in_flight > 32
    assert elapsed < 3  # 64 requests of 100 ms each, served side by side


# -- control, lifecycle, command line ----------------------------------------------------------


def test_control_methods_reach_the_server_process(es: ElasticsearchServer) -> None:
    assert es.pid is not None and es.pid != os.getpid()
    with httpx.Client(base_url=es.url) as client:
        client.post("/_bulk", content=index_ops("ctl", {"a": {"x": 1}}), headers=NDJSON)
        client.get("/ctl/_count")
    stats = es.stats()
    assert isinstance(stats, EsStats)
    assert (stats.requests, stats.bulk_requests, stats.items) == (2, 1, 1)
    assert stats.internal_errors == 0 and stats.cpu_seconds > 0
    assert es.documents("ctl") == {"a": {"x": 1}}
    assert es.documents("nothing") == {}
    faults = EsFaults(latency_ms=1, seed=3)
    es.set_faults(faults)
    assert es.faults == faults
    es.reset()
    assert es.stats().requests == 0 and es.documents("ctl") == {}


def test_bulk_of_500_docs_costs_little_server_cpu(es: ElasticsearchServer) -> None:
    rows = [{"n": n, "user": f"u{n % 7}", "ok": True, "msg": "hello"} for n in range(500)]
    bodies = [index_ops("cpu", {f"{b}-{n}": row for n, row in enumerate(rows)}) for b in range(20)]
    with httpx.Client(base_url=es.url) as client:
        for body in bodies:
            assert client.post("/_bulk", content=body, headers=NDJSON).status_code == 200
    stats = es.stats()
    assert stats.docs == 10_000
    # About 1-2 ms on a loaded 2-core machine; the bound catches a change of complexity.
    assert stats.cpu_seconds / 20 < 0.010


def test_stop_ends_the_process_and_the_endpoint() -> None:
    server = ElasticsearchServer(EsFaults(latency_ms=1)).start()
    pid, url = server.pid, server.url
    assert pid is not None
    os.kill(pid, 0)  # alive
    server.stop()
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)
    with pytest.raises(RuntimeError):
        server.url  # noqa: B018


@pytest.mark.anyio
async def test_in_thread_server_serves_and_stops() -> None:
    with ElasticsearchServer(in_thread=True) as server:
        assert server.pid is None
        async with httpx.AsyncClient(base_url=server.url) as client:
            response = await client.post(
                "/_bulk", content=index_ops("th", {"1": {}}), headers=NDJSON
            )
        assert response.status_code == 200
        assert server.stats().docs_by_index == {"th": 1}
        url = server.url
    async with httpx.AsyncClient(timeout=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(url)


def test_faults_are_validated_and_hide_credentials() -> None:
    with pytest.raises(ValueError, match="item_throttle_rate"):
        EsFaults(item_throttle_rate=1.5)
    with pytest.raises(ValueError, match="hang_s"):
        EsFaults(hang_s=0)
    with pytest.raises(ValueError, match="fail_statuses"):
        EsFaults(fail_statuses=(42,))
    faults = EsFaults(require_auth="ApiKey secret", latency_ms=5)
    assert "secret" not in repr(faults) and "latency_ms=5" in repr(faults)
    assert EsFaults.from_json(faults.to_json()) == faults


def test_command_line_prints_url_and_serves_until_interrupted() -> None:
    command = [
        sys.executable,
        "-m",
        "tests.servers.elasticsearch",
        "--port",
        "0",
        "--latency-ms",
        "5",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            response = httpx.get(url, timeout=5)
            assert response.status_code == 200
            assert response.headers["x-elastic-product"] == "Elasticsearch"
            process.send_signal(2)
            assert process.wait(timeout=10) == 0
        finally:
            process.kill()
