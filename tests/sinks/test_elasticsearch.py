"""The Elasticsearch sink: bulk bodies, result handling, auth, failover and reconcile against
respx; then end to end through the Elasticsearch-compatible endpoint, where retried,
re-sent and replayed documents must overwrite themselves and never duplicate."""

from __future__ import annotations

import base64
import gzip
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
import respx
from elasticsearch import AsyncElasticsearch, helpers

from asyncsink import (
    BadRecordError,
    CallInfo,
    CallLog,
    DeadLetter,
    DeliveryError,
    FatalError,
    OptionError,
    RetryableError,
    Scope,
    SinkOptions,
    ThrottledError,
)
from asyncsink.sinks.elasticsearch import (
    ElasticsearchOptions,
    ElasticsearchWriter,
    HostPool,
    create_writer,
    document_id,
)
from asyncsink.sinks.elasticsearch.results import error_for_response, held_by_mget, read_bulk_items
from asyncsink.sinks.web.redact import Redactor
from asyncsink.stores.memory import MemoryStore
from tests.durable.harness import Crash
from tests.servers.elasticsearch import ElasticsearchServer, EsFaults
from tests.sinks.web_doubles import mocked_web

pytestmark = pytest.mark.anyio

HOST = "http://es1.test:9200"
HOST2 = "http://es2.test:9200"
SCOPE = Scope("events", 3, 1)
SCOPE_NAME = "events/3/1"
SECRET = "s3cr3t-Key-Zq8"

ITEM_ERRORS = {
    400: {"type": "mapper_parsing_exception", "reason": "failed to parse field [n] of type [long]"},
    401: {"type": "security_exception", "reason": "unable to authenticate"},
    403: {"type": "security_exception", "reason": "action is unauthorized for user"},
    404: {"type": "index_not_found_exception", "reason": "no such index [logs]"},
    409: {"type": "version_conflict_engine_exception", "reason": "document already exists"},
    429: {"type": "es_rejected_execution_exception", "reason": "rejected execution"},
    500: {"type": "exception", "reason": "internal"},
    503: {"type": "unavailable_shards_exception", "reason": "primary shard is not active"},
}


def bulk_operations(request: httpx.Request) -> list[tuple[str, dict[str, Any]]]:
    """(operation, metadata) of every action line of a _bulk request."""
    content = request.content
    if request.headers.get("content-encoding") == "gzip":
        content = gzip.decompress(content)
    lines = content.split(b"\n")
    assert lines.pop() == b""  # the body ends with a newline
    operations = []
    while lines:
        ((op, meta),) = orjson.loads(lines.pop(0)).items()
        operations.append((op, meta))
        if op != "delete":
            lines.pop(0)
    return operations


def bulk_answer(operations: list[tuple[str, dict[str, Any]]], statuses: list[int]) -> Any:
    items = []
    for (op, meta), status in zip(operations, statuses, strict=True):
        item: dict[str, Any] = {"_index": meta.get("_index", "logs"), "_id": meta.get("_id")}
        item["status"] = status
        if status >= 300:
            item["error"] = ITEM_ERRORS[status]
        items.append({op: item})
    return {"took": 1, "errors": any(s >= 300 for s in statuses), "items": items}


class Cluster:
    """A scripted cluster behind respx: records requests, answers _bulk items by script."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.requests: list[httpx.Request] = []
        self.attempts: list[str] = []  # host of every attempt, refused connections included
        self.replies: list[httpx.Response | Exception] = []
        self.items: list[list[int]] = []
        self.held: set[str] = set()
        self.down: set[str] = set()
        router.route().mock(side_effect=self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.attempts.append(request.url.host)
        if request.url.host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.requests.append(request)
        if self.replies:
            reply = self.replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return reply
        path = request.url.path
        if path.endswith("/_bulk"):
            operations = bulk_operations(request)
            statuses = self.items.pop(0) if self.items else [201] * len(operations)
            return httpx.Response(200, json=bulk_answer(operations, statuses))
        if path.endswith("/_mget"):
            ids = orjson.loads(request.content)["ids"]
            docs = [{"_index": "logs", "_id": i, "found": i in self.held} for i in ids]
            return httpx.Response(200, json={"docs": docs})
        return httpx.Response(200, json={"_shards": {"total": 1, "successful": 1, "failed": 0}})

    def bulks(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith("/_bulk")]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with mocked_web(assert_all_called=False) as router:
        yield Cluster(router)


def fast(**overrides: Any) -> SinkOptions:
    base: dict[str, Any] = {"max_batch_size": 100, "initial_backoff_ms": 1, "max_backoff_ms": 20}
    return SinkOptions(**{**base, **overrides})


def es_writer(
    sink: SinkOptions | None = None, *, scoped: bool = False, **es: Any
) -> ElasticsearchWriter:
    call_log = CallLog(MemoryStore(), SCOPE) if scoped else None
    options = ElasticsearchOptions(**{"hosts": HOST, "index": "logs", **es})
    return ElasticsearchWriter(options, options=sink or fast(), call_log=call_log)


async def deliver(w: ElasticsearchWriter, rows: Any) -> ElasticsearchWriter:
    with anyio.fail_after(20):
        async with w:
            await w.write_all(rows)
    return w


class Row:
    """Duck-types pyspark.sql.Row."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def asDict(self, recursive: bool = False) -> dict[str, Any]:  # noqa: N802
        return dict(self._fields)


