"""STS for tests: moto's server in a thread of the test process, on a port fixed when this
module is imported, so that ``AWS_ENDPOINT_URL_STS`` (set here, before any Spark session
starts) reaches the Spark workers as well as this process.

Roles assumed through it can be looked up by their access key (``secret_of``): a signing
test endpoint in this process checks the signatures of an assumed role with them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["STS_URL", "assumed_roles", "secret_of", "sts_endpoint"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


STS_URL = f"http://127.0.0.1:{_free_port()}"
os.environ["AWS_ENDPOINT_URL_STS"] = STS_URL
_LOCK = threading.Lock()


@pytest.fixture(scope="session")
def sts_endpoint() -> Iterator[str]:
    """``STS_URL``, served by moto's ``ThreadedMotoServer`` for the session."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    port = int(STS_URL.rsplit(":", 1)[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield STS_URL
    server.stop()


def assumed_roles() -> list[Any]:
    """Every role session moto's STS handed out in this process, oldest first."""
    from moto.sts.models import sts_backends

    found: list[Any] = []
    with _LOCK:
        for account in list(sts_backends):
            for partition in list(sts_backends[account]):
                found.extend(sts_backends[account][partition].assumed_roles)
    return found


def secret_of(access_key: str) -> str | None:
    """The secret key of a role session moto's STS handed out, by its access key."""
    for role in assumed_roles():
        if role.access_key_id == access_key:
            return str(role.secret_access_key)
    return None
