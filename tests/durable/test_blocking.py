"""``run_blocking``: the driver's async work runs whether or not the calling thread runs
an event loop, keeps the call's exception, timeout, logs and context, and leaves no
thread or loop behind."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from asyncsink import OptionError
from asyncsink.durable.blocking import run_blocking

pytestmark = pytest.mark.timeout(60)

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


async def double(x: int) -> tuple[int, str, str]:
    await asyncio.sleep(0.01)
    logging.getLogger("asyncsink.test").warning("doubling %d", x)
    return 2 * x, threading.current_thread().name, request_id.get()


def calls_from(where: str, body: Callable[[], Any]) -> Any:
    """``body()`` called with no loop, inside ``asyncio.run``, or inside ``anyio.run``."""
    if where == "no loop":
        return body()

    async def inside() -> Any:
        return body()

    return asyncio.run(inside()) if where == "asyncio.run" else anyio.run(inside)


def our_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("asyncsink:")]


@pytest.mark.parametrize("where", ["no loop", "asyncio.run", "anyio.run"])
def test_the_call_returns_its_result_with_its_logs_and_context(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    request_id.set("r-17")
    result, thread, seen = calls_from(where, lambda: run_blocking(double, 21, name="doubling"))
    assert (result, seen) == (42, "r-17")
    # only a running loop needs a thread of its own, and it is gone after the call
    assert thread.startswith("asyncsink: doubling") == (where != "no loop")
    assert our_threads() == []
    assert "doubling 21" in caplog.text


@pytest.mark.parametrize("where", ["no loop", "asyncio.run", "anyio.run"])
def test_the_calls_exception_keeps_its_type_and_message(where: str) -> None:
    async def refuse() -> None:
        raise OptionError("recordStore", "x", "", message="option 'recordStore': no such table")

    with pytest.raises(OptionError, match="no such table") as raised:
        calls_from(where, lambda: run_blocking(refuse, name="checking"))
    assert raised.value.option == "recordStore"
    assert our_threads() == []


@pytest.mark.parametrize("where", ["no loop", "asyncio.run"])
def test_a_call_past_its_timeout_raises_timeout_error_naming_it(where: str) -> None:
    async def hang() -> None:
        await asyncio.sleep(30)

    with pytest.raises(TimeoutError, match="completing scopes: no answer within 0.2 s"):
        calls_from(where, lambda: run_blocking(hang, name="completing scopes", timeout=0.2))


def test_the_calls_own_timeout_error_is_not_taken_for_the_limit() -> None:
    async def own() -> None:
        raise TimeoutError("the store's own")

    with pytest.raises(TimeoutError, match="the store's own"):
        run_blocking(own, name="x", timeout=10)


def test_no_loop_is_left_set_on_the_calling_thread() -> None:
    run_blocking(double, 1, name="x")
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    asyncio.run(asyncio.sleep(0))  # a loop can still start here


def test_an_interrupt_of_the_waiting_caller_cancels_the_call_and_goes_on() -> None:
    """A kernel's cell: a loop runs on the main thread without asyncio's own SIGINT handler,
    and the interrupt button raises ``KeyboardInterrupt`` in it."""
    running, cancelled = threading.Event(), threading.Event()

    async def long_call() -> None:
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def interrupt(main: int) -> None:
        if running.wait(10):
            signal.pthread_kill(main, signal.SIGINT)

    async def cell() -> None:
        threading.Thread(target=interrupt, args=(threading.get_ident(),)).start()
        run_blocking(long_call, name="a long call")

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a kernel's cell
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(cell())
    finally:
        loop.close()
        signal.signal(signal.SIGINT, before)  # a SparkContext of the test run installed one
    assert cancelled.is_set()
    assert our_threads() == []
