"""The Elasticsearch sink trusts no 2xx ``_bulk`` or ``_mget`` answer that does not really
say which documents are stored: malformed, truncated, empty, wrong-length and wrong-type
answers are fuzzed through a real writer (respx)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import respx

from asyncsink import CallInfo, DeliveryError, FatalError, RetryableError, SinkOptions
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, ElasticsearchWriter, document_id
from asyncsink.sinks.elasticsearch.results import held_by_mget
from tests.sinks.web_doubles import mocked_web

pytestmark = pytest.mark.anyio

HOST = "http://es1.test:9200"
BULK = f"{HOST}/logs/_bulk"
JSON = {"content-type": "application/json"}
ROWS = [{"n": i} for i in range(20)]
RETRIES = 2


def bulk_count(request: httpx.Request) -> int:
    return request.content.count(b"\n") // 2


def good(request: httpx.Request) -> httpx.Response:
    items = [{"index": {"_index": "logs", "status": 201}}] * bulk_count(request)
    return httpx.Response(200, json={"took": 1, "errors": False, "items": items})


def answer(body: bytes, headers: dict[str, str] | None = None) -> Any:
    return lambda request: httpx.Response(200, content=body, headers=headers or {})


class Cluster:
    """Answers ``_bulk`` with ``reply`` for its first ``bad`` requests, then well."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.bulks: list[httpx.Request] = []
        self.reply: Any = good
        self.bad = 10**9
        self.mget: Any = None
        router.post(url=BULK).mock(side_effect=self._bulk)
        router.post(url__startswith=f"{HOST}/logs/_mget").mock(side_effect=self._mget)

    def _bulk(self, request: httpx.Request) -> httpx.Response:
        self.bulks.append(request)
        reply = self.reply if len(self.bulks) <= self.bad else good
        response: httpx.Response = reply(request)
        return response

    def _mget(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self.mget)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with mocked_web(assert_all_called=False) as router:
        yield Cluster(router)


def es_writer(**es: Any) -> ElasticsearchWriter:
    sink = SinkOptions(max_batch_size=100, max_retries=RETRIES, initial_backoff_ms=1,
                       max_backoff_ms=5)  # fmt: skip
    return ElasticsearchWriter(ElasticsearchOptions(hosts=HOST, index="logs", **es), options=sink)


def json_error(body: bytes) -> str:
    with pytest.raises(orjson.JSONDecodeError) as caught:
        orjson.loads(body)
    return str(caught.value)


async def deliver(w: ElasticsearchWriter) -> ElasticsearchWriter:
    async with w:
        await w.write_all(ROWS)
    return w


def items(*inner: Any, count: int = 20) -> bytes:
    listed = list(inner) + [{"index": {"status": 201}}] * (count - len(inner))
    return orjson.dumps({"took": 1, "errors": False, "items": listed})


UNREADABLE = {
    "not json": (b"{this is not json", JSON),
    "truncated": (items(count=20)[:-40], JSON),
    "empty": (b"", JSON),
    "empty and untyped": (b"", None),
    "a proxy's page": (b"<html>signed out</html>", {"content-type": "text/html"}),
}

# Each with what the message says after "the _bulk answer".
MISMATCHED = {
    "null": (b"null", " is null, not an object"),
    "an array": (b"[]", " is an array, not an object"),
    "no items": (b'{"errors": false}', " lists no items"),
    "took only": (b'{"took": 3}', " lists no items"),
    "errors without items": (b'{"errors": true}', " says some documents failed but lists no items"),
    "zero items": (items(count=0), " lists 0 items for a request of 20 documents"),
    "too few": (items(count=19), " lists 19 items for a request of 20 documents"),
    "too many": (items(count=21), " lists 21 items for a request of 20 documents"),
    "items not a list": (b'{"errors": false, "items": "ok"}',
                         "'s items are a string, not an array"),
    "item not an object": (items(201), "'s item 0 is a number, not an object"),
    "another operation": (items({"create": {"status": 201}}), "'s item 0 has no 'index' result"),
    "result not an object": (items({"index": [201]}), "'s item 0 has no 'index' result"),
    "no status": (items({"index": {"_id": "x"}}), "'s item 0 has no status"),
    "status as text": (items({"index": {"status": "201"}}),
                       "'s item 0 has a string for status, not a number"),
    "status as bool": (items({"index": {"status": True}}),
                       "'s item 0 has a boolean for status, not a number"),
    "status out of range": (items({"index": {"status": 42}}),
                            "'s item 0 has status 42, not an HTTP status"),
}  # fmt: skip


