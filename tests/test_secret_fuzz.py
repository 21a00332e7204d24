"""Secrets made of the characters that break naive masking (``/ ? # @ : %``, and
non-ASCII ones), given in every secret option of every sink and inside URLs (userinfo,
query): no trace of them in exceptions, tracebacks, DEBUG logs, the reprs of options and
writers, dead letters, statistics or the attributes of metric data points, whether the
options are refused or the writer runs against an endpoint that echoes every request
header it received.

Each secret carries a marker that appears nowhere else; its raw, percent-encoded and
JSON-escaped forms, and the Authorization values built from it, are looked for.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import traceback
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

import anyio
import pytest

from asyncsink import AsyncSinkError, DeadLetter, OptionError, Scope
from asyncsink.masking import mask_url
from asyncsink.options import SinkOptions, option_specs
from asyncsink.sinks.elasticsearch import ElasticsearchOptions
from asyncsink.sinks.http import HttpOptions
from asyncsink.sinks.kinesis import KinesisOptions
from asyncsink.spark import SinkSpec
from asyncsink.spark.runner import run_partition
from asyncsink.spark.spec import DurableOptions
from asyncsink.stores import open_store
from asyncsink.telemetry import record_committed
from tests.metrics import data_points, in_memory_metrics

MARK = "Zq7mark"
SECRETS = {
    "ascii": f"p/a?s#s@w:o%rd-{MARK}-%2F",
    "non-ascii": f"s\u00e9/cr?\u00e9t#@:%-{MARK}-\u00fc",
}


def forms(secret: str) -> list[str]:
    """What of ``secret`` must never be seen: itself, its marker, its encoded forms, and
    Authorization values built from it (the marker covers every form that keeps it)."""
    found = [MARK, quote(secret, safe=""), json.dumps(secret)[1:-1]]
    for pair in (f"user:{secret}", secret):
        found.append(base64.b64encode(pair.encode()).decode())
    return found


def assert_no_trace(secret: str, *texts: str) -> None:
    for text in texts:
        for form in forms(secret):
            assert form not in text, f"{form!r} shows in: {text}"


def trace_of(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


class _Echo(BaseHTTPRequestHandler):
    """Answers every request by echoing all it received (path with query, headers): with
    401 in mode ``refuse``, else with a bulk answer whose first item is refused with the
    echo as its error (HTTP items or Elasticsearch items, by the path)."""

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        echo = f"{self.path} {dict(self.headers)}"
        server: Any = self.server
        if "X-Amz-Target" in self.headers:  # Kinesis: a request error that echoes it all
            self._answer(400, {"__type": "ValidationException", "message": echo})
        elif server.mode == "refuse" or self.path.startswith(("/token", "/sts")):
            self._answer(401, {"error": echo})  # a token endpoint, STS: refused
        elif "/_bulk" in self.path:
            count = body.count(b"\n") // 2
            items = [{"index": {"status": 201}} for _ in range(count)]
            items[0] = {"index": {"status": 400, "error": {"type": "x", "reason": echo}}}
            self._answer(200, {"errors": True, "items": items})
        else:
            count = len(json.loads(body))
            items = [{"status": 400, "error": echo}] + [{"status": 201}] * (count - 1)
            self._answer(200, {"errors": True, "items": items})

    def _answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Echo", self.headers.get("Authorization", "none"))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def echo() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.mode = "items"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def base(sink: str, echo: Any) -> dict[str, Any]:
    here = f"http://127.0.0.1:{echo.server_port}"
    return {
        "http": {"url": f"{here}/in"},
        "elasticsearch": {"hosts": here, "index": "orders"},
        "kinesis": {
            "streamName": "orders",
            "region": "us-east-1",
            "endpointUrl": here,
        },
    }[sink]


KEYS = {"awsAccessKeyId": "AKIDEXAMPLE", "awsSecretAccessKey": "wJalrXUt"}
NEEDS = {  # what a secret option needs beside it to be accepted
    "basicPassword": {"basicUsername": "user"},
    "awsAccessKeyId": {"awsSecretAccessKey": "wJalrXUtnFEMI"},
    "awsSecretAccessKey": {"awsAccessKeyId": "AKIDEXAMPLE"},
    "awsSessionToken": KEYS,
    "awsExternalId": {**KEYS, "awsRoleArn": "arn:aws:iam::123456789012:role/writer"},
    "oauth2ClientSecret": {"oauth2ClientId": "user"},  # and oauth2TokenUrl, in needs()
    "clientKeyPassword": {},  # and clientCert, in needs()
}
SIGNING = {  # what the AWS options need on the sinks that sign requests
    "http": {"awsService": "execute-api", "region": "us-east-1"},
    "elasticsearch": {"awsService": "es", "region": "us-east-1"},
}


def needs(sink: str, name: str, echo: Any, tmp_path: Any) -> dict[str, Any]:
    """What the secret option ``name`` needs beside it on ``sink`` to be accepted."""
    found = dict(NEEDS.get(name, {}))
    if name.startswith("aws"):
        found.update(SIGNING.get(sink, {}))
    if name.startswith("oauth2"):
        found["oauth2TokenUrl"] = f"http://127.0.0.1:{echo.server_port}/token"
    if name == "clientKeyPassword":
        import trustme

        path = tmp_path / "client.pem"
        trustme.CA().issue_cert("client.example").private_key_and_cert_chain_pem.write_to_path(
            str(path)
        )
        found["clientCert"] = str(path)
    return found


# botocore logs request headers at DEBUG, the access key id (in Authorization) and the
# session token (X-Amz-Security-Token) among them: the Kinesis writer masks its credentials
# in botocore's loggers. Non-ASCII keys are refused before a request is signed.


def secret_cases() -> list[Any]:
    cases = []
    own = {"http": HttpOptions, "elasticsearch": ElasticsearchOptions, "kinesis": KinesisOptions}
    for sink, options in own.items():
        groups = [SinkOptions, options, DurableOptions]
        for spec in (s for group in groups for s in option_specs(group) if s.secret):
            for kind in SECRETS:
                case_id = f"{sink}-{spec.spark_name}-{kind}"
                cases.append(pytest.param(sink, spec.spark_name, kind, id=case_id))
    return cases


def url_cases() -> list[Any]:
    cases = []
    for kind, secret in SECRETS.items():
        encoded = quote(secret, safe="")
        for name, shape in (
            ("userinfo-encoded", "http://user:{e}@127.0.0.1:{port}/in"),
            ("userinfo-raw", "http://user:{s}@127.0.0.1:{port}/in"),
            ("token-userinfo", "http://{e}@127.0.0.1:{port}/in"),
            ("query-encoded", "http://127.0.0.1:{port}/in?token={e}&mode=fast"),
            ("query-raw", "http://127.0.0.1:{port}/in?token={s}"),
        ):
            cases.append(pytest.param(shape, secret, encoded, id=f"{name}-{kind}"))
    return cases


async def run_writer(writer: Any) -> BaseException | None:
    """Write a few rows (one of them too large: a bad record); the error, if any."""
    try:
        async with writer:
            for i in range(5):
                await writer.write({"id": f"r{i}", "pad": "x" * (2000 if i == 3 else 1)})
    except Exception as exc:
        return exc
    return None


def exercise(
    sink: str, options: dict[str, Any], secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Declare the job and, if the options are accepted, run its writer; look for the
    secret everywhere it could surface."""
    letters: list[DeadLetter] = []
    options = {**options, "maxRecordSizeInBytes": "1kb", "maxRetries": "1",
               "initialBackoffMs": "1", "deadLetter": letters.append}  # fmt: skip
    with caplog.at_level(logging.DEBUG):
        try:
            spec = SinkSpec(sink, options)
        except OptionError as refused:
            assert_no_trace(secret, trace_of(refused), caplog.text)
            return
        writer = spec.build()
        shown = [repr(spec), repr(spec.durable), repr(writer), repr(writer.options)]
        shown += [repr(getattr(writer, name)) for name in ("http", "es", "kinesis")
                  if hasattr(writer, name)]  # fmt: skip
        with in_memory_metrics() as reader:
            error = anyio.run(run_writer, writer)
            record_committed([(writer.statistics(), writer.metric_attributes())])
            points = data_points(reader)
        assert points, "no metric was recorded"
        shown += [repr(attributes) for _, attributes, _ in points]
        shown += [repr(writer.statistics()), repr(writer)]
    shown += [letter.to_json().decode() + letter.reason for letter in letters]
    if error is not None:
        shown.append(trace_of(error))
    assert_no_trace(secret, caplog.text, *shown)
    # It talked to the echo server, which echoed every header it received.
    if sink == "kinesis":
        assert "ValidationException" in str(error), "the echo was never read"
    else:
        echoed = any("'host'" in letter.reason.lower() for letter in letters)
        assert echoed or "HTTP 401" in str(error), "the echo was never read"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("sink", "name", "kind"), secret_cases())
