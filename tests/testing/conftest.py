"""Fixtures for the fault server's tests: one spawned server for the package, reset per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from asyncsink.testing import Faults, FaultServer


@pytest.fixture(scope="package")
def shared_server() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


@pytest.fixture
def server(shared_server: FaultServer) -> FaultServer:
    """The shared server, with no faults and nothing counted."""
    shared_server.set_faults(Faults())
    shared_server.reset()
    return shared_server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client
