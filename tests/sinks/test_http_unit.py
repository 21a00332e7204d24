"""The HTTP sink against respx: bodies, encoding, headers, status handling, reconcile."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import email.utils
import gzip
import logging
import ssl
import time
from collections import namedtuple
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
import respx

from asyncsink import (
    BadRecordError,
    CallInfo,
    DeadLetter,
    DeliveryError,
    FatalError,
    OptionError,
    PackedEntries,
    RetryableError,
    SinkOptions,
    SubmitResult,
    ThrottledError,
    WriterStateError,
)
from asyncsink.encoding import EntryEncodingError, JsonContract, JsonEntryEncoder
from asyncsink.sinks.http import HttpOptions, HttpWriter, create_writer
from asyncsink.sinks.http.classify import parse_items
from asyncsink.sinks.http.encoding import frame_json
from asyncsink.sinks.web.aiohttp_transport import AiohttpTransport
from asyncsink.sinks.web.classify import error_for_transport, parse_retry_after
from asyncsink.sinks.web.httpx_transport import HttpxTransport
from asyncsink.sinks.web.redact import Redactor
from tests.sinks.web_doubles import mocked_web

pytestmark = pytest.mark.anyio

URL = "https://sink.test/ingest"
STATUS_URL = "https://sink.test/status/{key}"
Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def items(*statuses: int, **errors: str) -> httpx.Response:
    listed = [{"status": s, **({"error": errors[f"e{i}"]} if f"e{i}" in errors else {})}
              for i, s in enumerate(statuses)]  # fmt: skip
    failed = any(not 200 <= s <= 299 for s in statuses)
    return httpx.Response(200, json={"errors": failed, "items": listed})


class Endpoint:
    """Records every request; answers from a script, then with ``default``."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []
        self.script: list[Reply] = []
        self.default: Reply = lambda request: httpx.Response(200)
        router.route(url=URL).mock(side_effect=self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.times.append(time.monotonic())
        reply = self.script.pop(0) if self.script else self.default
        if isinstance(reply, Exception):
            raise reply
        return reply(request) if callable(reply) else reply

    def bodies(self) -> list[bytes]:
        return [r.content for r in self.requests]

    def entries(self) -> list[Any]:
        out: list[Any] = []
        for body in self.bodies():
            out.extend(orjson.loads(body))
        return out


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with mocked_web(assert_all_called=False) as router:
        yield Endpoint(router)


def fast(**overrides: Any) -> SinkOptions:
    base: dict[str, Any] = {"max_batch_size": 100, "initial_backoff_ms": 1, "max_backoff_ms": 20}
    return SinkOptions(**{**base, **overrides})


def writer(sink: SinkOptions | None = None, **http: Any) -> HttpWriter:
    return HttpWriter(HttpOptions(**{"url": URL, **http}), options=sink or fast())


async def deliver(w: HttpWriter, rows: Any) -> HttpWriter:
    async with w:
        await w.write_all(rows)
    return w


ROWS = [{"id": "a", "v": 1}, {"id": "b", "v": 2}, {"id": "c", "v": 3}]


# ---------------------------------------------------------------------- bodies


async def test_json_body_is_the_entries_joined_into_an_array(endpoint: Endpoint) -> None:
    await deliver(writer(), ROWS)
    (request,) = endpoint.requests
    assert request.method == "POST"
    assert request.content == b'[{"id":"a","v":1},{"id":"b","v":2},{"id":"c","v":3}]'
    assert request.headers["content-type"] == "application/json"


async def test_ndjson_body_has_one_entry_per_line_and_put_is_used(endpoint: Endpoint) -> None:
    await deliver(writer(body_format="NDJSON", method="PUT"), ROWS)
    (request,) = endpoint.requests
    assert request.method == "PUT"
    assert request.content == b'{"id":"a","v":1}\n{"id":"b","v":2}\n{"id":"c","v":3}\n'
    assert request.headers["content-type"] == "application/x-ndjson"


async def test_gzip_body_decompresses_to_the_entries_and_resends_identical_bytes(
    endpoint: Endpoint,
) -> None:
    endpoint.script = [httpx.Response(503, headers={"Retry-After": "0"})]
    await deliver(writer(gzip=True, gzip_level=9), ROWS)
    first, second = endpoint.requests
    assert first.headers["content-encoding"] == "gzip"
    assert gzip.decompress(first.content) == b'[{"id":"a","v":1},{"id":"b","v":2},{"id":"c","v":3}]'
    assert first.content == second.content  # same call, same bytes: no gzip timestamp
    assert first.content[4:8] == b"\0\0\0\0"


async def test_user_body_format_and_entry_encoder_build_the_body(endpoint: Endpoint) -> None:
    def wrap(entries: Any) -> bytes:
        return b'{"records":[' + b",".join(entries) + b"]}"

    await deliver(writer(body_format=wrap, entry_encoder=lambda row: row["id"].encode(),
                         content_type="text/x-ids"), ROWS)  # fmt: skip
    (request,) = endpoint.requests
    assert request.content == b'{"records":[a,b,c]}'
    assert request.headers["content-type"] == "text/x-ids"


async def test_entry_encoder_returning_text_makes_a_bad_record(endpoint: Endpoint) -> None:
    with pytest.raises(BadRecordError, match="entryEncoder returned str") as caught:
        await deliver(writer(entry_encoder=lambda row: "text"), ROWS)
    assert caught.value.position == 0
    assert endpoint.requests == []


# ---------------------------------------------------------------------- encoding


class FakeRow(tuple):  # type: ignore[type-arg]
    """Duck-types pyspark.sql.Row: a tuple with field names and asDict."""

    def __new__(cls, **fields: Any) -> FakeRow:
        row = super().__new__(cls, tuple(fields.values()))
        row.names = list(fields)  # type: ignore[attr-defined]
        return row

    def asDict(self, recursive: bool = False) -> dict[str, Any]:  # noqa: N802
        def conv(value: Any) -> Any:
            if isinstance(value, FakeRow):
                return value.asDict(True)
            if isinstance(value, list):
                return [conv(v) for v in value]
            if isinstance(value, dict):
                return {k: conv(v) for k, v in value.items()}
            return value

        pairs = zip(self.names, self, strict=True)  # type: ignore[attr-defined]
        return {k: conv(v) if recursive else v for k, v in pairs}


@dataclasses.dataclass
class Point:
    x: int
    y: float


Pair = namedtuple("Pair", "left right")


def test_values_are_encoded_as_documented() -> None:
    row = {
        "ts": dt.datetime(2024, 2, 29, 13, 5, 7, 250000),
        "tz": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "day": dt.date(2024, 2, 29),
        "at": dt.time(8, 30),
        "wait": dt.timedelta(minutes=1, seconds=30, milliseconds=500),
        "price": decimal.Decimal("12.50"),
        "blob": b"\x00\xffhi",
        "nan": float("nan"),
        "nested": {"list": [1, [2, 3]], "map": {7: "seven"}},
        "point": Point(1, 2.5),
        "pair": Pair("l", "r"),
    }
    assert orjson.loads(JsonEntryEncoder()(row)) == {
        "ts": "2024-02-29T13:05:07.250000",
        "tz": "2024-01-01T00:00:00.000000Z",
        "day": "2024-02-29",
        "at": "08:30:00.000000",
        "wait": "PT90.5S",
        "price": 12.5,
        "blob": base64.b64encode(b"\x00\xffhi").decode(),
        "nan": "NaN",
        "nested": {"list": [1, [2, 3]], "map": {"7": "seven"}},
        "point": {"x": 1, "y": 2.5},
        "pair": {"left": "l", "right": "r"},
    }


@pytest.mark.parametrize(
    ("wait", "text"),
    [
        (dt.timedelta(0), "PT0S"),
        (dt.timedelta(seconds=-1.5), "-PT1.5S"),
        (dt.timedelta(microseconds=1), "PT0.000001S"),
        (dt.timedelta(days=99999, microseconds=999999), "PT8639913600.999999S"),
        (dt.timedelta.max, "PT86399999999999.999999S"),
        (dt.timedelta.min, "-PT86399999913600S"),
    ],
)
def test_durations_are_exact_to_the_microsecond(wait: dt.timedelta, text: str) -> None:
    assert JsonEntryEncoder()({"wait": wait}) == b'{"wait":"%s"}' % text.encode()


def test_a_row_with_two_fields_of_one_name_is_refused_in_every_sink() -> None:
    from pyspark.sql import Row

    from asyncsink.policies.dead_letter import element_bytes
    from asyncsink.sinks.elasticsearch.actions import as_mapping

    twice = Row("a", "a")(1, 2)
    encode = JsonEntryEncoder()
    for element, field in ((twice, ""), (Row(x=1, inner=twice), "inner")):
        with pytest.raises(EntryEncodingError, match="two fields named 'a'") as caught:
            encode(element)
        assert caught.value.field == field
        with pytest.raises(EntryEncodingError, match="two fields named 'a'"):
            encode.encode_all([element, element])
    with pytest.raises(TypeError, match="two fields named 'a'"):
        as_mapping(twice)
    with pytest.raises(TypeError, match="field 'inner'.*two fields named 'a'"):
        encode({"x": 1, "inner": twice})
    # Its dead letter keeps both values.
    assert element_bytes(twice) == b"Row(a=1, a=2)"
    assert element_bytes(Row(x=1, inner=twice)) == b"Row(x=1, inner=Row(a=1, a=2))"
    assert element_bytes(Row(x=1, inner=Row(a=[Row(b=2)]))) == b'{"x":1,"inner":{"a":[{"b":2}]}}'


def test_decimals_as_numbers_keep_their_exact_digits() -> None:
    encode = JsonEntryEncoder(JsonContract(decimal_as="number"))
    assert encode({"d": decimal.Decimal("12345678901234567890.125")}) == (
        b'{"d":12345678901234567890.125}'
    )
    with pytest.raises(EntryEncodingError, match="'d'"):
        encode({"d": decimal.Decimal("NaN")})


def test_row_like_objects_become_objects_nested_ones_included() -> None:
    inner = FakeRow(city="Paris", zip="75001")
    row = FakeRow(id=7, address=inner, history=[inner], by_kind={"home": inner})
    assert JsonEntryEncoder()(row) == (
        b'{"id":7,"address":{"city":"Paris","zip":"75001"},'
        b'"history":[{"city":"Paris","zip":"75001"}],"by_kind":{"home":{"city":"Paris","zip":"75001"}}}'
    )
    # a Row that asDict left nested (recursive=False elsewhere) is still an object
    assert JsonEntryEncoder()({"r": inner}) == b'{"r":{"city":"Paris","zip":"75001"}}'


def test_runs_encode_to_the_bytes_of_one_element_at_a_time() -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
    spark_rows = [schema.fromInternal((i, f"n{i}")) for i in range(5)]  # one schema
    assert spark_rows[0].__fields__ is spark_rows[1].__fields__
    nested = [Row(id=1, inner=Row(a=1, b=[Row(c=2)]))]
    encode = JsonEntryEncoder()
    runs: list[list[Any]] = [
        spark_rows,
        [*spark_rows, Row(other=1)],  # rows of another schema in the run
        [{"id": i, "d": decimal.Decimal("1.5")} for i in range(3)],
        [{"id": 1}, spark_rows[0], Point(1, 2.0)],
        nested,
    ]
    for run in runs:
        assert encode.encode_all(run) == [encode(element) for element in run]
    assert encode.encode_all(nested) == [b'{"id":1,"inner":{"a":1,"b":[{"c":2}]}}']
    with pytest.raises(TypeError):
        encode.encode_all([{"id": 1}, {"bad": object()}])


def test_runs_of_dicts_stay_one_packed_array_unless_a_value_holds_the_separator() -> None:
    encode = JsonEntryEncoder()
    dicts = [{"id": i, "tags": ["a", "b"], "empty": {}} for i in range(50)] + [{}, {}]
    run = encode.encode_all(dicts)
    assert type(run) is PackedEntries and len(run) == 52
    assert list(run) == [encode(d) for d in dicts]
    assert frame_json(run[3:40]) == b"[" + b",".join(encode(d) for d in dicts[3:40]) + b"]"
    tricky = [{"s": "},{"}, {"l": [{"a": 1}, {"b": 2}]}, {"id": 3}]  # "},{" inside values
    entries = encode.encode_all(tricky)
    assert type(entries) is list and entries == [encode(d) for d in tricky]
    assert frame_json(entries) == orjson.dumps(tricky)


async def test_hooks_of_the_user_get_the_entries_as_a_list(endpoint: Endpoint) -> None:
    seen: list[type] = []

    def wrap(entries: Any) -> bytes:
        seen.append(type(entries))
        return b"[" + b",".join(entries) + b"]"

    def hook(response: httpx.Response, entries: Any) -> list[bytes] | None:
        seen.append(type(entries))
        return [entries[1]] if len(entries) == 3 else None  # failed, by identity

    endpoint.default = lambda request: items(*[200] * len(orjson.loads(request.content)))
    w = await deliver(writer(body_format=wrap, parse_response=hook), ROWS)
    assert set(seen) == {list} and w.statistics().delivered == 3
    assert [orjson.loads(r.content) for r in endpoint.requests] == [ROWS, [ROWS[1]]]


def test_unencodable_value_error_names_the_field_path() -> None:
    encode = JsonEntryEncoder()
    with pytest.raises(EntryEncodingError) as caught:
        encode({"order": {"lines": [{"sku": "a"}, {"sku": "b", "price": object()}]}})
    assert caught.value.field == "order.lines[1].price"
    assert "order.lines[1].price" in str(caught.value)
    assert "object" in str(caught.value)
    with pytest.raises(EntryEncodingError, match=r"m\[<frozenset key>\]"):
        encode({"m": {frozenset(): 1}})
    assert encode({"n": [1, 2**70]}) == b'{"n":[1,1180591620717411303424]}'  # exact
    with pytest.raises(EntryEncodingError, match=r"'r.when'.*set"):
        encode({"r": FakeRow(id=1, when={1})})
    with pytest.raises(EntryEncodingError, match=r"'s\[0\]'.*surrogates not allowed"):
        encode({"s": ["x\ud800"]})


async def test_unencodable_row_fails_with_its_position_and_field(endpoint: Endpoint) -> None:
    rows = [{"id": "ok"}, {"id": "bad", "when": {1, 2}}]
    with pytest.raises(BadRecordError) as caught:
        await deliver(writer(), rows)
    assert caught.value.position == 1
    assert "'when'" in str(caught.value)


async def test_unencodable_row_goes_to_dead_letter_and_the_rest_is_sent(
    endpoint: Endpoint,
) -> None:
    letters: list[DeadLetter] = []
    rows = [{"id": "ok"}, {"id": "bad", "when": {1, 2}}, {"id": "ok2"}]
    await deliver(writer(fast(dead_letter=letters.append)), rows)
    assert [letter.position for letter in letters] == [1]
    assert "'when'" in letters[0].reason
    assert endpoint.entries() == [{"id": "ok"}, {"id": "ok2"}]


# ---------------------------------------------------------------------- headers, auth


async def test_extra_headers_from_json_and_pair_forms(endpoint: Endpoint) -> None:
    await deliver(writer(headers='{"X-Team": "data", "X-Env": "prod"}'), ROWS)
    await deliver(writer(headers="X-Team: data , X-Env:prod"), ROWS)
    for request in endpoint.requests:
        assert request.headers["x-team"] == "data"
        assert request.headers["x-env"] == "prod"


async def test_the_sinks_own_headers_replace_the_users_of_any_spelling(
    endpoint: Endpoint,
) -> None:
    headers = {"CONTENT-TYPE": "application/vnd.events+json", "authorization": "Basic old",
               "idempotency-key": "fixed"}  # fmt: skip
    await deliver(writer(headers=headers, bearer_token="tok"), ROWS)
    (request,) = endpoint.requests
    assert request.headers.get_list("content-type") == ["application/vnd.events+json"]
    assert request.headers.get_list("authorization") == ["Bearer tok"]
    (key,) = request.headers.get_list("idempotency-key")
    assert key != "fixed"


@pytest.mark.parametrize(
    ("http", "header", "value"),
    [
        ({"bearer_token": "tok-123"}, "authorization", "Bearer tok-123"),
        ({"basic_username": "ann", "basic_password": "pw:1"}, "authorization",
         "Basic " + base64.b64encode(b"ann:pw:1").decode()),
        ({"url": "https://ann:p%40ss@sink.test/ingest"}, "authorization",
         "Basic " + base64.b64encode(b"ann:p@ss").decode()),
        ({"api_key": "k-9"}, "x-api-key", "k-9"),
        ({"api_key": "k-9", "api_key_header": "X-Token"}, "x-token", "k-9"),
    ],
)  # fmt: skip
async def test_each_kind_of_authentication_sends_its_header(
    endpoint: Endpoint, http: dict[str, Any], header: str, value: str
) -> None:
    w = await deliver(writer(**http), ROWS)
    (request,) = endpoint.requests
    assert request.headers[header] == value
    assert request.url == URL  # credentials in the URL are not sent in it
    assert w.http.url == URL


def test_two_kinds_of_authentication_are_refused() -> None:
    with pytest.raises(OptionError, match="bearerToken.*apiKey"):
        HttpOptions(url=URL, bearer_token="a", api_key="b")
    with pytest.raises(OptionError, match="basicUsername"):
        HttpOptions(url=URL, basic_password="pw")


async def test_idempotency_key_is_the_calls_and_repeats_on_every_resend(
    endpoint: Endpoint,
) -> None:
    seen: list[CallInfo] = []

    class Spy(HttpWriter):
        async def submit_request_entries(self, entries: list[bytes]) -> SubmitResult | None:
            from asyncsink import current_call

            seen.append(current_call())
            return await super().submit_request_entries(entries)

    endpoint.script = [httpx.Response(500), httpx.ConnectError("refused")]
    w = Spy(HttpOptions(url=URL), options=fast(max_batch_size=2))
    await deliver(w, ROWS)
    keys = [r.headers["idempotency-key"] for r in endpoint.requests]
    assert keys == [call.idempotency_key for call in seen]
    assert len(keys) == 4 and len(set(keys)) == 2  # two calls, each re-sent once
    for key in set(keys):
        bodies = {r.content for r in endpoint.requests if r.headers["idempotency-key"] == key}
        calls = {call.call_id for call in seen if call.idempotency_key == key}
        assert len(bodies) == 1 and len(calls) == 1


async def test_idempotency_header_can_be_renamed_or_disabled(endpoint: Endpoint) -> None:
    await deliver(writer(idempotency_header="X-Request-Key"), ROWS)
    await deliver(writer(idempotency_header=""), ROWS)
    renamed, disabled = endpoint.requests
    assert "x-request-key" in renamed.headers and "idempotency-key" not in renamed.headers
    assert "idempotency-key" not in disabled.headers and "x-request-key" not in disabled.headers


# ---------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status", [408, 409, 425, 500, 502, 504, 599])
async def test_retryable_statuses_resend_the_same_call(endpoint: Endpoint, status: int) -> None:
    endpoint.script = [httpx.Response(status), httpx.Response(status)]
    w = await deliver(writer(), ROWS)
    assert len(endpoint.requests) == 3
    assert len(set(endpoint.bodies())) == 1
    stats = w.statistics()
    assert stats.delivered == 3 and stats.retried == 6 and stats.throttled == 0


@pytest.mark.parametrize("status", [429, 503])
async def test_throttling_statuses_resend_and_count_as_throttled(
    endpoint: Endpoint, status: int
) -> None:
    endpoint.script = [httpx.Response(status, headers={"Retry-After": "0"})]
    w = await deliver(writer(), ROWS)
    assert len(endpoint.requests) == 2
    assert w.statistics().throttled == 1
    assert w.statistics().delivered == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422, 418, 301])