def test_a_secret_option_leaves_no_trace(
    sink: str,
    name: str,
    kind: str,
    echo: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    secret = SECRETS[kind]
    # An assumed role asks STS: the echo server answers for it, echoing what it got.
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{echo.server_port}/sts")
    options = {**base(sink, echo), **needs(sink, name, echo, tmp_path), name: secret}
    exercise(sink, options, secret, caplog)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["items", "refuse"])
@pytest.mark.parametrize(("shape", "secret", "encoded"), url_cases())
def test_a_secret_in_the_url_leaves_no_trace(
    shape: str, secret: str, encoded: str, mode: str, echo: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    echo.mode = mode
    try:
        url = shape.format(s=secret, e=encoded, port=echo.server_port)
        exercise("http", {"url": url}, secret, caplog)
        reconcile = url.replace("/in", "/status/{key}")
        exercise("http", {"url": f"http://127.0.0.1:{echo.server_port}/in",
                          "reconcileUrl": reconcile}, secret, caplog)  # fmt: skip
    finally:
        echo.mode = "items"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["items", "refuse"])
@pytest.mark.parametrize(
    ("sink", "name"),
    [("http", "bearerToken"), ("http", "apiKey"), ("http", "basicPassword"), ("http", "url"),
     ("elasticsearch", "apiKey"), ("elasticsearch", "basicPassword"),
     ("http", "awsSessionToken"), ("elasticsearch", "awsSecretAccessKey")],
)  # fmt: skip
def test_call_records_hold_no_secret(
    sink: str, name: str, mode: str, echo: Any, caplog: pytest.LogCaptureFixture
) -> None:
    secret = SECRETS["ascii"]
    store = f"memory://secret-fuzz-{uuid.uuid4().hex}"
    options = {**base(sink, echo), **needs(sink, name, echo, None), "sinkId": "fuzz",
               "recordStore": store, "maxRetries": "0",
               "deadLetter": lambda letter: None}  # fmt: skip
    if name == "url":
        options["url"] += f"?token={quote(secret, safe='')}"
    else:
        options[name] = secret
    echo.mode = mode
    try:
        with caplog.at_level(logging.DEBUG):
            try:
                run_partition(SinkSpec(sink, options), [{"id": f"r{i}"} for i in range(4)], "r", 0)
            except AsyncSinkError as exc:
                assert_no_trace(secret, trace_of(exc))
    finally:
        echo.mode = "items"
    state = anyio.run(open_store(store).load, Scope("fuzz", 0, 0, "r"))
    assert state is not None and state.records, "no call was recorded"
    records = [value.decode() for value in state.records.values()]
    if mode == "items":  # the echo of the request is in the rejected entry's reason
        assert any("'host'" in record.lower() for record in records), records
    assert_no_trace(secret, caplog.text, *records)


