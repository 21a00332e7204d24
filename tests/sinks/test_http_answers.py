"""The HTTP sink trusts no 2xx answer that does not really say the entries were stored:
malformed, truncated, wrong-length and wrong-type answers are fuzzed through a real writer
(respx), and the reconcile answers of the idempotency status resource are read as
strictly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import respx

from asyncsink import CallInfo, DeliveryError, FatalError, RetryableError, SinkOptions
from asyncsink.sinks.http import HttpOptions, HttpWriter
from asyncsink.sinks.http.classify import parse_items
from asyncsink.sinks.web.redact import Redactor
from tests.sinks.web_doubles import mocked_web

pytestmark = pytest.mark.anyio

URL = "https://sink.test/ingest"
STATUS_URL = "https://sink.test/status/{key}"
JSON = {"content-type": "application/json"}
ROWS = [{"id": i} for i in range(20)]
RETRIES = 2


def answer(body: bytes, headers: dict[str, str] | None = None, status: int = 200) -> Any:
    return lambda request: httpx.Response(status, content=body, headers=headers or {})


def good(request: httpx.Request) -> httpx.Response:
    count = len(orjson.loads(request.content))
    return httpx.Response(200, json={"errors": False, "items": [{"status": 201}] * count})


class Endpoint:
    """Answers every request with ``reply`` for its first ``bad`` requests, then ``good``."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.requests: list[httpx.Request] = []
        self.reply: Any = good
        self.bad = 10**9
        router.route(url=URL).mock(side_effect=self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.reply if len(self.requests) <= self.bad else good
        response: httpx.Response = reply(request)
        return response


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with mocked_web(assert_all_called=False) as router:
        yield Endpoint(router)


def writer(**http: Any) -> HttpWriter:
    sink = SinkOptions(max_batch_size=100, max_retries=RETRIES, initial_backoff_ms=1,
                       max_backoff_ms=5)  # fmt: skip
    return HttpWriter(HttpOptions(url=URL, **http), options=sink)


def json_error(body: bytes) -> str:
    with pytest.raises(orjson.JSONDecodeError) as caught:
        orjson.loads(body)
    return str(caught.value)


async def deliver(w: HttpWriter) -> HttpWriter:
    async with w:
        await w.write_all(ROWS)
    return w


# Answers that cannot be read: they may be cut short or mangled on the way, so the same
# call is sent again (with the same idempotency key) until retries run out.
UNREADABLE = {
    "not json": (b"{this is not json", JSON),
    "truncated items": (b'{"errors": true, "items": [{"status": 500}', JSON),
    "truncated success": (b'{"errors":false,"items":[{"status":201},{"status":2', JSON),
    "empty but typed json": (b"", JSON),
    "json with a charset": (b"{", {"content-type": "application/json; charset=utf-8"}),
    "vendor json": (b"[1,", {"content-type": "application/vnd.api+json"}),
    "untyped object cut short": (b'{"errors": false, "items": [', None),
}

# Complete JSON answers that do not match the request: sending again cannot help. Each
# with what the message says after "the HTTP 200 answer of POST <url>".
OK_19 = [{"status": 201}] * 19
MISMATCHED = {
    "too few items": ({"errors": False, "items": [{"status": 201}] * 19},
                      " lists 19 items for a request of 20 entries"),
    "too many items": ({"errors": False, "items": [{"status": 201}] * 21},
                       " lists 21 items for a request of 20 entries"),
    "no items at all": ({"errors": False, "items": []},
                        " lists 0 items for a request of 20 entries"),
    "items not a list": ({"errors": False, "items": {"status": 201}},
                         "'s items are an object, not an array"),
    "item not an object": ({"errors": False, "items": [{"status": 201}] * 19 + [201]},
                           "'s item 19 is a number, not an object"),
    "item without status": ({"errors": False, "items": [{"status": 201}] * 19 + [{}]},
                            "'s item 19 has no status"),
    "status as text": ({"errors": False, "items": [{"status": "201"}] * 20},
                       "'s item 0 has a string for status, not a number"),
    "last status as text": ({"errors": False, "items": OK_19 + [{"status": "201"}]},
                            "'s item 19 has a string for status, not a number"),
    "last status out of range": ({"errors": False, "items": OK_19 + [{"status": 99}]},
                                 "'s item 19 has status 99, not an HTTP status"),
    "status as bool": ({"errors": False, "items": [{"status": True}] * 20},
                       "'s item 0 has a boolean for status, not a number"),
    "status as null": ({"errors": False, "items": [{"status": None}] * 20},
                       "'s item 0 has no status"),
    "status out of range": ({"errors": False, "items": [{"status": 2000}] * 20},
                            "'s item 0 has status 2000, not an HTTP status"),
    "status as float": ({"errors": False, "items": [{"status": 201.0}] * 20},
                        "'s item 0 has status 201.0, not an integer"),
    "errors without items": ({"errors": True},
                             " says some entries failed but lists no items"),
    "wrapped twice": ({"errors": False, "items": [{"a": {"b": {"status": 201}}}] * 20},
                      "'s item 0 has no status"),
}  # fmt: skip


@pytest.mark.parametrize(("body", "headers"), UNREADABLE.values(), ids=UNREADABLE.keys())
async def test_an_unreadable_2xx_answer_is_retried_and_never_counted_delivered(
    endpoint: Endpoint, body: bytes, headers: dict[str, str] | None
) -> None:
    endpoint.reply = answer(body, headers)
    w = writer()
    with pytest.raises(DeliveryError) as caught:
        await deliver(w)
    cause = caught.value.__cause__
    assert type(cause) is RetryableError
    size = f"{len(body)} bytes: {json_error(body)}" if body else "empty"
    assert str(cause) == (
        f"the HTTP 200 answer of POST {URL} is not valid JSON ({size}); cut short on the way?"
    )
    stats = w.statistics()
    assert (stats.delivered, stats.failed, stats.requests) == (0, 20, RETRIES + 1)
    keys = {request.headers["idempotency-key"] for request in endpoint.requests}
    assert len(keys) == 1, "the same call is re-sent"


@pytest.mark.parametrize(("payload", "message"), MISMATCHED.values(), ids=MISMATCHED.keys())
async def test_a_2xx_answer_not_matching_the_request_fails_the_writer_with_nothing_delivered(
    endpoint: Endpoint, payload: Any, message: str
) -> None:
    endpoint.reply = answer(orjson.dumps(payload), JSON)
    w = writer()
    with pytest.raises(FatalError) as caught:
        await deliver(w)
    assert str(caught.value) == (
        f"the HTTP 200 answer of POST {URL}{message}: cannot tell which entries were stored"
    )
    assert w.statistics().delivered == 0


@pytest.mark.parametrize("bad", [1, RETRIES])
async def test_the_run_succeeds_once_the_endpoint_answers_well(
    endpoint: Endpoint, bad: int
) -> None:
    endpoint.reply = answer(b'{"errors": true, "items": [{"status": 500}', JSON)
    endpoint.bad = bad
    w = await deliver(writer())
    stats = w.statistics()
    assert (stats.delivered, stats.failed, stats.requests) == (20, 0, bad + 1)
    assert all(len(orjson.loads(r.content)) == 20 for r in endpoint.requests)


async def test_an_item_that_failed_is_retried_even_when_the_answer_says_no_errors(
    endpoint: Endpoint,
) -> None:
    items = [{"status": 201}] * 19 + [{"status": 500}]
    endpoint.reply = answer(orjson.dumps({"errors": False, "items": items}), JSON)
    endpoint.bad = 1
    w = await deliver(writer())
    assert [len(orjson.loads(r.content)) for r in endpoint.requests] == [20, 1]
    assert orjson.loads(endpoint.requests[1].content) == [{"id": 19}]
    assert w.statistics().delivered == 20


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"", None),
        (b"", {"content-type": "text/plain"}),
        (b"OK", {"content-type": "text/plain"}),
        (b"{not json, but labelled text", {"content-type": "text/plain"}),
        (b"accepted", None),
        (b"[1,2]", JSON),
        (b'{"accepted": 20}', JSON),
        (b'{"errors": false}', JSON),
        (b"null", JSON),
    ],
)
async def test_plain_empty_and_itemless_2xx_answers_still_mean_every_entry_landed(
    endpoint: Endpoint, body: bytes, headers: dict[str, str] | None
) -> None:
    endpoint.reply = answer(body, headers)
    w = await deliver(writer())
    assert (w.statistics().delivered, len(endpoint.requests)) == (20, 1)


