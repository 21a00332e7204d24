"""A destination nobody listens at: the first failed connection is logged at once with
the (masked) URL, and a refused connection fails the writer at once while nothing was
ever delivered there from this process, instead of after every retry."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest

from asyncsink import CallInfo, DeliveryError, FatalError, RetryableError, SinkOptions
from asyncsink.clients.connections import ConnectionFailure, connection_failure
from asyncsink.sinks.http import create_writer

from .fakes import Destination, FakeWriter

pytestmark = pytest.mark.anyio

TOKEN = "t0k/en?#@:%\u00e9"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: connecting to it is refused


class NamedWriter(FakeWriter):
    """A fake writer whose destination has a name of its own, so that what other tests
    delivered does not count as delivered there."""

    def __init__(self, destination: Destination, name: str, **kwargs: Any) -> None:
        super().__init__(destination, **kwargs)
        self.name = name

    def describe_destination(self) -> str:
        return self.name


def refused(times: int) -> Any:
    count = 0

    def handler(entries: list[Any], call: CallInfo) -> None:
        nonlocal count
        count += 1
        if count <= times:
            try:
                raise ConnectionRefusedError(111, "Connect call failed")
            except ConnectionRefusedError as exc:
                raise RetryableError("cannot connect") from exc

    return handler


async def test_an_http_endpoint_with_nothing_listening_fails_at_once_naming_it_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/in?token={quote(TOKEN, safe='')}"
    writer = create_writer({"url": url})
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(FatalError) as caught:
        async with writer:
            await writer.write({"id": 1})
    assert time.monotonic() - started < 5  # not ~32 s of retries
    message = str(caught.value)
    assert "/in?token=*** refused the connection" in message
    assert "failFastOnConnectionRefused=false" in message
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot connect to http://127.0.0.1:" in warnings[0].message
    assert "(refused)" in warnings[0].message
    assert "t0k" not in caplog.text and "t0k" not in message


async def test_without_fail_fast_a_refused_connection_is_retried_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = SinkOptions(
        fail_fast_on_connection_refused=False, max_retries=3, initial_backoff_ms=1
    )
    writer = NamedWriter(Destination(refused(99)), f"dest-{uuid.uuid4()}", options=options)
    with caplog.at_level(logging.WARNING), pytest.raises(DeliveryError):
        async with writer:
            await writer.write(1)
    assert writer.destination.requests == [[1]] * 4
    connection_warnings = [r for r in caplog.records if "cannot connect to" in r.message]
    assert len(connection_warnings) == 1


async def test_a_destination_this_process_delivered_to_is_retried_when_it_refuses() -> None:
    name = f"dest-{uuid.uuid4()}"
    options = SinkOptions(initial_backoff_ms=1, max_backoff_ms=5)
    async with NamedWriter(Destination(), name, options=options) as first:
        await first.write(1)
    second = NamedWriter(Destination(refused(2)), name, options=options)
    async with second:
        await second.write(2)
    assert second.destination.accepted == [2]  # restarting, not misconfigured


async def test_a_writer_that_delivered_retries_a_refused_connection() -> None:
    count = 0

    def handler(entries: list[Any], call: CallInfo) -> None:
        nonlocal count
        count += 1
        if count in (2, 3):
            refused(1)(entries, call)

    options = SinkOptions(initial_backoff_ms=1, max_backoff_ms=5, max_batch_size=1)
    writer = NamedWriter(Destination(handler), f"dest-{uuid.uuid4()}", options=options)
    async with writer:
        await writer.write(1)
        await writer.flush()
        await writer.write(2)
    assert writer.destination.accepted == [1, 2]


async def test_other_failures_are_not_connection_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(entries: list[Any], call: CallInfo) -> None:
        raise RetryableError("HTTP 503")

    options = SinkOptions(max_retries=1, initial_backoff_ms=1)
    writer = NamedWriter(Destination(handler), f"dest-{uuid.uuid4()}", options=options)
    with caplog.at_level(logging.WARNING), pytest.raises(DeliveryError):
        async with writer:
            await writer.write(1)
    assert "cannot connect" not in caplog.text


def test_connection_failures_are_found_in_the_chain_of_causes() -> None:
    def chained(cause: BaseException) -> BaseException:
        try:
            try:
                raise cause
            except OSError as exc:
                raise RuntimeError("client error") from exc
        except RuntimeError as outer:
            return outer

    assert connection_failure(chained(ConnectionRefusedError(111, "x"))) is (
        ConnectionFailure.REFUSED
    )
    assert connection_failure(chained(OSError(111, "x"))) is ConnectionFailure.REFUSED
    assert connection_failure(chained(socket.gaierror(-2, "Name or service not known"))) is (
        ConnectionFailure.UNREACHABLE
    )
    assert connection_failure(chained(ConnectionResetError(104, "reset"))) is None
    assert connection_failure(TimeoutError("no answer")) is None
