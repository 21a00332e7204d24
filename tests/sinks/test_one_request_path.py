"""One request path per sink: whatever sends (aiohttp against a real endpoint, httpx with
a mock, a test double of the transport contract; for Kinesis the sink's own client, one
given by the caller, a test double), the sink code above it is the same, down to the chain
of library calls that reaches it."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiobotocore.session import get_session

from asyncsink import SinkOptions
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, ElasticsearchWriter
from asyncsink.sinks.http import HttpOptions, HttpWriter
from asyncsink.sinks.kinesis import KinesisOptions, KinesisWriter
from asyncsink.sinks.web.aiohttp_transport import AiohttpTransport
from asyncsink.sinks.web.httpx_transport import HttpxTransport
from asyncsink.sinks.web.transport import Answer, Request, Transport
from asyncsink.testing import FaultServer
from tests.servers.elasticsearch import ElasticsearchServer
from tests.sinks.test_kinesis import (  # noqa: F401 - fixtures
    StreamFactory,
    admin,
    endpoint_options,
    new_stream,
    read_stream,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = (str(ROOT / "asyncsink"), str(ROOT / "sinks"))
ROWS = [{"id": i} for i in range(5)]


def library_callers() -> tuple[str, ...]:
    """The library's functions on the way to the caller of this one, innermost first."""
    frames = inspect.stack()[2:]
    return tuple(f.function for f in frames if f.filename.startswith(LIBRARY))


class Paths:
    """What reached each transport, by kind, and by which chain of library calls."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[str, ...]]] = {}

    def record(self, kind: str) -> None:
        self.seen.setdefault(kind, []).append(library_callers())


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[Paths]:
    found = Paths()
    for cls, kind in ((AiohttpTransport, "aiohttp"), (HttpxTransport, "httpx")):
        original = cls.handle_async_request

        async def spy(self: Any, request: Request, _o: Any = original, _k: str = kind) -> Any:
            found.record(_k)
            return await _o(self, request)

        monkeypatch.setattr(cls, "handle_async_request", spy)
    yield found


class Double(Transport):
    """A test double of the transport contract: answers every request with ``reply``."""

    def __init__(self, paths: Paths, reply: Any) -> None:
        self.paths = paths
        self.reply = reply
        self.requests: list[Request] = []

    async def handle_async_request(self, request: Request) -> Answer:
        self.paths.record("double")
        self.requests.append(request)
        body = orjson.dumps(self.reply(request))
        headers = httpx.Headers({"content-type": "application/json"})
        return Answer(200, "OK", headers, body, method=request.method, url=request.url)


async def deliver(writer: Any) -> Any:
    async with writer:
        await writer.write_all(ROWS)
    assert writer.statistics().delivered == len(ROWS)
    return writer


async def test_the_http_sink_runs_the_same_code_over_aiohttp_httpx_and_a_double(
    paths: Paths,
) -> None:
    sink = SinkOptions(max_batch_size=2, max_in_flight_requests=1)
    with FaultServer() as server:
        await deliver(HttpWriter(HttpOptions(url=server.url), options=sink))
    mocked = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
    await deliver(HttpWriter(HttpOptions(url="http://mocked.test/in"), options=sink,
                             transport=mocked))  # fmt: skip
    double = Double(paths, lambda request: {})
    await deliver(HttpWriter(HttpOptions(url="http://double.test/in"), options=sink,
                             transport=double))  # fmt: skip

    assert sorted(paths.seen) == ["aiohttp", "double", "httpx"]
    chains = {kind: set(found) for kind, found in paths.seen.items()}
    assert all(len(found) == 3 for found in paths.seen.values())  # 5 rows, 2 a request
    assert chains["aiohttp"] == chains["httpx"] == chains["double"]
    (chain,) = chains["double"]
    assert chain[:2] == ("_exchange", "submit_request_entries")
    assert [r.headers["idempotency-key"] for r in double.requests]  # the sink's own headers


async def test_the_elasticsearch_sink_runs_the_same_code_over_aiohttp_and_a_double(
    paths: Paths,
) -> None:
    def bulk(request: Request) -> dict[str, Any]:
        count = request.content.count(b"\n") // 2
        return {"took": 1, "errors": False, "items": [{"index": {"status": 201}}] * count}

    sink = SinkOptions(max_batch_size=5)
    with ElasticsearchServer() as server:
        es = ElasticsearchOptions(hosts=server.url, index="docs")
        await deliver(ElasticsearchWriter(es, options=sink))
    double = Double(paths, bulk)
    es = ElasticsearchOptions(hosts="http://double.test:9200", index="docs")
    await deliver(ElasticsearchWriter(es, options=sink, transport=double))

    assert set(paths.seen["aiohttp"]) == set(paths.seen["double"])
    (chain,) = set(paths.seen["double"])
    assert chain[:3] == ("_exchange", "_request", "submit_request_entries")


# ---------------------------------------------------------------------- Kinesis


class FakeKinesis:
    """A test double of a Kinesis client: stores every record it is given."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.records: list[dict[str, Any]] = []

    async def put_records(self, **params: Any) -> dict[str, Any]:
        self.paths.record("double")
        self.records.extend(params["Records"])
        stored = [{"SequenceNumber": str(i), "ShardId": "shardId-000000000000"}
                  for i in range(len(params["Records"]))]  # fmt: skip
        return {"FailedRecordCount": 0, "Records": stored}


def watch(client: Any, paths: Paths, kind: str) -> None:
    """Record the chain of library calls of every PutRecords call ``client`` makes."""

    def seen(**_: Any) -> None:
        paths.record(kind)

    client.meta.events.register("before-parameter-build.kinesis.PutRecords", seen)


@pytest.mark.emulator
async def test_the_kinesis_sink_runs_the_same_code_for_its_own_a_given_and_a_double_client(
    admin: Any,  # noqa: F811 - the fixtures of test_kinesis
    new_stream: StreamFactory,  # noqa: F811
    endpoint_options: dict[str, Any],  # noqa: F811
) -> None:
    found = Paths()
    name = await new_stream(1)
    sink = SinkOptions(max_batch_size=2, max_in_flight_requests=1)
    options = KinesisOptions(stream_name=name, partition_key_field="id", **endpoint_options)
    own = KinesisWriter(options, options=sink)
    async with own:
        watch(own.client, found, "own")  # the process's shared client, which it took
        await own.write_all(ROWS)
    async with get_session().create_client(
        "kinesis",
        region_name=endpoint_options["region"],
        endpoint_url=endpoint_options["endpoint_url"],
        aws_access_key_id="given",
        aws_secret_access_key="given",
    ) as given:  # a caller's client, botocore's defaults
        watch(given, found, "given")
        await deliver(KinesisWriter(options, options=sink, client=given))
    double = FakeKinesis(found)
    await deliver(KinesisWriter(options, options=sink, client=double))

    assert sorted(found.seen) == ["double", "given", "own"]
    assert all(len(chains) == 3 for chains in found.seen.values())  # 5 rows, 2 a request
    chains = {kind: set(chains) for kind, chains in found.seen.items()}
    assert chains["own"] == chains["given"] == chains["double"]
    (chain,) = chains["double"]
    assert chain[:2] == ("put_records", "submit_request_entries")
    assert [record["PartitionKey"] for record in double.records] == [str(i) for i in range(5)]
    stored = sorted(key for _, key, _ in await read_stream(admin, name))
    assert stored == sorted([str(i) for i in range(5)] * 2)  # own and given, each once