ROWS = [{"msg": "hi", "n": 1}, {"msg": "yo", "n": 2}]


# ---------------------------------------------------------------------- ids and bodies


def test_derived_ids_are_stable_compact_and_distinct_per_scope_and_sequence() -> None:
    first = document_id(SCOPE_NAME, 7)
    assert first == document_id(SCOPE_NAME, 7)
    assert re.fullmatch(r"[A-Za-z0-9_-]{16}\.7", first)
    ids = {document_id(scope, seq) for scope in ("a/0/0", "a/0/1", "a/1/0") for seq in range(50)}
    assert len(ids) == 150
    assert len(document_id("x" * 500, 2**63)) <= 37


async def test_index_body_is_ndjson_with_ids_derived_from_scope_and_sequence(
    cluster: Cluster,
) -> None:
    await deliver(es_writer(scoped=True), ROWS)
    (request,) = cluster.requests
    assert request.method == "POST"
    assert str(request.url) == f"{HOST}/logs/_bulk"
    id0, id1 = document_id(SCOPE_NAME, 0), document_id(SCOPE_NAME, 1)
    assert (
        request.content
        == (
            f'{{"index":{{"_id":"{id0}"}}}}\n{{"msg":"hi","n":1}}\n'
            f'{{"index":{{"_id":"{id1}"}}}}\n{{"msg":"yo","n":2}}\n'
        ).encode()
    )
    assert request.headers["content-type"] == "application/x-ndjson"
    assert request.headers["accept"] == "application/json"


async def test_mapped_id_index_field_routing_and_pipeline_shape_the_request(
    cluster: Cluster,
) -> None:
    rows = [Row(id="a1", kind="clicks", user="u1", n=1), {"id": 42, "kind": "views", "n": 2}]
    w = es_writer(index=None, index_field="kind", id_field="id", routing_field="user",
                  pipeline="geo ip")  # fmt: skip
    await deliver(w, rows)
    (request,) = cluster.requests
    assert str(request.url) == f"{HOST}/_bulk?pipeline=geo%20ip"
    assert request.content == (
        b'{"index":{"_id":"a1","_index":"clicks","routing":"u1"}}\n'
        b'{"id":"a1","kind":"clicks","user":"u1","n":1}\n'
        b'{"index":{"_id":"42","_index":"views"}}\n'
        b'{"id":42,"kind":"views","n":2}\n'
    )


async def test_derived_id_with_index_field_goes_first_in_the_action_line(
    cluster: Cluster,
) -> None:
    await deliver(es_writer(scoped=True, index=None, index_field="kind", operation="create"),
                  [{"kind": "k1"}])  # fmt: skip
    expected = f'{{"create":{{"_id":"{document_id(SCOPE_NAME, 0)}","_index":"k1"}}}}\n'
    assert cluster.requests[0].content == (expected + '{"kind":"k1"}\n').encode()


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        ("create", b'{"create":{"_id":"a"}}\n{"id":"a","n":1}\n'),
        ("update", b'{"update":{"_id":"a"}}\n{"doc":{"id":"a","n":1},"doc_as_upsert":true}\n'),
        ("delete", b'{"delete":{"_id":"a"}}\n'),
    ],
)
async def test_each_operation_writes_its_action_and_source_lines(
    cluster: Cluster, operation: str, expected: bytes
) -> None:
    await deliver(es_writer(operation=operation, id_field="id"), [{"id": "a", "n": 1}])
    assert cluster.requests[0].content == expected