@pytest.mark.parametrize(("body", "headers"), UNREADABLE.values(), ids=UNREADABLE.keys())
async def test_an_unreadable_bulk_answer_is_retried_and_never_counted_delivered(
    cluster: Cluster, body: bytes, headers: dict[str, str] | None
) -> None:
    cluster.reply = answer(body, headers)
    w = es_writer()
    with pytest.raises(DeliveryError) as caught:
        await deliver(w)
    cause = caught.value.__cause__
    assert type(cause) is RetryableError
    size = f"{len(body)} bytes: {json_error(body)}" if body else "empty"
    assert str(cause) == f"the _bulk answer is not valid JSON ({size}); cut short on the way?"
    stats = w.statistics()
    assert (stats.delivered, stats.failed, stats.requests) == (0, 20, RETRIES + 1)
    assert len({r.content for r in cluster.bulks}) == 1, "the same documents, the same ids"


@pytest.mark.parametrize(("body", "message"), MISMATCHED.values(), ids=MISMATCHED.keys())
async def test_a_bulk_answer_not_matching_the_request_fails_with_nothing_delivered(
    cluster: Cluster, body: bytes, message: str
) -> None:
    cluster.reply = answer(body, JSON)
    w = es_writer()
    with pytest.raises(FatalError) as caught:
        await deliver(w)
    assert str(caught.value) == (
        f"the _bulk answer{message}: cannot tell which documents were stored"
    )
    assert w.statistics().delivered == 0


@pytest.mark.parametrize("bad", [1, RETRIES])
async def test_the_run_succeeds_once_the_cluster_answers_well(cluster: Cluster, bad: int) -> None:
    cluster.reply = answer(items(count=20)[:-1], JSON)
    cluster.bad = bad
    w = await deliver(es_writer())
    stats = w.statistics()
    assert (stats.delivered, stats.failed, stats.requests) == (20, 0, bad + 1)


async def test_a_failed_item_is_retried_even_when_the_answer_says_no_errors(
    cluster: Cluster,
) -> None:
    cluster.reply = answer(items({"index": {"status": 503}}), JSON)
    cluster.bad = 1
    w = await deliver(es_writer())
    assert [bulk_count(r) for r in cluster.bulks] == [20, 1]
    assert w.statistics().delivered == 20


# ---------------------------------------------------------------------- _mget


def call() -> CallInfo:
    return CallInfo(0, "key", "events/3/1", (3, 4))


def ids() -> list[str]:
    return [document_id("events/3/1", seq) for seq in (3, 4)]


def doc(doc_id: str, **fields: Any) -> dict[str, Any]:
    return {"_index": "logs", "_id": doc_id, **fields}


@pytest.mark.parametrize(
    "make",
    [
        lambda a, b: {"docs": [doc(b, found=True), doc(a, found=True)]},  # swapped
        lambda a, b: {"docs": [doc(a, found=True), doc("other", found=True)]},
        lambda a, b: {"docs": [doc(a, found="true"), doc(b, found=True)]},
        lambda a, b: {"docs": [doc(a), doc(b, found=True)]},  # no found
        lambda a, b: {"docs": [{"found": True}, doc(b, found=True)]},  # no _id
        lambda a, b: {"docs": [doc(a, found=True), [b, True]]},
        lambda a, b: {"docs": [doc(a, found=True)]},
        lambda a, b: {"docs": "all there"},
        lambda a, b: {"found": True},
        lambda a, b: None,
    ],
)
async def test_an_mget_answer_that_cannot_be_read_tells_nothing(
    cluster: Cluster, make: Any
) -> None:
    cluster.mget = make(*ids())
    async with es_writer() as w:
        assert await w.reconcile(call()) is None


async def test_an_mget_answer_for_the_ids_asked_gives_the_documents_held(
    cluster: Cluster,
) -> None:
    a, b = ids()
    cluster.mget = {"docs": [doc(a, found=False), doc(b, found=True)]}
    async with es_writer() as w:
        assert await w.reconcile(call()) == [4]


def test_held_by_mget_checks_ids_only_when_given() -> None:
    body = orjson.dumps({"docs": [{"_id": "x", "found": True}]})
    assert held_by_mget(body, [7]) == [7]
    assert held_by_mget(body, [7], ids=["y"]) is None
    assert held_by_mget(body, [7], ids=["x"]) == [7]
