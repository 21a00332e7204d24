"""Fixtures for the fault server's tests: one spawned server for the package, reset per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from asyncsink.testing import Faults, FaultServer


@pytest.fixture(scope="package")
def shared_fault_server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


@pytest.fixture
def fault_server(shared_fault_server: FaultServer) -> FaultServer:
    """The shared fault server, with no faults and nothing counted."""
    shared_fault_server.set_faults(Faults())
    shared_fault_server.reset()
    return shared_fault_server


@pytest.fixture
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as http_client:
        yield http_client