async def test_entry_size_counts_the_action_line_and_batches_are_cut_by_bytes(
    cluster: Cluster,
) -> None:
    rows = [{"id": f"d{i}", "pad": "x" * 50} for i in range(10)]
    mapped = es_writer(id_field="id")
    entry = mapped.convert(rows[0])
    line = b'{"index":{"_id":"d0"}}\n' + orjson.dumps(rows[0]) + b"\n"
    assert mapped.entry_size(entry) == len(line)
    derived = es_writer().convert(rows[0]).size
    for seq in (0, 12345, 2**64 - 1):
        action = f'{{"index":{{"_id":"{document_id(SCOPE_NAME, seq)}"}}}}\n'
        assert derived >= len(action) + len(line) - 23  # never an underestimate
    assert derived == len(action) + len(line) - 23  # exact for the longest id

    limit = 3 * len(line)
    await deliver(es_writer(fast(max_batch_size_in_bytes=limit, max_record_size_in_bytes=limit),
                            id_field="id"), rows)  # fmt: skip
    sizes = [len(bulk_operations(r)) for r in cluster.bulks()]
    assert sizes == [3, 3, 3, 1]
    assert all(len(r.content) <= limit for r in cluster.bulks())


async def test_a_row_without_its_id_is_a_bad_record_naming_its_position(
    cluster: Cluster,
) -> None:
    rows = [{"id": "a"}, {"id": "b"}, {"other": 1}]
    with pytest.raises(BadRecordError, match="idField") as caught:
        await deliver(es_writer(id_field="id"), rows)
    assert caught.value.position == 2
    letters: list[DeadLetter] = []
    await deliver(es_writer(fast(dead_letter=letters.append), id_field="id"), rows)
    assert [d.position for d in letters] == [2]
    assert "idField" in letters[0].reason and b"other" in letters[0].record
    assert [op[1]["_id"] for op in bulk_operations(cluster.bulks()[-1])] == ["a", "b"]


# ---------------------------------------------------------------------- results


def items_body(op: str, *statuses: int) -> bytes:
    operations = [(op, {"_id": str(i)}) for i in range(len(statuses))]
    return orjson.dumps(bulk_answer(operations, list(statuses)))


def test_item_statuses_decide_what_is_retried_rejected_or_delivered() -> None:
    redact = Redactor([])
    result = read_bulk_items(items_body("index", 201, 200, 429, 503, 500, 400, 409), "index", 7,
                             redact)  # fmt: skip
    assert result is not None
    assert list(result.retry) == [2, 3, 4, 6]
    assert result.throttled
    assert list(result.rejected) == [5]
    assert "mapper_parsing_exception: failed to parse field [n]" in result.rejected[5]
    assert read_bulk_items(items_body("create", 201, 409), "create", 2, redact) is None
    assert read_bulk_items(items_body("delete", 200, 404), "delete", 2, redact) is None
    five = read_bulk_items(items_body("index", 503, 201), "index", 2, redact)
    assert five is not None and list(five.retry) == [0] and not five.throttled
    assert result.reason is not None and result.reason.startswith("document 2: HTTP 429 ")
    assert five.reason is not None and five.reason.startswith("document 0: HTTP 503 ")
    with pytest.raises(FatalError, match="lists 1 items for a request of 2 documents"):
        read_bulk_items(items_body("index", 201), "index", 2, redact)


@pytest.mark.parametrize("status", [401, 403, 404])
def test_an_item_refused_for_auth_or_a_missing_index_fails_the_request(status: int) -> None:
    with pytest.raises(FatalError, match=f"HTTP {status}") as caught:
        read_bulk_items(items_body("index", 201, status), "index", 2, Redactor([]))
    assert caught.value.status == status


async def test_only_failed_documents_are_resent_and_rejected_ones_dead_lettered(
    cluster: Cluster,
) -> None:
    cluster.items = [[201, 429, 400, 503]]
    letters: list[DeadLetter] = []
    rows = [{"n": i} for i in range(4)]
    w = await deliver(es_writer(fast(dead_letter=letters.append), scoped=True), rows)
    first, second = cluster.bulks()
    resent = [meta["_id"] for _, meta in bulk_operations(second)]
    assert resent == [document_id(SCOPE_NAME, 1), document_id(SCOPE_NAME, 3)]
    assert second.content == b"".join(
        line + b"\n" for i, line in enumerate(first.content.split(b"\n")[:-1]) if i // 2 in (1, 3)
    )
    assert [(d.position, d.record) for d in letters] == [(2, b'{"n":2}')]
    assert "mapper_parsing_exception" in letters[0].reason
    stats = w.statistics()
    assert (stats.delivered, stats.dead_lettered, stats.throttled) == (3, 1, 1)


