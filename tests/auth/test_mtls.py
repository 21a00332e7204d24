"""Mutual TLS on the HTTP and Elasticsearch sinks: a local TLS server that requires a client
certificate (made with trustme) takes the rows with clientCert and clientKey, and refuses
the handshake without them, which fails the task at once with what to set."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
import trustme

from asyncsink import OptionError
from asyncsink.sinks.elasticsearch import create_writer as es_writer
from asyncsink.sinks.http import create_writer as http_writer

pytestmark = pytest.mark.anyio

PASSWORD = "k3y-pa55/Zq"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server: Any = self.server
        peer = self.connection.getpeercert()  # type: ignore[attr-defined]
        server.subjects.append(dict(part[0] for part in peer["subject"]) if peer else None)
        if self.path.endswith("/_bulk"):
            count = body.count(b"\n") // 2
            payload = {"errors": False, "items": [{"index": {"status": 201}}] * count}
        else:
            server.ids.extend(entry["id"] for entry in json.loads(body))
            payload = {"errors": False}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("spark-job@example.com", common_name="spark-job")
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key", "encrypted")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSWORD.encode()),
    )
    paths["encrypted"].write_bytes(encrypted)
    return {"authority": ca, "server": server_cert, **{k: str(v) for k, v in paths.items()}}


@pytest.fixture(scope="module")
def tls_server(pki: dict[str, Any]) -> Iterator[Any]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    pki["server"].configure_cert(context)
    pki["authority"].configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.ids, server.subjects = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "v": i} for i in range(count)]


def base(server: Any, pki: dict[str, Any], **overrides: str) -> dict[str, str]:
    return {
        "url": f"https://127.0.0.1:{server.server_port}/in",
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
                   clientKeyPassword=PASSWORD)  # fmt: skip
    await deliver(http_writer(options), rows("encrypted", 10))
    assert {f"encrypted-{i}" for i in range(10)} <= set(tls_server.ids)


async def test_the_elasticsearch_sink_presents_it_too(tls_server: Any, pki: dict[str, Any]) -> None:
    options = {
        "hosts": f"https://127.0.0.1:{tls_server.server_port}",
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
