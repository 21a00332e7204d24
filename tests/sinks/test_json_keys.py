"""Mapping keys that become one JSON key (``{1: "a", "1": "b"}``) make a bad record in
every sink that writes mappings as JSON, instead of a document with the key twice and one
value lost; mappings with other non-text keys are still written."""

from __future__ import annotations

import datetime
import types
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import respx

from asyncsink import BadRecordError, DeadLetter, SinkOptions
from asyncsink.encoding import EntryEncodingError, JsonEntryEncoder
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, ElasticsearchWriter
from asyncsink.sinks.http import HttpOptions, HttpWriter
from asyncsink.sinks.kinesis import KinesisOptions, KinesisWriter
from tests.sinks.web_doubles import mocked_web

pytestmark = pytest.mark.anyio

URL = "https://sink.test/ingest"
HOST = "http://es1.test:9200"

COLLIDING: dict[str, tuple[dict[Any, Any], str, str]] = {
    "int and text": ({"i": 0, 1: "a", "1": "b"}, "",
                     "keys 1 and '1' both become the JSON key \"1\""),
    "bool and text": ({"i": 0, "tags": {True: 1, "true": 2}}, "tags",
                      "keys True and 'true' both become the JSON key \"true\""),
    "none and text": ({"i": 0, "m": {"null": 1, None: 2}}, "m",
                      "keys 'null' and None both become the JSON key \"null\""),
    "date and text": ({"i": 0, "by_day": {datetime.date(2024, 1, 5): 1, "2024-01-05": 2}},
                      "by_day", "both become the JSON key \"2024-01-05\""),
    "int and float": ({"i": 0, "m": {"x": {2: "a", 2.5: "b", "2.5": "c"}}}, "m.x",
                      "keys 2.5 and '2.5' both become the JSON key \"2.5\""),
    "in a list": ({"i": 0, "lines": [{}, {7: "a", "7": "b"}]}, "lines[1]",
                  "keys 7 and '7' both become"),
    "in a mapping proxy": ({"i": 0, "m": types.MappingProxyType({3: "a", "3": "b"})}, "m",
                           "keys 3 and '3' both become"),
    "nan and text": ({"i": 0, "m": {float("nan"): 1, "NaN": 2}}, "m",
                     "keys nan and 'NaN' both become the JSON key \"NaN\""),
}  # fmt: skip

SAFE = [{"i": 0, "m": {1: "a", 2: "b"}}, {"i": 1, "m": {True: 1, None: 2, "x": 3}}]
FLOAT_KEYS = {"m": {0.5: "a", -0.0: "b", 1e300: "c", float("inf"): "d"}}


@pytest.mark.parametrize(("row", "field", "reason"), COLLIDING.values(), ids=COLLIDING.keys())
def test_the_json_encoder_refuses_keys_that_collide(row: Any, field: str, reason: str) -> None:
    with pytest.raises(EntryEncodingError) as caught:
        JsonEntryEncoder()(row)
    assert caught.value.field == field
    assert reason in str(caught.value) and "one of the values would be lost" in str(caught.value)


def test_non_text_keys_that_do_not_collide_are_written_as_text() -> None:
    encode = JsonEntryEncoder()
    assert encode(SAFE[0]) == b'{"i":0,"m":{"1":"a","2":"b"}}'
    assert encode(SAFE[1]) == b'{"i":1,"m":{"true":1,"null":2,"x":3}}'
    assert encode.encode_all(SAFE) == [encode(row) for row in SAFE]
    assert encode({"n": 2**70, "m": {1: 2}}) == b'{"n":1180591620717411303424,"m":{"1":2}}'
    floats = b'{"m":{"0.5":"a","-0.0":"b","1e+300":"c","Infinity":"d"}}'
    assert encode(FLOAT_KEYS) == floats


def test_a_run_with_a_colliding_row_still_names_it_alone() -> None:
    encode = JsonEntryEncoder()
    with pytest.raises(EntryEncodingError, match="field 'm'"):
        encode.encode_all([SAFE[0], {"m": {1: "a", "1": "b"}}, SAFE[1]])


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with mocked_web(assert_all_called=False) as mock:
        yield mock


def fast(**overrides: Any) -> SinkOptions:
    return SinkOptions(initial_backoff_ms=1, max_backoff_ms=5, **overrides)


ROWS = [SAFE[0], {"i": 1, "m": {1: "a", "1": "b"}}, SAFE[1]]


async def test_http_writer_fails_on_the_colliding_row_with_its_position(
    router: respx.MockRouter,
) -> None:
    router.post(URL).mock(return_value=httpx.Response(200))
    with pytest.raises(BadRecordError) as caught:
        async with HttpWriter(HttpOptions(url=URL), options=fast()) as writer:
            await writer.write_all(ROWS)
    assert caught.value.position == 1
    assert "field 'm'" in caught.value.reason
    assert "keys 1 and '1' both become the JSON key \"1\"" in caught.value.reason


async def test_http_writer_dead_letters_the_colliding_row_and_sends_the_rest(
    router: respx.MockRouter,
) -> None:
    route = router.post(URL).mock(return_value=httpx.Response(200))
    letters: list[DeadLetter] = []
    async with HttpWriter(HttpOptions(url=URL), options=fast(dead_letter=letters.append)) as w:
        await w.write_all(ROWS)
    sent = [row for call in route.calls for row in orjson.loads(call.request.content)]
    assert sent == [{"i": 0, "m": {"1": "a", "2": "b"}}, {"i": 1, "m": {"true": 1, "null": 2,
                                                                         "x": 3}}]  # fmt: skip
    assert [letter.position for letter in letters] == [1]
    assert w.statistics().delivered == 2


async def test_elasticsearch_writer_fails_on_the_colliding_row(router: respx.MockRouter) -> None:
    def bulk(request: httpx.Request) -> httpx.Response:
        items = [{"index": {"status": 201}}] * (request.content.count(b"\n") // 2)
        return httpx.Response(200, json={"errors": False, "items": items})

    router.post(f"{HOST}/logs/_bulk").mock(side_effect=bulk)
    options = ElasticsearchOptions(hosts=HOST, index="logs")
    with pytest.raises(BadRecordError) as caught:
        async with ElasticsearchWriter(options, options=fast()) as writer:
            await writer.write_all(ROWS)
    assert caught.value.position == 1
    assert "keys 1 and '1' both become the JSON key \"1\"" in caught.value.reason


class FakeKinesis:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def put_records(self, **params: Any) -> dict[str, Any]:
        self.records.extend(params["Records"])
        results = [{"SequenceNumber": "1", "ShardId": "shardId-0"}] * len(params["Records"])
        return {"FailedRecordCount": 0, "Records": results}


async def test_kinesis_writer_fails_on_the_colliding_row() -> None:
    client = FakeKinesis()
    options = KinesisOptions(stream_name="events", partition_key_field="i")
    with pytest.raises(BadRecordError) as caught:
        async with KinesisWriter(options, options=fast(), client=client) as writer:
            await writer.write_all(ROWS)
    assert caught.value.position == 1
    assert "field 'm'" in caught.value.reason
    assert "keys 1 and '1' both become the JSON key \"1\"" in caught.value.reason