def answer(status: int, body: Any = None, **headers: str) -> httpx.Response:
    request = httpx.Request("POST", f"{HOST}/logs/_bulk")
    return httpx.Response(status, json=body, headers=headers, request=request)


def es_error(error_type: str, reason: str) -> dict[str, Any]:
    return {"error": {"type": error_type, "reason": reason}, "status": 0}


@pytest.mark.parametrize(
    ("status", "kind", "text"),
    [
        (429, ThrottledError, "es_rejected_execution_exception"),
        (503, ThrottledError, "unavailable_shards_exception"),
        (500, RetryableError, "HTTP 500"),
        (502, RetryableError, "HTTP 502"),
        (504, RetryableError, "HTTP 504"),
        (408, RetryableError, "HTTP 408"),
        (401, FatalError, "authentication failed: check apiKey"),
        (403, FatalError, "lack a privilege"),
        (413, FatalError, "lower maxBatchSizeInBytes"),
        (400, FatalError, "illegal_argument_exception"),
    ],
)
def test_whole_request_statuses_are_classified(
    status: int, kind: type[Exception], text: str
) -> None:
    types = {429: "es_rejected_execution_exception", 503: "unavailable_shards_exception"}
    body = es_error(types.get(status, "illegal_argument_exception"), "no")
    error = error_for_response(answer(status, body, **{"Retry-After": "2.5"}), Redactor([]))
    assert type(error) is kind
    assert text in str(error)
    assert error.status == status
    assert error.retry_after == 2.5
    assert "POST http://es1.test:9200/logs/_bulk" in str(error)


def test_a_404_says_whether_the_index_or_the_url_is_missing() -> None:
    not_found = es_error("index_not_found_exception", "no such index [logs]")
    missing = error_for_response(answer(404, not_found), Redactor([]))
    assert isinstance(missing, FatalError) and "create it" in str(missing)
    nowhere = error_for_response(answer(404, None), Redactor([]))
    assert isinstance(nowhere, FatalError) and "check the hosts option" in str(nowhere)


async def test_a_throttled_request_is_resent_identically_after_retry_after(
    cluster: Cluster,
) -> None:
    cluster.replies = [httpx.Response(429, json=es_error("es_rejected_execution_exception", "busy"),
                                      headers={"Retry-After": "0.05"})]  # fmt: skip
    started = time.monotonic()
    w = await deliver(es_writer(fast(max_backoff_ms=1000)), ROWS)
    first, second = cluster.bulks()
    assert first.content == second.content  # same call, same derived ids
    assert time.monotonic() - started >= 0.05
    assert w.statistics().throttled == 1 and w.statistics().delivered == 2


