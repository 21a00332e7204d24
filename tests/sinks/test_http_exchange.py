"""The two transports give the same outcomes: a writer's own requests go through
``AiohttpTransport``, those of a writer given an httpx transport through ``HttpxTransport``
(here httpx's own HTTP/1.1 stack, against the same socket server). Delivered batches,
per-entry failures, ``Retry-After``, 429 and 5xx, timeouts, refused connections, compressed
answers, hooks and masked secrets must not tell them apart."""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import orjson
import pytest

from asyncsink import CallInfo, SinkOptions, SubmitResult
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, ElasticsearchWriter
from asyncsink.sinks.http import HttpOptions, HttpWriter
from asyncsink.sinks.web.aiohttp_transport import AiohttpTransport
from asyncsink.sinks.web.transport import Answer
from tests.sinks.test_http_transport import answer, read_request, serve

pytestmark = pytest.mark.anyio

ROUTES = ["direct", "httpx"]
SECRET = "S3cret-T0ken-123"
ROWS = [{"id": 1}, {"id": 2}, {"id": 3}]

Reply = Callable[[str, dict[str, str], bytes], bytes]


def reply_json(status: str, payload: Any, *headers: str) -> Reply:
    body = orjson.dumps(payload)
    return lambda line, headers_, request: answer(
        status, body, "Content-Type: application/json", *headers
    )


def item_statuses(*statuses: int, error: str = "bad value") -> dict[str, Any]:
    listed = [{"status": s} if 200 <= s <= 299 else {"status": s, "error": error} for s in statuses]
    return {"errors": any(not 200 <= s <= 299 for s in statuses), "items": listed}