@pytest.mark.parametrize(("shape", "secret", "encoded"), url_cases())
def test_hosts_endpoints_and_stores_with_secrets_are_refused_without_a_trace(
    shape: str, secret: str, encoded: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = shape.format(s=secret, e=encoded, port=9200).removesuffix("/in")
    for sink, options in (
        ("elasticsearch", {"hosts": f"http://127.0.0.1:9201,{url}", "index": "orders"}),
        ("kinesis", {"streamName": "orders", "region": "us-east-1", "endpointUrl": url}),
    ):  # fmt: skip
        with caplog.at_level(logging.DEBUG), pytest.raises(AsyncSinkError) as caught:
            SinkSpec(sink, options)
        assert_no_trace(secret, trace_of(caught.value), caplog.text)
    for store in (
        f"dynamodb://records?region=us-east-1&endpoint_url={quote(url, safe='')}",
        f"dynamodb://records?region=us-east-1&endpoint_url={url}",
        url.replace("http", "sqlite"),
        url.replace("http", "memory"),
    ):
        with caplog.at_level(logging.DEBUG):
            try:
                spec = SinkSpec("http", {"url": "http://127.0.0.1:1/in", "recordStore": store})
            except AsyncSinkError as refused:
                assert_no_trace(secret, trace_of(refused), caplog.text)
                continue
        shown = [repr(spec), repr(spec.durable), caplog.text]
        if store.startswith("dynamodb"):
            shown.append(repr(open_store(store)))  # opens no connection
        assert_no_trace(secret, *shown)


@pytest.mark.parametrize("secret", list(SECRETS.values()))
def test_mask_url_keeps_every_secret_out_whatever_its_characters(secret: str) -> None:
    for raw in (secret, quote(secret, safe="")):
        for url in (
            f"https://user:{raw}@host:8443/p?a=1",
            f"https://{raw}@host/p",
            f"https://host/p?token={raw}&b=2",
            f"https://host/p#{raw}",
            f"host:{raw}@h",
        ):
            assert_no_trace(secret, mask_url(url))