async def test_a_401_fails_at_once_and_shows_no_credential(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = es_error("security_exception", f"unable to authenticate with [ApiKey {SECRET}]")
    cluster.replies = [httpx.Response(401, json=echo)]
    w = es_writer(fast(max_retries=5), api_key=SECRET)
    with pytest.raises(FatalError, match="authentication failed") as caught:
        await deliver(w, ROWS)
    assert len(cluster.requests) == 1
    assert cluster.requests[0].headers["authorization"] == f"ApiKey {SECRET}"
    for shown in (str(caught.value), repr(w), repr(w.es), caplog.text):
        assert SECRET not in shown
    assert "***" in str(caught.value)


# ---------------------------------------------------------------------- headers and options


@pytest.mark.parametrize(
    ("options", "header"),
    [
        ({"api_key": "ZW5jb2RlZA=="}, "ApiKey ZW5jb2RlZA=="),
        ({"api_key": "id1:key1"}, "ApiKey " + base64.b64encode(b"id1:key1").decode()),
        ({"basic_username": "ada", "basic_password": "pw"},
         "Basic " + base64.b64encode(b"ada:pw").decode()),
        ({"bearer_token": "t0k-Zz9"}, "Bearer t0k-Zz9"),
    ],
)  # fmt: skip
async def test_each_kind_of_credentials_sends_its_authorization_header(
    cluster: Cluster, options: dict[str, Any], header: str
) -> None:
    w = await deliver(es_writer(**options), ROWS)
    assert cluster.requests[0].headers["authorization"] == header
    secret = options.get("api_key") or options.get("basic_password") or options["bearer_token"]
    assert secret not in repr(w.es)


def test_two_kinds_of_credentials_contradict_each_other() -> None:
    with pytest.raises(OptionError, match="'apiKey' and 'bearerToken' contradict") as caught:
        ElasticsearchOptions(hosts=HOST, index="x", api_key=SECRET, bearer_token=SECRET)
    assert SECRET not in str(caught.value)


async def test_gzip_and_compatibility_headers(cluster: Cluster) -> None:
    await deliver(es_writer(gzip=True, compatibility_version=9, id_field="msg"), ROWS)
    (request,) = cluster.requests
    assert request.headers["content-encoding"] == "gzip"
    assert gzip.decompress(request.content) == (
        b'{"index":{"_id":"hi"}}\n{"msg":"hi","n":1}\n{"index":{"_id":"yo"}}\n{"msg":"yo","n":2}\n'
    )
    compat = "; compatible-with=9"
    assert request.headers["content-type"] == "application/vnd.elasticsearch+x-ndjson" + compat
    assert request.headers["accept"] == "application/vnd.elasticsearch+json" + compat


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"index": "logs"}, "option 'hosts'"),
        ({"hosts": HOST}, "set option 'index'"),
        ({"hosts": HOST, "index": "Logs"}, "option 'index': got 'Logs', expected the name"),
        ({"hosts": HOST, "index": "a,b"}, "option 'index': got 'a,b'"),
        ({"hosts": HOST, "index": "a b"}, "option 'index': got 'a b'"),
        ({"hosts": HOST, "index": "logs-*"}, "option 'index': got 'logs-*'"),
        ({"hosts": HOST, "index": "-logs"}, "not starting with '_', '-' or '+'"),
        ({"hosts": HOST, "index": "a#b"}, "option 'index': got 'a#b'"),
        ({"hosts": HOST, "index": ".."}, "not '.' or '..'"),
        ({"hosts": HOST, "index": "x" * 256}, "at most 255 bytes"),
        ({"hosts": "es1:9200", "index": "x"}, "http:// or https://"),
        ({"hosts": f"http://ada:{SECRET}@es1", "index": "x"}, "basicUsername and basicPassword"),
        ({"hosts": f"ada:{SECRET}@es1:9200", "index": "x"}, "'***@es1:9200'"),
        ({"hosts": HOST, "index": "x", "operation": "upsert"}, "index, create, update, delete"),
        ({"hosts": HOST, "index": "x", "operation": "delete"}, "needs option 'idField'"),
        ({"hosts": HOST, "index": "x", "compatibilityVersion": "7"}, "8 or 9"),
        ({"hosts": HOST, "index": "x", "refresh": "maybe"}, "true or false"),
        ({"hosts": HOST, "index": "x", "indexFeld": "k"}, "unknown option 'indexFeld'"),
    ],
)
def test_invalid_options_are_refused_with_their_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=re.escape(message)) as caught:
        create_writer(options)
    assert SECRET not in str(caught.value)


def test_create_writer_reads_both_option_groups_case_insensitively() -> None:
    w = create_writer({"HOSTS": f"{HOST}, {HOST2}/", "Index": "logs", "maxbatchsize": "7",
                       "OPERATION": "Create", "compatibilityVersion": "8",
                       "gzip": "true"})  # fmt: skip
    assert w.es.host_urls == (HOST, HOST2)
    assert (w.options.max_batch_size, w.es.operation, w.es.compatibility_version) == (
        7,
        "create",
        8,
    )
    assert w.es.gzip


# ---------------------------------------------------------------------- failover, reconcile


def test_host_pool_rotates_and_benches_a_failed_host_with_doubling_pauses() -> None:
    now = [0.0]
    pool = HostPool(["a", "b", "c"], clock=lambda: now[0])
    assert [pool.order()[0] for _ in range(4)] == ["a", "b", "c", "a"]
    assert pool.failed("b") == 1.0
    assert pool.order() == ["c", "a", "b"]  # b's turn, but it sits out: it goes last
    assert pool.order() == ["c", "a", "b"]
    assert pool.order() == ["a", "c", "b"]
    now[0] = 0.25
    assert pool.failed("b") == 0.75  # tried again while out: the same outage, not doubled
    now[0] = 1.5
    assert not pool.is_sitting_out("b")
    assert pool.failed("b") == 2.0  # failed again once back: doubled
    now[0] = 3.5
    assert not pool.is_sitting_out("b") and pool.order() == ["b", "c", "a"]
    pool.succeeded("b")
    assert pool.failed("b") == 1.0  # a success starts the pauses over


