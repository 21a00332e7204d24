import pytest

from tests.servers.emulators import (
    dynalite_endpoint,  # noqa: F401
    kinesalite_endpoint,  # noqa: F401
    moto_endpoint,  # noqa: F401
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
