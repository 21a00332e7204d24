from collections.abc import Iterator
from typing import Any

import pytest

from asyncsink.policies.request_limit import forget_learned
from tests.servers.emulators import (
    dynalite_endpoint,  # noqa: F401
    kinesalite_endpoint,  # noqa: F401
    moto_endpoint,  # noqa: F401
)
from tests.servers.postgres import postgres_server, postgres_url  # noqa: F401

# Importing it points STS at moto's server (AWS_ENDPOINT_URL_STS), for this process and
# the Spark workers it starts, before any session does.
from tests.servers.sts import sts_endpoint  # noqa: F401


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _fresh_concurrency_memory() -> Iterator[None]:
    """Each test's writers start from nothing learned by another test's writers."""
    forget_learned()
    yield
    forget_learned()


@pytest.fixture
def metric_reader() -> Iterator[Any]:
    """An OpenTelemetry SDK with an in-memory reader, as this process's meter provider."""
    from tests.metrics import in_memory_metrics

    with in_memory_metrics() as reader:
        yield reader