async def test_fatal_statuses_fail_at_once_with_status_and_excerpt(
    endpoint: Endpoint, status: int
) -> None:
    endpoint.default = httpx.Response(status, text="why: " + "x" * 2000)
    with pytest.raises(FatalError) as caught:
        await deliver(writer(), ROWS)
    error = caught.value
    assert error.status == status
    assert f"HTTP {status}" in str(error)
    assert "POST https://sink.test/ingest" in str(error)
    assert "why: xxx" in str(error)
    assert len(str(error)) < 800  # the excerpt is cut
    assert len(endpoint.requests) == 1


async def test_fatal_status_messages_carry_a_hint(endpoint: Endpoint) -> None:
    endpoint.default = httpx.Response(413)
    with pytest.raises(FatalError, match="maxBatchSizeInBytes.*body was 52 bytes"):
        await deliver(writer(), ROWS)
    endpoint.default = httpx.Response(401)
    with pytest.raises(FatalError, match="bearerToken"):
        await deliver(writer(), ROWS)
    endpoint.default = httpx.Response(308, headers={"Location": "https://new.test/ingest"})
    with pytest.raises(FatalError, match="final location https://new.test/ingest"):
        await deliver(writer(), ROWS)


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("eof"),
     httpx.ReadError("reset")],
)  # fmt: skip
async def test_connection_errors_and_timeouts_are_retried(
    endpoint: Endpoint, error: Exception
) -> None:
    endpoint.script = [error]
    w = await deliver(writer(), ROWS)
    assert len(endpoint.requests) == 2
    assert w.statistics().delivered == 3


