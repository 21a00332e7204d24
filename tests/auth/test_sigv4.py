"""AWS SigV4 on the HTTP and Elasticsearch sinks, against endpoints that verify every
signature with botocore from the same keys and answer 403 the way AWS does."""

from __future__ import annotations

import gzip
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from asyncsink import FatalError, OptionError
from asyncsink.aws.credentials import AwsIdentity, CredentialSource
from asyncsink.sinks.elasticsearch import create_writer as es_writer
from asyncsink.sinks.http import create_writer as http_writer
from asyncsink.sinks.web.sigv4 import SigV4
from asyncsink.sinks.web.transport import Answer, Request, Timeout, Transport
from asyncsink.testing import Faults, FaultServer
from asyncsink.testing.sigv4 import SigV4Check, verify
from tests.servers.elasticsearch import ElasticsearchServer

pytestmark = pytest.mark.anyio

KEY, SECRET = "AKIDSIGV4TEST", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSIGV4"
KEYS = {"awsAccessKeyId": KEY, "awsSecretAccessKey": SECRET}
CHECK_API = SigV4Check("execute-api", "eu-west-1", keys=((KEY, SECRET),))
CHECK_ES = SigV4Check("es", "eu-west-1", keys=((KEY, SECRET),))


@pytest.fixture(scope="module")
def api() -> Iterator[FaultServer]:
    with FaultServer(sigv4=CHECK_API) as server:
        yield server


@pytest.fixture
def endpoint(api: FaultServer) -> FaultServer:
    api.set_faults(Faults())
    api.reset()
    return api


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "v": i, "pad": "x" * 40} for i in range(count)]


def signed(url: str, **overrides: str) -> dict[str, str]:
    return {
        "url": url,
        "awsService": "execute-api",
        "region": "eu-west-1",
        **KEYS,
        "maxBatchSize": "50",
        "maxRetries": "40",
        "initialBackoffMs": "1",
        "maxBackoffMs": "50",
        **overrides,
    }


async def deliver(writer: Any, data: list[dict[str, Any]]) -> Any:
    with anyio.fail_after(60):
        async with writer:
            await writer.write_all(data)
    return writer


async def test_gzip_retries_and_5xx_deliver_every_row_and_every_signature_verifies(
    endpoint: FaultServer,
) -> None:
    endpoint.set_faults(
        Faults(error_rate=0.2, throttle_rate=0.1, retry_after_s=0.01, reset_rate=0.05, seed=44)
    )
    data = rows("signed", 1500)
    await deliver(http_writer(signed(endpoint.ingest_url, gzip="true")), data)
    stats = endpoint.stats()
    assert sorted(endpoint.applied_ids()) == sorted(row["id"] for row in data)
    assert stats.duplicates == 0
    assert any(stats.statuses.get(s) for s in (500, 502, 504)), "no 5xx was injected"
    assert stats.resets > 0, "no retry after a reset"
    assert stats.statuses.get(403, 0) == 0 and stats.statuses.get(400, 0) == 0


async def test_a_wrong_secret_fails_fast_with_a_403_naming_the_signing_options(
    endpoint: FaultServer,
) -> None:
    options = signed(endpoint.ingest_url, awsSecretAccessKey="not-the-secret")
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        await deliver(http_writer(options), rows("wrong", 20))
    assert time.monotonic() - started < 5
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    fatal = next(e for e in chain if isinstance(e, FatalError))
    message = str(fatal)
    assert fatal.status == 403 and "HTTP 403" in message
    for name in ("awsService", "region", "awsAccessKeyId/awsSecretAccessKey", "awsRoleArn"):
        assert name in message, message
    assert "signature we calculated does not match" in message
    assert "not-the-secret" not in message
    assert endpoint.stats().entries_received == 0