async def test_a_204_answer_is_a_success_whatever_its_content_type(endpoint: Endpoint) -> None:
    endpoint.reply = answer(b"", JSON, status=204)
    w = await deliver(writer())
    assert (w.statistics().delivered, len(endpoint.requests)) == (20, 1)


async def test_with_partial_failure_parsing_off_only_the_status_is_read(
    endpoint: Endpoint,
) -> None:
    endpoint.reply = answer(b"{this is not json", JSON)
    w = await deliver(writer(parse_partial_failures=False))
    assert w.statistics().delivered == 20


def test_parse_items_applies_the_rule_without_a_writer() -> None:
    redact = Redactor(())
    with pytest.raises(RetryableError, match="the response is not valid JSON"):
        parse_items(b"{not json", 1, redact)
    with pytest.raises(RetryableError):
        parse_items(b"{not json", 1, redact, content_type="application/problem+json")
    assert parse_items(b"{not json", 1, redact, content_type="text/html") is None
    result = parse_items(b'{"errors":false,"items":[{"status":500}]}', 1, redact)
    assert result is not None and list(result.retry) == [0]


def test_the_reason_of_a_partial_failure_is_the_first_retried_entry_s_error() -> None:
    body = b'{"items":[{"status":200},{"status":503,"error":"shard busy"},{"status":500}]}'
    result = parse_items(body, 3, Redactor(("busy",)))
    assert result is not None and list(result.retry) == [1, 2]
    assert result.reason == "entry 1: HTTP 503: shard ***"  # redacted like every message