class Recorder(HttpWriter):
    """Records what each ``submit_request_entries`` returned or raised."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: list[tuple[Any, ...]] = []
        self.routes: list[bool] = []

    async def submit_request_entries(self, entries: list[bytes]) -> SubmitResult | None:
        self.routes.append(isinstance(self._web, AiohttpTransport))
        try:
            result = await super().submit_request_entries(entries)
        except Exception as exc:
            self.outcomes.append(describe(exc))
            raise
        self.outcomes.append(("result", result))
        return result


def describe(exc: BaseException) -> tuple[Any, ...]:
    """An error as the sink reports it; the detail a client library words its own way
    (after the request's method and URL) is left out."""
    message = str(exc)
    if "): " in message:
        message = message.split("): ")[0] + ")"
    retry_after = getattr(exc, "retry_after", None)
    return (type(exc).__name__, message, retry_after, getattr(exc, "status", None))


def open_writer(route: str, url: str, **http: Any) -> Recorder:
    transport = None if route == "direct" else httpx.AsyncHTTPTransport()
    sink = SinkOptions(max_retries=0, initial_backoff_ms=1, max_backoff_ms=5)
    return Recorder(HttpOptions(url=url, **http), options=sink, transport=transport)


@asynccontextmanager
async def endpoint(
    reply: Reply, seen: list[tuple[str, dict[str, str], bytes]] | None = None
) -> AsyncIterator[str]:
    """A keep-alive HTTP/1.1 server answering every request with ``reply``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                line, headers, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if seen is not None:
                seen.append((line, headers, body))
            writer.write(reply(line, headers, body))
            await writer.drain()

    async with serve(handler) as url:
        yield url


async def run(route: str, url: str, **http: Any) -> tuple[Recorder, Any]:
    """The writer's outcomes delivering ``ROWS`` in one request, and what it raised."""
    writer = open_writer(route, f"{url}/in", **http)
    raised: Any = None
    with anyio.fail_after(10):
        try:
            async with writer:
                await writer.write_all(ROWS)
        except Exception as exc:
            raised = type(exc).__name__
    assert writer.routes and set(writer.routes) == {route == "direct"}
    return writer, raised


async def both(reply: Reply, **http: Any) -> list[tuple[Any, ...]]:
    """The outcomes of both routes against one endpoint, checked to be the same."""
    async with endpoint(reply) as url:
        direct, direct_raised = await run("direct", url, **http)
        fallback, fallback_raised = await run("httpx", url, **http)
    assert direct.outcomes == fallback.outcomes
    assert direct_raised == fallback_raised
    assert direct.statistics().delivered == fallback.statistics().delivered
    return direct.outcomes


async def test_a_delivered_batch_and_the_request_that_carried_it_are_the_same() -> None:
    requests: dict[str, tuple[str, dict[str, str], bytes]] = {}
    for route in ROUTES:
        seen: list[tuple[str, dict[str, str], bytes]] = []
        async with endpoint(reply_json("200 OK", item_statuses(201, 201, 201)), seen) as url:
            writer = open_writer(route, f"{url}/in?a=1&b=%2F", bearer_token=SECRET)
            async with writer:
                await writer.write_all(ROWS)
        assert writer.outcomes == [("result", None)]
        assert writer.statistics().delivered == 3
        (requests[route],) = seen
    for line, headers, body in requests.values():
        assert line == "POST /in?a=1&b=%2F HTTP/1.1"
        assert body == b'[{"id":1},{"id":2},{"id":3}]'
        assert headers["content-type"] == "application/json"
        assert headers["authorization"] == f"Bearer {SECRET}"
        assert headers["content-length"] == str(len(body))
        assert len(headers["idempotency-key"]) == 36
        assert set(headers["accept-encoding"].replace(" ", "").split(",")) >= {"gzip", "deflate"}
        assert "cookie" not in headers


async def test_per_entry_failures_and_retry_after_are_read_the_same() -> None:
    reply = reply_json("200 OK", item_statuses(201, 400, 503), "Retry-After: 1.5")
    outcomes = await both(reply)
    expected = SubmitResult(
        retry=[2],
        rejected={1: "HTTP 400: bad value"},
        throttled=True,
        retry_after=1.5,
        reason="entry 2: HTTP 503: bad value",
    )
    assert outcomes[0] == ("result", expected)


@pytest.mark.parametrize(
    ("status", "error"),
    [("429 Too Many Requests", "ThrottledError"), ("503 Service Unavailable", "ThrottledError"),
     ("500 Internal Server Error", "RetryableError"), ("400 Bad Request", "FatalError")],
)  # fmt: skip
async def test_a_refusing_status_is_the_same_error_with_its_retry_after(
    status: str, error: str
) -> None:
    reply = reply_json(status, {"error": "busy"}, "Retry-After: 2")
    outcomes = await both(reply)
    name, message, retry_after, code = outcomes[0]
    assert (name, retry_after, code) == (error, 2.0, int(status[:3]))
    assert message.startswith(f"HTTP {status} from POST http://127.0.0.1:")
    assert '/in: {"error":"busy"}' in message


async def test_a_redirect_is_not_followed_on_either_route() -> None:
    reply = reply_json("308 Permanent Redirect", {}, "Location: http://elsewhere.test/in")
    outcomes = await both(reply)
    assert outcomes[0][0] == "FatalError"
    assert "set url to the final location http://elsewhere.test/in" in outcomes[0][1]


async def test_a_silent_server_is_a_read_timeout_on_either_route() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the client gives up

    outcomes = []
    async with serve(handler) as url:
        for route in ROUTES:
            writer = open_writer(route, f"{url}/in", read_timeout_ms=200)
            with anyio.fail_after(10), pytest.raises(Exception):  # noqa: B017
                async with writer:
                    await writer.write_all(ROWS)
            outcomes.append(writer.outcomes[0])
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "RetryableError"
    assert outcomes[0][1].startswith("request timed out: ReadTimeout (POST http://127.0.0.1:")


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    await reader.read()  # until the client gives up


@pytest.mark.parametrize("route", ROUTES)
async def test_a_read_timeout_no_shorter_than_the_request_timeout_leaves_it_to_the_core(
    route: str,
) -> None:
    async with serve(silent) as url:
        writer = Recorder(
            HttpOptions(url=f"{url}/in", read_timeout_ms=300),
            options=SinkOptions(request_timeout_ms=300, max_retries=0, initial_backoff_ms=1),
            transport=None if route == "direct" else httpx.AsyncHTTPTransport(),
        )
        with anyio.fail_after(10), pytest.raises(Exception):  # noqa: B017
            async with writer:
                await writer.write_all(ROWS)
    assert writer.statistics().timeouts == 1
    assert writer.outcomes == []  # no ReadTimeout: the core's timeout cancelled the request


@pytest.mark.parametrize("route", ROUTES)
async def test_a_request_the_core_does_not_bound_keeps_its_read_timeout(route: str) -> None:
    async with serve(silent) as url:
        writer = open_writer(
            route, f"{url}/in", read_timeout_ms=200, reconcile_url=f"{url}/status/{{key}}"
        )
        async with writer:
            with anyio.fail_after(10):
                held = await writer.reconcile(CallInfo(1, "key", "s", (0, 1)))
    assert held is None  # the lookup timed out: the call is re-sent as it was


async def test_a_refused_connection_is_a_connect_error_on_either_route() -> None:
    async with serve(lambda r, w: asyncio.sleep(0)) as url:
        pass  # the port is free again
    outcomes = []
    for route in ROUTES:
        writer = open_writer(route, f"{url}/in")
        with anyio.fail_after(10), pytest.raises(Exception):  # noqa: B017
            async with writer:
                await writer.write_all(ROWS)
        outcomes.append(writer.outcomes[0])
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][:2] == (
        "RetryableError",
        f"request failed without an answer: ConnectError (POST {url}/in)",
    )


def compressed(coding: str, compress: Callable[[bytes], bytes]) -> Reply:
    body = compress(orjson.dumps(item_statuses(201, 422, 201, error="no such field")))
    return lambda line, headers, request: answer(
        "200 OK", body, "Content-Type: application/json", f"Content-Encoding: {coding}"
    )


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("coding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", raw_deflate),
     ("identity", lambda data: data),
     ("gzip, deflate", lambda data: zlib.compress(gzip.compress(data)))],
)  # fmt: skip
async def test_a_compressed_answer_is_decoded_on_either_route(
    coding: str, compress: Callable[[bytes], bytes]
) -> None:
    outcomes = await both(compressed(coding, compress))
    expected = SubmitResult(retry=[], rejected={1: "HTTP 422: no such field"})
    assert outcomes[0] == ("result", expected)