async def test_a_node_that_refuses_connections_is_skipped(cluster: Cluster) -> None:
    cluster.down = {"es1.test"}
    rows = [{"n": i} for i in range(4)]
    w = es_writer(fast(max_batch_size=1, max_in_flight_requests=1), hosts=f"{HOST},{HOST2}")
    await deliver(w, rows)
    assert [r.url.host for r in cluster.bulks()] == ["es2.test"] * 4
    assert cluster.attempts.count("es1.test") == 1  # it sits out after the first refusal
    assert w.statistics().requests_failed == 0


async def test_no_reachable_node_is_retryable_until_retries_run_out(cluster: Cluster) -> None:
    cluster.down = {"es1.test", "es2.test"}
    w = es_writer(fast(max_retries=2), hosts=f"{HOST},{HOST2}")
    with pytest.raises(DeliveryError) as caught:
        await deliver(w, ROWS)
    assert isinstance(caught.value.__cause__, RetryableError)
    assert "no Elasticsearch node could be connected to" in str(caught.value)
    assert w.statistics().requests_failed == 3


async def test_reconcile_asks_mget_for_the_derived_ids_of_the_call(cluster: Cluster) -> None:
    cluster.held = {document_id(SCOPE_NAME, 3), document_id(SCOPE_NAME, 5)}
    call = CallInfo(0, "key", SCOPE_NAME, (3, 4, 5))
    async with es_writer() as w:
        assert await w.reconcile(call) == [3, 5]
    (request,) = cluster.requests
    assert str(request.url) == f"{HOST}/logs/_mget?_source=false"
    assert orjson.loads(request.content) == {"ids": [document_id(SCOPE_NAME, s) for s in (3, 4, 5)]}


def test_mget_answers_read_as_held_documents_or_as_unknown() -> None:
    found = {"docs": [{"_id": "a", "found": True}, {"_id": "b", "found": False}]}
    assert held_by_mget(orjson.dumps(found), [4, 5]) == [4]
    gone = {"docs": [{"_id": "a", "error": {"type": "index_not_found_exception"}}]}
    assert held_by_mget(orjson.dumps(gone), [4]) == []
    broken = {"docs": [{"_id": "a", "error": {"type": "shard_failure"}}]}
    assert held_by_mget(orjson.dumps(broken), [4]) is None
    assert held_by_mget(orjson.dumps(found), [4]) is None  # not one doc per id
    assert held_by_mget(b"<html>", [4]) is None


@pytest.mark.parametrize("options", [{"id_field": "id"}, {"routing_field": "r"},
                                     {"operation": "update"}])  # fmt: skip
async def test_reconcile_cannot_tell_without_derived_ids_on_default_routing(
    cluster: Cluster, options: dict[str, Any]
) -> None:
    async with es_writer(**options) as w:
        assert await w.reconcile(CallInfo(0, "key", SCOPE_NAME, (1,))) is None
    assert cluster.requests == []


async def test_refresh_follows_the_last_bulk_only_when_asked_and_all_went_well(
    cluster: Cluster,
) -> None:
    await deliver(es_writer(refresh=True, index=None, index_field="k"), [{"k": "b"}, {"k": "a"}])
    assert [r.url.path for r in cluster.requests] == ["/_bulk", "/a,b/_refresh"]
    cluster.requests.clear()
    await deliver(es_writer(), ROWS)
    assert [r.url.path for r in cluster.requests] == ["/logs/_bulk"]
    cluster.requests.clear()
    with pytest.raises(ZeroDivisionError):
        async with es_writer(refresh=True) as w:
            await w.write_all(ROWS)
            await w.flush()
            raise ZeroDivisionError
    assert [r.url.path for r in cluster.requests] == ["/logs/_bulk"]


async def test_a_failed_refresh_fails_the_writer_before_the_scope_completes(
    cluster: Cluster,
) -> None:
    store = MemoryStore()
    cluster.replies = [httpx.Response(200, json=bulk_answer([("index", {})] * 2, [201, 201])),
                       httpx.Response(403, json=es_error("security_exception", "no"))]  # fmt: skip
    w = ElasticsearchWriter(ElasticsearchOptions(hosts=HOST, index="logs", refresh=True),
                            options=fast(), call_log=CallLog(store, SCOPE))  # fmt: skip
    with pytest.raises(FatalError, match="HTTP 403"):
        await deliver(w, ROWS)
    state = await store.load(SCOPE)
    assert state is not None and not state.completed


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def shared_es() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer() as server:
        yield server