# ---------------------------------------------------------------------- reconcile


def call_info() -> CallInfo:
    return CallInfo(3, "key-1", "sink/0/0", (4, 5, 6))


def completed(**fields: Any) -> dict[str, Any]:
    return {"state": "completed", **fields}


ITEMS_OK = {"errors": False, "items": [{"status": 201}] * 3}


@pytest.mark.parametrize(
    "payload",
    [
        completed(response=ITEMS_OK),  # no status
        completed(status="200", response=ITEMS_OK),
        completed(status=True, response=ITEMS_OK),
        completed(status=200),  # no response
        completed(status=200, response={"errors": True}),
        completed(status=200, response={"items": "all"}),
        completed(status=200, response={"items": [{"status": 201}, {}, {"status": 201}]}),
        completed(status=200, response={"items": [{"status": 201}, 7, {"status": 201}]}),
        completed(status=200, response={"items": [{"status": "201"}] * 3}),
        completed(status=200, response={"items": [{"status": 201}] * 4}),
        ["completed"],
    ],
)
async def test_a_reconcile_answer_that_cannot_be_read_tells_nothing(payload: Any) -> None:
    with mocked_web() as router:
        router.get(url__startswith="https://sink.test/status/").mock(
            return_value=httpx.Response(200, json=payload)
        )
        async with writer(reconcile_url=STATUS_URL) as w:
            assert await w.reconcile(call_info()) is None


@pytest.mark.parametrize(
    ("payload", "held"),
    [
        (completed(status=200, response=ITEMS_OK), (4, 5, 6)),
        (completed(status=201, response={"accepted": 3}), (4, 5, 6)),
        (completed(status=200, response="OK"), (4, 5, 6)),
        (completed(status=200, response={"errors": False,
                  "items": [{"status": 201}, {"status": 500}, {"status": 201}]}), (4, 6)),
        (completed(status=503, response={"error": "busy"}), ()),
    ],
)  # fmt: skip
async def test_a_readable_reconcile_answer_gives_the_entries_held(
    payload: Any, held: tuple[int, ...]
) -> None:
    with mocked_web() as router:
        router.get(url__startswith="https://sink.test/status/").mock(
            return_value=httpx.Response(200, json=payload)
        )
        async with writer(reconcile_url=STATUS_URL) as w:
            answer = await w.reconcile(call_info())
    assert answer is not None and tuple(answer) == held