async def test_an_answer_that_is_not_what_its_coding_says_is_retried_on_either_route() -> None:
    reply = compressed("gzip", lambda data: b"not gzip at all")
    outcomes = await both(reply)
    assert outcomes[0][0] == "RetryableError"
    assert outcomes[0][1].startswith("request failed without an answer: DecodingError (POST")


async def test_a_parse_response_hook_gets_the_same_httpx_response() -> None:
    seen: dict[str, dict[str, Any]] = {}

    def hook(response: httpx.Response, entries: Any) -> SubmitResult | None:
        route = "direct" if not seen else "httpx"
        seen[route] = {
            "status": response.status_code,
            "reason": response.reason_phrase,
            "json": response.json(),
            "coding": response.headers.get("Content-Encoding"),
            "id": response.headers.get("x-request-id"),
            "method": response.request.method,
            "path": response.request.url.path,
            "entries": list(entries),
        }
        return SubmitResult(retry=[0]) if response.json()["items"][0]["status"] == 201 else None

    body = gzip.compress(orjson.dumps(item_statuses(201, 201, 201)))
    reply: Reply = lambda line, headers, request: answer(  # noqa: E731
        "207 Multi-Status", body, "Content-Encoding: gzip", "X-Request-Id: r-1"
    )
    outcomes = await both(reply, parse_response=hook)
    assert outcomes[0] == ("result", SubmitResult(retry=[0]))
    assert seen["direct"] == seen["httpx"]
    assert seen["direct"]["json"] == item_statuses(201, 201, 201)
    assert seen["direct"]["coding"] == "gzip" and seen["direct"]["id"] == "r-1"
    assert seen["direct"]["reason"] == "Multi-Status"


async def test_secrets_are_masked_in_errors_and_logs_on_either_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def echo(line: str, headers: dict[str, str], request: bytes) -> bytes:
        said = {"error": f"refused key {headers['x-api-key']}", "url": "/in?token=" + SECRET}
        return answer("401 Unauthorized", orjson.dumps(said), "Content-Type: application/json")

    caplog.set_level(logging.DEBUG)
    outcomes = await both(echo, api_key=SECRET)
    name, message, _, status = outcomes[0]
    assert (name, status) == ("FatalError", 401)
    assert SECRET not in message and "***" in message
    assert "check the authentication options" in message
    assert SECRET not in caplog.text


async def test_requests_go_through_the_environments_proxy_on_the_direct_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    seen: list[tuple[str, dict[str, str], bytes]] = []
    async with endpoint(reply_json("200 OK", item_statuses(201, 201, 201)), seen) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        writer = open_writer("direct", "http://ingest.invalid:8080/in")
        async with writer:
            await writer.write_all(ROWS)
    assert writer.routes == [True] and writer.statistics().delivered == 3
    assert seen[0][0] == "POST http://ingest.invalid:8080/in HTTP/1.1"  # absolute form


async def test_reconcile_reads_the_status_resource_the_same_on_either_route() -> None:
    stored = {"state": "completed", "status": 200, "response": item_statuses(201, 400, 201)}

    def status_resource(line: str, headers: dict[str, str], request: bytes) -> bytes:
        if "/status/unknown" in line:
            return answer("404 Not Found", b"")
        return answer("200 OK", orjson.dumps(stored), "Content-Type: application/json")

    held: dict[str, Any] = {}
    async with endpoint(status_resource) as url:
        for route in ROUTES:
            writer = open_writer(route, f"{url}/in", reconcile_url=f"{url}/status/{{key}}")
            async with writer:
                known = await writer.reconcile(CallInfo(1, "known", "s", (10, 11, 12)))
                unknown = await writer.reconcile(CallInfo(2, "unknown", "s", (13,)))
            held[route] = (known, unknown)
    assert held["direct"] == held["httpx"] == ((10, 12), ())


async def test_the_elasticsearch_writer_takes_the_same_direct_route() -> None:
    def bulk(line: str, headers: dict[str, str], request: bytes) -> bytes:
        count = request.count(b"\n") // 2
        payload = {"took": 1, "errors": False, "items": [{"index": {"status": 201}}] * count}
        return answer("200 OK", orjson.dumps(payload), "Content-Type: application/json")

    routes: list[bool] = []

    class Spy(ElasticsearchWriter):
        async def _exchange(self, *args: Any, **kwargs: Any) -> Answer:
            routes.append(isinstance(self._web, AiohttpTransport))
            return await super()._exchange(*args, **kwargs)

    async with endpoint(bulk) as url:
        writer = Spy(ElasticsearchOptions(hosts=url, index="docs"), options=SinkOptions())
        async with writer:
            await writer.write_all(ROWS)
    assert routes == [True] and writer.statistics().delivered == 3