@pytest.fixture
def es(shared_es: ElasticsearchServer) -> ElasticsearchServer:
    shared_es.set_faults(EsFaults())
    shared_es.reset()
    return shared_es


def rows(count: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "n": i, "text": f"row {i}"} for i in range(count)]


def spark_options(url: str, **overrides: str) -> dict[str, str]:
    base = {"hosts": url, "index": "events", "maxBatchSize": "200", "maxInFlightRequests": "8",
            "maxRetries": "30", "initialBackoffMs": "1", "maxBackoffMs": "50"}  # fmt: skip
    return {**base, **overrides}


async def write(w: ElasticsearchWriter, data: list[dict[str, Any]]) -> ElasticsearchWriter:
    with anyio.fail_after(40):
        async with w:
            await w.write_all(data)
    return w


def sources(es: ElasticsearchServer, index: str) -> list[Any]:
    return sorted(es.documents(index).values(), key=lambda doc: doc["n"])


async def test_throttled_items_unavailable_requests_and_timeouts_lose_and_repeat_nothing(
    es: ElasticsearchServer,
) -> None:
    # 70 requests or more, however the batches are cut: at a tenth of them hanging, a run
    # without one (0.9 ** 70, under 0.1%) is as good as impossible.
    es.set_faults(EsFaults(item_throttle_rate=0.1, request_unavailable_rate=0.1,
                           timeout_rate=0.1, hang_s=1.0, seed=21))  # fmt: skip
    data = rows(3000)
    w = await write(create_writer(spark_options(es.url, requestTimeoutMs="500")), data)
    stats, mine = es.stats(), w.statistics()
    assert sources(es, "events") == data
    assert stats.docs_by_index == {"events": 3000}
    assert stats.items_by_status.get(429, 0) > 0 and stats.responses_by_status.get(503, 0) > 0
    assert stats.hung_requests > 0 and mine.timeouts >= stats.hung_requests
    # None of these faults applies anything: a document is applied twice only when a slow
    # (not hung) request timed out on a busy machine and was re-sent onto the same ids.
    slow = mine.timeouts - stats.hung_requests
    assert stats.duplicate_applications <= slow * 200
    assert mine.delivered == 3000 and stats.internal_errors == 0


async def test_answers_lost_after_apply_are_resent_and_overwrite_the_same_ids(
    es: ElasticsearchServer,
) -> None:
    es.set_faults(EsFaults(reset_after_apply_rate=0.2, item_throttle_rate=0.05, seed=5))
    data = rows(3000)
    w = await write(create_writer(spark_options(es.url)), data)
    stats = es.stats()
    assert stats.dropped_connections > 0
    assert sources(es, "events") == data
    assert stats.docs_by_index == {"events": 3000}  # derived ids: no second document
    assert stats.duplicate_sources == 0
    # each document of a lost answer was applied again onto its own id
    assert 0 < stats.duplicate_applications <= stats.dropped_connections * 200
    assert w.statistics().delivered == 3000


async def test_mapping_errors_go_to_the_dead_letter_file(
    es: ElasticsearchServer, tmp_path: Path
) -> None:
    data: list[dict[str, Any]] = rows(300)
    data[10] = {**data[10], "n": "not a number"}
    data[250] = {**data[250], "_bad": True}
    dead = tmp_path / "dead" / "letters.jsonl"
    w = await write(create_writer(spark_options(es.url, deadLetter=str(dead))), data)
    letters = [orjson.loads(line) for line in dead.read_bytes().splitlines()]
    # requests complete in any order, so the file's lines may too
    assert sorted((d["position"], orjson.loads(d["record"])) for d in letters) == [
        (10, data[10]), (250, data[250])
    ]  # fmt: skip
    assert "mapper_parsing_exception" in letters[0]["reason"]
    assert "document_parsing_exception" in letters[1]["reason"]
    good = [row for i, row in enumerate(data) if i not in (10, 250)]
    assert sources(es, "events") == good
    assert w.statistics().dead_lettered == 2


