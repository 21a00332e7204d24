"""The Elasticsearch test endpoint keeps document versions as Elasticsearch does: external
versions must grow (``external``) or not shrink (``external_gte``), a delete leaves a
tombstone that refuses older writes, and versions on operations that take none fail the
whole request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import orjson
import pytest

from tests.servers.elasticsearch import ElasticsearchServer, EsFaults

pytestmark = pytest.mark.anyio

NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def shared_es() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer(in_thread=True) as server:
        yield server


@pytest.fixture
async def http(shared_es: ElasticsearchServer) -> AsyncIterator[httpx.AsyncClient]:
    shared_es.set_faults(EsFaults())
    shared_es.reset()
    async with httpx.AsyncClient(base_url=shared_es.url, timeout=10) as client:
        yield client


def action(op: str, doc_id: str, version: int | None, kind: str = "external") -> dict[str, Any]:
    meta: dict[str, Any] = {"_index": "v", "_id": doc_id}
    if version is not None:
        meta |= {"version": version, "version_type": kind}
    return {op: meta}


async def bulk(http: httpx.AsyncClient, *ops: tuple[str, str, int | None, str]) -> Any:
    lines: list[bytes] = []
    for op, doc_id, version, kind in ops:
        lines.append(orjson.dumps(action(op, doc_id, version, kind)))
        if op != "delete":
            lines.append(orjson.dumps({"n": version}))
    return await http.post("/_bulk", content=b"\n".join(lines) + b"\n", headers=NDJSON)


def items(response: httpx.Response) -> list[tuple[int, str, int | None]]:
    """(status, result or error type, _version) of each item."""
    assert response.status_code == 200, response.text
    found = []
    for item in response.json()["items"]:
        ((_, body),) = item.items()
        what = body["error"]["type"] if "error" in body else body["result"]
        found.append((body["status"], what, body.get("_version")))
    return found


async def test_external_versions_must_grow_and_keep_the_given_number(
    http: httpx.AsyncClient, shared_es: ElasticsearchServer
) -> None:
    answer = await bulk(
        http,
        ("index", "a", 5, "external"),
        ("index", "a", 5, "external"),  # equal: refused
        ("index", "a", 3, "external"),  # older: refused
        ("index", "a", 9, "external"),
    )
    assert items(answer) == [
        (201, "created", 5),
        (409, "version_conflict_engine_exception", None),
        (409, "version_conflict_engine_exception", None),
        (200, "updated", 9),
    ]
    reason = answer.json()["items"][1]["index"]["error"]["reason"]
    assert reason == (
        "[a]: version conflict, current version [5] is higher or equal to the one provided [5]"
    )
    assert shared_es.documents("v") == {"a": {"n": 9}}


async def test_external_gte_takes_an_equal_version_but_not_an_older_one(
    http: httpx.AsyncClient, shared_es: ElasticsearchServer
) -> None:
    answer = await bulk(
        http,
        ("index", "a", 5, "external_gte"),
        ("index", "a", 5, "external_gte"),
        ("index", "a", 4, "external_gte"),
    )
    assert [status for status, _, _ in items(answer)] == [201, 200, 409]
    assert "is higher than the one provided [4]" in answer.text


async def test_a_delete_leaves_a_tombstone_that_refuses_older_writes(
    http: httpx.AsyncClient, shared_es: ElasticsearchServer
) -> None:
    answer = await bulk(
        http,
        ("index", "a", 2, "external"),
        ("delete", "a", 4, "external"),
        ("index", "a", 3, "external"),  # an older change arriving late: stays deleted
        ("delete", "a", 1, "external"),  # an older delete: refused too
        ("delete", "b", 7, "external"),  # nothing to delete, but a tombstone at 7
        ("index", "b", 6, "external"),
        ("index", "a", 5, "external"),  # a newer change brings it back
    )
    assert items(answer) == [
        (201, "created", 2),
        (200, "deleted", 4),
        (409, "version_conflict_engine_exception", None),
        (409, "version_conflict_engine_exception", None),
        (404, "not_found", 7),
        (409, "version_conflict_engine_exception", None),
        (201, "created", 5),
    ]
    assert shared_es.documents("v") == {"a": {"n": 5}}


async def test_internal_versions_count_on_from_a_tombstone(
    http: httpx.AsyncClient, shared_es: ElasticsearchServer
) -> None:
    answer = await bulk(
        http,
        ("index", "a", None, ""),
        ("delete", "a", None, ""),
        ("index", "a", None, ""),
    )
    assert items(answer) == [(201, "created", 1), (200, "deleted", 2), (201, "created", 3)]


@pytest.mark.parametrize(
    ("op", "version", "kind", "reason"),
    [
        ("create", 1, "external", "create operations only support internal versioning"),
        ("update", 1, "external", "version type [EXTERNAL] is not supported by the update API"),
        ("index", 1, "internal", "internal versioning can not be used"),
        ("index", -1, "external", "illegal version value [-1] for version type [EXTERNAL]"),
        ("index", 1, "newest", "No version type match [newest]"),
    ],
)
async def test_versions_an_operation_cannot_take_fail_the_whole_request(
    http: httpx.AsyncClient, shared_es: ElasticsearchServer, op: str, version: int, kind: str,
    reason: str,
) -> None:  # fmt: skip
    meta = action(op, "a", version, kind)
    source = {"doc": {"n": 1}} if op == "update" else {"n": 1}
    body = orjson.dumps(meta) + b"\n" + orjson.dumps(source) + b"\n"
    answer = await http.post("/_bulk", content=body, headers=NDJSON)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "action_request_validation_exception"
    assert reason in error["reason"]
    assert shared_es.documents("v") == {}


async def test_latency_jitter_lets_later_requests_finish_first(
    http: httpx.AsyncClient, shared_es: ElasticsearchServer
) -> None:
    shared_es.set_faults(EsFaults(latency_jitter_ms=50, seed=4))
    finished: list[int] = []

    async def send(n: int) -> None:
        await bulk(http, ("index", f"d{n}", None, ""))
        finished.append(n)

    async with anyio.create_task_group() as tasks:
        for n in range(12):
            tasks.start_soon(send, n)
    assert sorted(finished) == list(range(12)) and finished != list(range(12))