async def test_transport_errors_keep_their_cause_and_run_out_of_retries(
    endpoint: Endpoint,
) -> None:
    endpoint.default = lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused"))
    with pytest.raises(DeliveryError) as caught:
        await deliver(writer(fast(max_retries=2)), ROWS)
    assert caught.value.failed == 3
    cause = caught.value.__cause__
    assert "ConnectError" in str(cause) and "refused" in str(cause)
    assert isinstance(cause.__cause__, httpx.ConnectError)  # type: ignore[union-attr]
    assert len(endpoint.requests) == 3


def test_a_failed_certificate_check_is_fatal_other_transport_errors_retry() -> None:
    request = httpx.Request("POST", URL)
    try:
        try:
            raise ssl.SSLCertVerificationError("CERTIFICATE_VERIFY_FAILED")
        except ssl.SSLError as tls:
            raise httpx.ConnectError("certificate verify failed") from tls
    except httpx.ConnectError as exc:
        error = error_for_transport(exc, request, Redactor(()))
    assert isinstance(error, FatalError)
    assert "caBundle" in str(error) and "POST https://sink.test/ingest" in str(error)
    assert isinstance(error_for_transport(httpx.ConnectError("x"), request, Redactor(())),
                      RetryableError)  # fmt: skip
    assert isinstance(error_for_transport(httpx.UnsupportedProtocol("x"), None, Redactor(())),
                      FatalError)  # fmt: skip


