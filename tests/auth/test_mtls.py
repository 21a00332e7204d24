"""Mutual TLS on the HTTP and Elasticsearch sinks: a local TLS server that requires a client
certificate (made with trustme) takes the rows with clientCert and clientKey, and refuses
the handshake without them, which fails the task at once with what to set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from asyncsink import OptionError
from asyncsink.sinks.elasticsearch import create_writer as es_writer
from asyncsink.sinks.http import create_writer as http_writer
from tests.servers.mtls import KEY_PASSWORD, MtlsServer, make_pki

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: dict[str, Any]) -> Iterator[MtlsServer]:
    with MtlsServer(pki) as server:
        yield server


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "v": i} for i in range(count)]


def base(server: Any, pki: dict[str, Any], **overrides: str) -> dict[str, str]:
    return {
        "url": f"{server.url}/in",
        "caBundle": pki["ca"],
        "maxBatchSize": "25",
        "maxRetries": "3",
        "initialBackoffMs": "1",
        **overrides,
    }


async def deliver(writer: Any, data: list[dict[str, Any]]) -> None:
    with anyio.fail_after(20):
        async with writer:
            await writer.write_all(data)


async def test_the_client_certificate_gets_the_rows_through(
    tls_server: Any, pki: dict[str, Any]
) -> None:
    options = base(tls_server, pki, clientCert=pki["cert"], clientKey=pki["key"])
    await deliver(http_writer(options), rows("mtls", 100))
    assert sorted(tls_server.ids) == sorted(r["id"] for r in rows("mtls", 100))
    assert tls_server.subjects[-1]["commonName"] == "spark-job"


async def test_an_encrypted_key_opens_with_its_password(
    tls_server: Any, pki: dict[str, Any]
) -> None:
    options = base(tls_server, pki, clientCert=pki["cert"], clientKey=pki["encrypted"],
                   clientKeyPassword=KEY_PASSWORD)  # fmt: skip
    await deliver(http_writer(options), rows("encrypted", 10))
    assert {f"encrypted-{i}" for i in range(10)} <= set(tls_server.ids)


async def test_the_elasticsearch_sink_presents_it_too(tls_server: Any, pki: dict[str, Any]) -> None:
    options = {
        "hosts": tls_server.url,
        "index": "logs",
        "caBundle": pki["ca"],
        "clientCert": pki["cert"],
        "clientKey": pki["key"],
    }
    before = len(tls_server.subjects)
    await deliver(es_writer(options), rows("es", 10))
    assert tls_server.subjects[before:] and tls_server.subjects[-1]["commonName"] == "spark-job"


async def test_without_a_client_certificate_the_task_fails_saying_what_to_set(
    tls_server: Any, pki: dict[str, Any]
) -> None:
    with pytest.raises(Exception) as caught:
        await deliver(http_writer(base(tls_server, pki)), rows("none", 5))
    text = f"{caught.value} {caught.value.__cause__}"
    assert "clientCert" in text and "clientKey" in text, text


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"clientCert": "/nonexistent/client.pem"}, "clientCert"),
        ({"clientKey": "KEY"}, "clientKey"),
        ({"clientCert": "CERT", "clientKey": "/nonexistent/client.key"}, "clientKey"),
        ({"clientCert": "CERT", "clientKey": "ENCRYPTED"}, "clientKey"),
        ({"clientCert": "CERT", "clientKey": "ENCRYPTED", "clientKeyPassword": "wrong"},
         "clientKeyPassword"),
        ({"clientCert": "CA"}, "clientKey"),
    ],
)  # fmt: skip
def test_unreadable_or_mismatched_files_are_refused_before_anything_runs(
    pki: dict[str, Any], given: dict[str, str], option: str
) -> None:
    paths = {"CERT": pki["cert"], "KEY": pki["key"], "ENCRYPTED": pki["encrypted"], "CA": pki["ca"]}
    resolved = {name: paths.get(value, value) for name, value in given.items()}
    with pytest.raises(OptionError) as caught:
        http_writer({"url": "https://api.example/in", **resolved})
    assert caught.value.option == option, str(caught.value)
    assert "wrong" not in str(caught.value)


async def test_with_tls_verify_off_the_certificate_is_still_presented(
    tls_server: MtlsServer, pki: dict[str, Any]
) -> None:
    options = {**base(tls_server, pki, clientCert=pki["cert"], clientKey=pki["key"]),
               "tlsVerify": "false"}  # fmt: skip
    del options["caBundle"]
    await deliver(http_writer(options), rows("unverified", 5))
    assert {f"unverified-{i}" for i in range(5)} <= set(tls_server.ids)