async def test_a_tampered_body_fails_the_content_hash_check() -> None:
    body = b'[{"id": 1}]'
    request = Request("POST", "http://127.0.0.1:1/in", {"content-type": "application/json"},
                      body, Timeout(1, 1))  # fmt: skip
    source = CredentialSource(AwsIdentity(access_key_id=KEY, secret_access_key=SECRET))
    sent = await SigV4(source, "execute-api", "eu-west-1").authenticate(request, _Nowhere())
    headers = {**sent.headers, "host": "127.0.0.1:1"}
    assert verify(CHECK_API, "POST", sent.url, headers, body) is None
    assert verify(CHECK_API, "POST", sent.url, headers, body + b" ")[0] == 400
    assert headers["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    wrong_region = SigV4Check("execute-api", "us-east-1", keys=((KEY, SECRET),))
    assert verify(wrong_region, "POST", sent.url, headers, body)[0] == 403


class _Nowhere(Transport):
    async def handle_async_request(self, request: Request) -> Answer:
        raise AssertionError("nothing is sent")


class _Recorded(Transport):
    """Answers 503 to the first ``failures`` requests, then 200; keeps what it got."""

    def __init__(self, failures: int) -> None:
        self.seen: list[Request] = []
        self.failures = failures

    async def handle_async_request(self, request: Request) -> Answer:
        self.seen.append(request)
        status = 503 if len(self.seen) <= self.failures else 200
        body = b'{"errors": false}' if status == 200 else b"{}"
        return Answer(status, "", httpx.Headers(), body, method=request.method, url=request.url)


async def test_every_attempt_is_signed_again_over_the_gzip_bytes_sent() -> None:
    recorded = _Recorded(failures=2)
    options = signed("http://127.0.0.1:9/in", gzip="true", maxBatchSize="10")
    await deliver(http_writer(options, transport=recorded), rows("again", 10))
    assert len(recorded.seen) == 3
    for request in recorded.seen:
        assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
        digest = hashlib.sha256(request.content).hexdigest()
        assert request.headers["x-amz-content-sha256"] == digest  # the compressed bytes
        assert gzip.decompress(request.content).startswith(b"[")
        headers = {**request.headers, "host": "127.0.0.1:9"}
        assert verify(CHECK_API, "POST", request.url, headers, request.content) is None


async def test_a_session_token_is_sent_and_signed() -> None:
    recorded = _Recorded(failures=0)
    options = signed("http://127.0.0.1:9/in", awsSessionToken="FwoGZXIvYXdzEJr//token")
    await deliver(http_writer(options, transport=recorded), rows("token", 3))
    headers = recorded.seen[0].headers
    assert headers["x-amz-security-token"] == "FwoGZXIvYXdzEJr//token"
    assert "x-amz-security-token" in headers["authorization"]


def test_static_keys_are_one_source_shared_and_never_shown() -> None:
    identity = AwsIdentity(access_key_id=KEY, secret_access_key=SECRET)
    source = CredentialSource(identity)
    assert SECRET not in repr(source) and KEY not in repr(identity)
    frozen = anyio.run(source.current)
    assert (frozen.access_key, frozen.secret_key) == (KEY, SECRET)
    assert SECRET not in repr(frozen)


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"awsService": "es"}, "region"),
        ({"awsService": "es", "region": "eu-west-1", "bearerToken": "t"}, "awsService"),
        ({"awsService": "es", "region": "eu-west-1", "awsRoleArn": "arn:aws:iam::1:role/x"},
         "awsRoleArn"),
        ({"awsAccessKeyId": KEY, "awsSecretAccessKey": SECRET}, "awsAccessKeyId"),
        ({"awsService": "es", "region": "eu-west-1", "awsAccessKeyId": KEY},
         "awsSecretAccessKey"),
        ({"awsService": "es", "region": "eu-west-1", "awsExternalId": "ext-1"},
         "awsExternalId"),
    ],
)  # fmt: skip
def test_signing_options_are_checked_before_anything_runs(
    options: dict[str, str], option: str
) -> None:
    for make, base in (
        (http_writer, {"url": "https://api.example/in"}),
        (es_writer, {"hosts": "https://search.example", "index": "logs"}),
    ):
        with pytest.raises(OptionError) as caught:
            make({**base, **options})
        assert caught.value.option == option, str(caught.value)


# ---------------------------------------------------------------------- Elasticsearch


@pytest.fixture(scope="module")
def signed_es() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer(in_thread=True, flavor="opensearch", sigv4=CHECK_ES) as server:
        yield server


def es_options(server: ElasticsearchServer, **overrides: str) -> dict[str, str]:
    return {
        "hosts": server.url,
        "index": "signed",
        "awsService": "es",
        "region": "eu-west-1",
        **KEYS,
        "maxBatchSize": "100",
        "initialBackoffMs": "1",
        **overrides,
    }


async def test_opensearch_with_sigv4_and_gzip_takes_every_document(
    signed_es: ElasticsearchServer,
) -> None:
    signed_es.reset()
    data = rows("es", 600)
    await deliver(es_writer(es_options(signed_es, gzip="true", refresh="true")), data)
    assert len(signed_es.documents("signed")) == 600
    statuses = signed_es.stats().responses_by_status
    assert 403 not in statuses and 400 not in statuses, statuses


async def test_opensearch_refuses_a_wrong_signature_with_a_403_naming_the_options(
    signed_es: ElasticsearchServer,
) -> None:
    signed_es.reset()
    options = es_options(signed_es, awsSecretAccessKey="wrong-secret")
    with pytest.raises(Exception) as caught:
        await deliver(es_writer(options), rows("wrong", 5))
    text = str(caught.value) + str(caught.value.__cause__)
    assert "403" in text and "awsService" in text and "wrong-secret" not in text
