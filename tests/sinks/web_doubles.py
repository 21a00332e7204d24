"""respx behind the sinks' transport contract: writers that would open or share a
transport send through ``HttpxTransport`` with a client respx intercepts, so a mocked
writer runs the same code above the transport as one that sends through aiohttp."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import respx

from asyncsink.sinks.web import clients
from asyncsink.sinks.web.httpx_transport import HttpxTransport


@contextmanager
def mocked_web(**options: Any) -> Iterator[respx.MockRouter]:
    """``respx.mock(using="httpx", **options)``, the writers' transports routed to it."""
    opened: list[httpx.AsyncClient] = []

    def open_transport(*args: Any, **kwargs: Any) -> HttpxTransport:
        opened.append(httpx.AsyncClient())  # respx takes every request of an httpx client
        return HttpxTransport(opened[-1], owned=True)

    async def get_transport(*args: Any) -> HttpxTransport:
        return open_transport()

    with respx.mock(using="httpx", **options) as router, pytest.MonkeyPatch.context() as patch:
        patch.setattr(clients, "open_transport", open_transport)
        patch.setattr(clients, "get_transport", get_transport)
        yield router