# ---------------------------------------------------------------------- Retry-After


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.05 ") == 0.05
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(30, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    for unreadable in (None, "soon", "-1", "inf", ""):
        assert parse_retry_after(unreadable) is None


async def test_retry_after_is_honoured_before_the_resend(endpoint: Endpoint) -> None:
    endpoint.script = [httpx.Response(429, headers={"Retry-After": "0.3"})]
    await deliver(writer(fast(max_backoff_ms=2000)), ROWS)
    assert endpoint.times[1] - endpoint.times[0] >= 0.29


async def test_retry_after_as_date_is_carried_by_the_error(endpoint: Endpoint) -> None:
    date = email.utils.formatdate(time.time() + 60, usegmt=True)
    endpoint.default = httpx.Response(503, headers={"Retry-After": date})
    w = writer(fast(max_retries=0))
    with pytest.raises(DeliveryError) as caught:
        await deliver(w, ROWS)
    cause = caught.value.__cause__
    assert isinstance(cause, ThrottledError)
    assert cause.status == 503
    assert cause.retry_after == pytest.approx(60, abs=2)


# ---------------------------------------------------------------------- partial failures


async def test_partial_failure_resends_only_the_failed_entries(endpoint: Endpoint) -> None:
    endpoint.script = [items(200, 503, 200, 500)]
    w = await deliver(writer(), [*ROWS, {"id": "d", "v": 4}])
    first, second = endpoint.requests
    assert orjson.loads(second.content) == [{"id": "b", "v": 2}, {"id": "d", "v": 4}]
    assert first.headers["idempotency-key"] != second.headers["idempotency-key"]
    stats = w.statistics()
    assert stats.delivered == 4 and stats.throttled == 1


async def test_partial_failure_items_wrapped_like_elasticsearch_are_read(
    endpoint: Endpoint,
) -> None:
    endpoint.script = [
        httpx.Response(
            207,
            json={
                "errors": True,
                "items": [
                    {"index": {"status": 201}},
                    {"index": {"status": 429}},
                    {"index": {"status": 201}},
                ],
            },
        )
    ]
    await deliver(writer(), ROWS)  # fmt: skip
    assert orjson.loads(endpoint.requests[1].content) == [{"id": "b", "v": 2}]


async def test_rejected_item_is_a_bad_record_with_its_position(endpoint: Endpoint) -> None:
    endpoint.script = [items(200, 200, 400, e2="mapping error: v is not a date")]
    with pytest.raises(BadRecordError) as caught:
        await deliver(writer(), ROWS)
    assert caught.value.position == 2
    assert "HTTP 400: mapping error: v is not a date" in str(caught.value)


async def test_rejected_item_goes_to_dead_letter_and_is_not_resent(endpoint: Endpoint) -> None:
    letters: list[DeadLetter] = []
    endpoint.script = [items(200, 422, 503, e1="bad")]
    w = await deliver(writer(fast(dead_letter=letters.append)), ROWS)
    assert [(d.position, d.record) for d in letters] == [(1, b'{"id":"b","v":2}')]
    assert "HTTP 422: bad" in letters[0].reason
    assert orjson.loads(endpoint.requests[1].content) == [{"id": "c", "v": 3}]
    assert len(endpoint.requests) == 2
    assert w.statistics().dead_lettered == 1


async def test_items_not_matching_the_entries_fail_the_writer(endpoint: Endpoint) -> None:
    endpoint.script = [items(200, 503)]
    with pytest.raises(FatalError, match="2 items for a request of 3 entries"):
        await deliver(writer(), ROWS)


def test_other_success_bodies_mean_every_entry_landed() -> None:
    redact = Redactor(())
    for body in (b"", b"OK", b"[1,2]", b'{"errors":false,"items":[{"status":201}]}',
                 b'{"accepted": 3}', b'{"errors": false}'):  # fmt: skip
        assert parse_items(body, 1, redact) is None
    assert parse_items(b"{not json", 1, redact, content_type="text/plain") is None


async def test_partial_failure_parsing_can_be_off_or_replaced(endpoint: Endpoint) -> None:
    endpoint.default = lambda request: items(*[503] * len(orjson.loads(request.content)))
    w = await deliver(writer(parse_partial_failures=False), ROWS)
    assert len(endpoint.requests) == 1 and w.statistics().delivered == 3
    endpoint.default = lambda request: items(*[200] * len(orjson.loads(request.content)))

    def hook(response: httpx.Response, entries: Any) -> SubmitResult | None:
        assert response.status_code == 200
        return SubmitResult(retry=[0]) if len(entries) == 3 else None

    await deliver(writer(parse_response=hook), ROWS)
    assert [len(orjson.loads(r.content)) for r in endpoint.requests[1:]] == [3, 1]


# ---------------------------------------------------------------------- reconcile


def call_info(seqs: tuple[int, ...] = (4, 5, 6)) -> CallInfo:
    return CallInfo(3, "key/with space", "sink/0/0", seqs)


@pytest.mark.parametrize(
    ("status", "payload", "held"),
    [
        (200, {"state": "completed", "status": 200, "response": {"errors": False,
                "items": [{"status": 200}] * 3}}, (4, 5, 6)),
        (200, {"state": "completed", "status": 200, "response": {"errors": True,
                "items": [{"status": 200}, {"status": 503}, {"status": 400}]}}, (4,)),
        (200, {"state": "completed", "status": 200, "response": {"ok": True}}, (4, 5, 6)),
        (200, {"state": "completed", "status": 500, "response": {}}, ()),
        (404, {"error": "unknown idempotency key"}, ()),
        (200, {"state": "in_flight"}, None),
        (500, {"error": "down"}, None),
        (200, {"state": "completed", "response": {"items": [{"status": 200}]}}, None),
    ],
)  # fmt: skip
async def test_reconcile_reads_the_status_resource(
    status: int, payload: Any, held: tuple[int, ...] | None
) -> None:
    with mocked_web() as router:
        route = router.get(url__startswith="https://sink.test/status/").mock(
            return_value=httpx.Response(status, json=payload)
        )
        w = writer(reconcile_url=STATUS_URL, bearer_token="tok", headers="X-Tenant: t1")
        async with w:
            answer = await w.reconcile(call_info())
    assert (tuple(answer) if answer is not None else None) == held
    request = route.calls.last.request
    assert request.url.raw_path == b"/status/key%2Fwith%20space"
    assert request.headers["authorization"] == "Bearer tok"
    assert request.headers["x-tenant"] == "t1"


async def test_reconcile_without_answer_or_template_cannot_tell() -> None:
    with mocked_web() as router:
        router.get(url__startswith="https://sink.test/").mock(
            side_effect=httpx.ConnectError("refused")
        )
        async with writer(reconcile_url=STATUS_URL) as w:
            assert await w.reconcile(call_info()) is None
        async with writer() as w:
            assert await w.reconcile(call_info()) is None
        assert not router.calls.call_count - 1  # only the first writer asked


# ---------------------------------------------------------------------- secrets


SECRET = "s3cr3t-t0ken-XYZ"


async def test_secrets_never_show_in_reprs_errors_or_logs(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization", "")
        logging.getLogger("httpx").debug("answering %s", auth)
        body = {"error": "bad credentials", "got": auth, "echo": [auth] * 50}
        return httpx.Response(401, headers={"X-Echo": auth}, json=body)

    endpoint.default = echo
    caplog.set_level(logging.DEBUG)
    kinds: list[dict[str, Any]] = [
        {"bearer_token": SECRET},
        {"basic_username": "ann", "basic_password": SECRET},
    ]
    for http in kinds:
        w = writer(**http)
        with pytest.raises(FatalError) as caught:
            await deliver(w, ROWS)
        shown = [str(caught.value), repr(caught.value), repr(w), repr(w.http), caplog.text,
                 str(w.http.__dict__.get("headers"))]  # fmt: skip
        for text in shown:
            assert SECRET not in text
            assert base64.b64encode(f"ann:{SECRET}".encode()).decode() not in text
        assert "***" in str(caught.value)  # the echo was masked, not dropped
    assert "answering" in caplog.text


def test_options_repr_masks_credentials_and_header_values() -> None:
    options = HttpOptions(url=URL, api_key=SECRET, headers={"X-Session": SECRET})
    assert SECRET not in repr(options)
    assert "api_key='***'" in repr(options) and "'X-Session': '***'" in repr(options)
    with pytest.raises(OptionError) as caught:
        HttpOptions(url=URL, headers=f"Authorization Bearer {SECRET}")
    assert SECRET not in str(caught.value)
    with pytest.raises(OptionError) as caught:
        HttpOptions(url=f"ftp://ann:{SECRET}@sink.test/")
    assert SECRET not in str(caught.value) and "'url'" in str(caught.value)


def test_excerpt_masks_a_secret_across_the_cut() -> None:
    redact = Redactor([SECRET])
    body = ("x" * 490 + SECRET + "y" * 100).encode()
    excerpt = redact.excerpt(body)
    assert SECRET[:5] not in excerpt
    assert excerpt.startswith("x" * 490 + "***")
    assert len(excerpt) <= 503


# ---------------------------------------------------------------------- options, lifecycle


async def test_create_writer_parses_both_option_groups_from_spark_strings(
    endpoint: Endpoint,
) -> None:
    letters: list[DeadLetter] = []
    w = create_writer(
        {"URL": URL, "maxbatchsize": "2", "GZIP": "true", "gzipLevel": "1", "method": "Put",
         "readTimeoutMs": "2s", "decimalAs": "number", "deadLetter": letters.append},
    )  # fmt: skip
    assert w.options.max_batch_size == 2 and w.http.gzip and w.http.gzip_level == 1
    assert w.http.read_timeout_ms == 2000 and w.http.method == "put"
    await deliver(w, [{"d": decimal.Decimal("1.5")}] * 3)
    assert [len(orjson.loads(gzip.decompress(r.content))) for r in endpoint.requests] == [2, 1]
    assert orjson.loads(gzip.decompress(endpoint.requests[0].content)) == [{"d": 1.5}] * 2


def test_create_writer_rejects_unknown_and_missing_options() -> None:
    with pytest.raises(OptionError, match="unknown option 'bearer'.*bearerToken"):
        create_writer({"url": URL, "bearer": SECRET})
    with pytest.raises(OptionError, match="'url'"):
        create_writer({"maxBatchSize": "10"})
    for level in ("10", "-1", "six"):  # every way out of range says the whole range
        with pytest.raises(OptionError, match="'gzipLevel'.*an integer from 0 to 9"):
            create_writer({"url": URL, "gzipLevel": level})


@pytest.mark.parametrize(
    ("http", "name"),
    [
        ({"url": "ftp://sink.test/"}, "url"),
        ({"method": "GET"}, "method"),
        ({"body_format": "xml"}, "bodyFormat"),
        ({"reconcile_url": "https://sink.test/status"}, "reconcileUrl"),
        ({"tls_verify": False, "ca_bundle": "/ca.pem"}, "caBundle"),
        ({"headers": "X-A"}, "headers"),
        ({"headers": {"X-A": "1\r\nX-B: 2"}}, "headers"),
        ({"idempotency_header": "Bad Header"}, "idempotencyHeader"),
        ({"idempotency_header": "Idempotency-Key\n"}, "idempotencyHeader"),
        ({"api_key": "k", "api_key_header": "X-Api-Key\n"}, "apiKeyHeader"),
    ],
)
def test_invalid_options_name_the_option(http: dict[str, Any], name: str) -> None:
    with pytest.raises(OptionError) as caught:
        HttpOptions(**{"url": URL, **http})
    assert repr(name) in str(caught.value) or f"'{name}'" in str(caught.value)


async def test_the_writer_closes_its_own_client_but_not_a_given_one(endpoint: Endpoint) -> None:
    w = writer(reconcile_url=STATUS_URL)
    await deliver(w, ROWS)
    assert w._web is None
    with pytest.raises(WriterStateError):
        await w.reconcile(call_info())

    async with httpx.AsyncClient() as shared:
        given = HttpWriter(HttpOptions(url=URL, bearer_token="t"), client=shared,
                           options=fast())  # fmt: skip
        await deliver(given, ROWS)
        assert not shared.is_closed
        assert endpoint.requests[-1].headers["authorization"] == "Bearer t"
    assert shared.is_closed


async def test_an_unreadable_ca_bundle_fails_on_open(tmp_path: Any) -> None:
    w = writer(ca_bundle=str(tmp_path / "missing.pem"))
    with pytest.raises(OptionError, match="'caBundle'"):
        async with w:
            pass


async def test_the_pool_holds_max_in_flight_connections() -> None:
    w = writer(fast(max_in_flight_requests=3))
    async with w:
        transport = w._web
        assert isinstance(transport, AiohttpTransport)
        assert transport.connections == 3
    w = writer(fast(max_in_flight_requests=3), http2=True)
    async with w:
        assert isinstance(w._web, HttpxTransport)
        pool = w._web.client._transport._pool  # type: ignore[attr-defined]
        assert pool._max_connections == 3
        assert pool._max_keepalive_connections == 3


async def test_timeouts_apply_to_each_request(endpoint: Endpoint) -> None:
    await deliver(writer(connect_timeout_ms=1500, read_timeout_ms=2500), ROWS)
    timeout = endpoint.requests[0].extensions["timeout"]
    assert timeout == {"connect": 1.5, "read": 2.5, "write": 2.5, "pool": None}


async def test_slow_compression_does_not_change_the_bytes(endpoint: Endpoint) -> None:
    rows = [{"id": i, "pad": "p" * 600} for i in range(500)]  # over the in-thread threshold
    await deliver(writer(fast(max_batch_size=500), gzip=True), rows)
    (request,) = endpoint.requests
    assert orjson.loads(gzip.decompress(request.content)) == rows
    assert gzip.compress(gzip.decompress(request.content), 6, mtime=0) == request.content


def not_utf8_batch() -> Any:
    """Rows ``a``, (bytes that are not UTF-8), ``c`` of a string column ``id``."""
    import struct

    import pyarrow as pa

    offsets = pa.py_buffer(struct.pack("<4i", 0, 1, 3, 4))
    text = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"a\xff\xfec")])
    return pa.RecordBatch.from_arrays([text, pa.array([1, 2, 3])], ["id", "v"])


async def test_a_bad_value_in_a_record_batch_is_a_bad_record_at_its_position(
    endpoint: Endpoint,
) -> None:
    from asyncsink import ArrowRows

    with pytest.raises(BadRecordError) as caught:
        await deliver(writer(), ArrowRows(not_utf8_batch()))
    assert caught.value.position == 1
    assert "'id'" in str(caught.value) and "UTF-8" in str(caught.value)


async def test_a_bad_value_in_a_record_batch_goes_to_dead_letter_and_the_rest_is_sent(
    endpoint: Endpoint,
) -> None:
    from asyncsink import ArrowRows

    letters: list[DeadLetter] = []
    await deliver(writer(fast(dead_letter=letters.append)), ArrowRows(not_utf8_batch()))
    assert [letter.position for letter in letters] == [1]
    assert sorted(entry["id"] for entry in endpoint.entries()) == ["a", "c"]
