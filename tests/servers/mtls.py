"""A local HTTPS server that requires a client certificate, with certificates made by
trustme: for the mutual-TLS tests of the HTTP and Elasticsearch sinks.

``make_pki(folder)`` writes a CA, a client certificate, its key and the same key
encrypted with ``KEY_PASSWORD``; ``MtlsServer(pki)`` serves on 127.0.0.1, takes JSON
arrays (keeping their ``id`` fields) and bulk bodies, and records the subject of every
client certificate it saw.
"""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trustme

__all__ = ["KEY_PASSWORD", "MtlsServer", "make_pki"]

KEY_PASSWORD = "k3y-pa55/Zq"


def make_pki(folder: Path) -> dict[str, Any]:
    """A CA, a server certificate (127.0.0.1) and a client one (common name spark-job)."""
    from cryptography.hazmat.primitives import serialization

    authority = trustme.CA()
    client = authority.issue_cert("spark-job@example.com", common_name="spark-job")
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key", "encrypted")}
    authority.cert_pem.write_to_path(str(paths["ca"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    paths["encrypted"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
        )
    )
    return {
        "authority": authority,
        "server": authority.issue_cert("127.0.0.1", "localhost"),
        **{name: str(path) for name, path in paths.items()},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server: Any = self.server
        peer = self.connection.getpeercert()  # type: ignore[attr-defined]
        with server.lock:
            server.subjects.append(dict(part[0] for part in peer["subject"]) if peer else None)
            if self.path.endswith("/_bulk"):
                count = body.count(b"\n") // 2
                payload: Any = {"errors": False, "items": [{"index": {"status": 201}}] * count}
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


class MtlsServer:
    """HTTPS on 127.0.0.1 that refuses a handshake without a client certificate signed by
    ``pki``'s CA."""

    def __init__(self, pki: dict[str, Any]) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        pki["server"].configure_cert(context)
        pki["authority"].configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
        server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.ids, server.subjects, server.lock = [], [], threading.Lock()
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)

    def __enter__(self) -> MtlsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_port}"

    @property
    def ids(self) -> list[Any]:
        return list(self._server.ids)

    @property
    def subjects(self) -> list[Any]:
        return list(self._server.subjects)