async def test_a_mapping_error_without_dead_letter_fails_naming_the_position(
    es: ElasticsearchServer,
) -> None:
    data: list[dict[str, Any]] = rows(50)
    data[37] = {**data[37], "n": "oops"}
    with pytest.raises(BadRecordError, match="mapper_parsing_exception") as caught:
        await write(create_writer(spark_options(es.url)), data)
    assert caught.value.position == 37


async def test_refused_credentials_fail_fast_and_right_ones_deliver(
    es: ElasticsearchServer,
) -> None:
    es.set_faults(EsFaults(require_auth=f"ApiKey {SECRET}"))
    started = time.monotonic()
    with pytest.raises(FatalError, match="HTTP 401") as caught:
        await write(create_writer(spark_options(es.url, apiKey="wrong-" + SECRET)), rows(2000))
    assert time.monotonic() - started < 5
    assert SECRET not in str(caught.value)
    assert es.stats().bulk_requests <= 8  # of 10: only those already in flight, no retries
    await write(create_writer(spark_options(es.url, apiKey=SECRET)), rows(10))
    assert len(es.documents("events")) == 10


async def test_official_bulk_helper_and_asyncsink_end_with_identical_documents(
    es: ElasticsearchServer,
) -> None:
    es.set_faults(EsFaults(item_throttle_rate=0.05, seed=9))
    data = rows(2000)
    client = AsyncElasticsearch(es.url, request_timeout=10, max_retries=0)
    try:
        actions = ({"_index": "reference", "_id": row["id"], "_source": row} for row in data)
        outcomes = [ok async for ok, _ in helpers.async_streaming_bulk(
            client, actions, chunk_size=200, raise_on_error=False, max_retries=20,
            initial_backoff=0.01, max_backoff=0.05)]  # fmt: skip
    finally:
        await client.close()
    assert outcomes.count(True) == 2000
    await write(create_writer(spark_options(es.url, index="ours", idField="id")), data)
    reference, ours = es.documents("reference"), es.documents("ours")
    assert ours == reference
    assert len(ours) == 2000


class CrashingWriter(ElasticsearchWriter):
    """Dies once its ``crash_on``-th request was applied, before the answer is recorded."""

    crash_on = 3
    sent = 0

    async def submit_request_entries(self, entries: list[Any]) -> Any:
        result = await super().submit_request_entries(entries)
        self.sent += 1
        if self.sent == self.crash_on:
            raise Crash("died after the bulk request was applied")
        return result


def attempt(cls: type[ElasticsearchWriter], store: MemoryStore, url: str,
            **es: str) -> ElasticsearchWriter:  # fmt: skip
    opts = spark_options(url, maxBatchSize="100", maxInFlightRequests="1", **es)
    writer = create_writer(opts)
    return cls(writer.es, options=writer.options, call_log=CallLog(store, SCOPE))


@pytest.mark.parametrize("ids", ["derived", "mapped"])
async def test_replay_after_a_crash_between_send_and_record_duplicates_nothing(
    es: ElasticsearchServer, ids: str
) -> None:
    store = MemoryStore()
    data = rows(1000)
    extra = {"idField": "id"} if ids == "mapped" else {}
    with pytest.raises((Crash, BaseExceptionGroup)):
        await write(attempt(CrashingWriter, store, es.url, **extra), data)
    assert es.stats().docs_by_index == {"events": 300}
    retry = await write(attempt(ElasticsearchWriter, store, es.url, **extra), data)
    stats, replay = es.stats(), retry.statistics()
    assert sources(es, "events") == data
    assert stats.docs_by_index == {"events": 1000}
    if ids == "derived":
        # the unfinished call was settled by looking its documents up, not re-sent
        assert replay.reconciled == 1 and stats.mget_requests == 1
        assert stats.duplicate_applications == 0
        assert replay.skipped == 300 and replay.delivered == 700
    else:
        # mapped ids cannot be looked up: the call is re-sent as it was, onto the same ids
        assert replay.reconciled == 0 and replay.resent_calls == 1
        assert stats.duplicate_applications == 100
        assert replay.skipped == 200 and replay.delivered == 800


async def test_the_shims_own_logger_is_masked_while_the_writer_is_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncsink.elasticsearch")
    writer = create_writer({"hosts": "http://127.0.0.1:9", "index": "i", "apiKey": "s3cr3t-key"})
    async with writer:
        logging.getLogger("asyncsink.elasticsearch").warning("key is s3cr3t-key")
    assert "s3cr3t-key" not in caplog.text
    assert "key is ***" in caplog.text
