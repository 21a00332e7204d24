"""Run the driver's async work from synchronous code, whether or not the calling thread
runs an event loop.

::

    run_blocking(verify_store, url, name="checking the record store", timeout=60)

A notebook cell (Jupyter, Databricks, EMR Studio, SageMaker) runs inside the kernel's
asyncio loop, and so does any ``async def``. ``anyio.run`` raises there, and waiting on
that loop from inside it would deadlock. ``run_blocking`` gives the call a loop of its
own: on the calling thread when no loop runs there, else on a thread it starts for the
call and joins before returning. Either way it leaves no thread or loop behind.

The call keeps what it would have had on the caller's thread: its timeout, its exception
(same object, same type and message), its log records (logging is process-wide) and the
caller's context variables. An interrupt (``KeyboardInterrupt``) of the waiting caller
cancels the call, waits for it to unwind, and is raised again.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


def run_blocking(
    fn: Callable[..., Awaitable[T]],
    *args: Any,
    name: str,
    timeout: float | None = None,
) -> T:
    """``await fn(*args)`` to its end and return its result, from synchronous code.

    Args:
        name: what the call does, for the timeout's message and the thread's name.
        timeout: seconds the call may take; ``None`` for no limit.

    Raises:
        TimeoutError: the call took longer than ``timeout``.
        Exception: whatever ``fn`` raised, as it raised it.
    """
    call = _Call(fn, args, name, timeout)
    if _loop_running():
        return call.in_thread()
    with asyncio.Runner() as runner:  # in the main thread, its first Ctrl-C cancels the call
        return runner.run(call.main())


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Call(Generic[T]):
    """One call, with what it takes to cancel it from the caller's thread."""

    def __init__(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        name: str,
        timeout: float | None,
    ) -> None:
        self.fn, self.args, self.name, self.timeout = fn, args, name, timeout
        self.result: T | None = None
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False

    async def main(self) -> T:
        with self.lock:
            if self.cancelled:
                raise asyncio.CancelledError
            self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        limit = asyncio.timeout(self.timeout)
        try:
            async with limit:
                return await self.fn(*self.args)
        except TimeoutError as exc:
            if not limit.expired():
                raise  # the call's own TimeoutError
            raise TimeoutError(f"{self.name}: no answer within {self.timeout:g} s") from exc

    def in_thread(self) -> T:
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._thread_main,),
            name=f"asyncsink: {self.name}",
            daemon=True,
        )
        # Waits on an event of its own: an interrupted Thread.join (Python 3.11) marks the
        # thread stopped while it still runs.
        try:
            thread.start()
            self.done.wait()
        except BaseException:  # an interrupt while waiting: stop the call, then go
            self.cancel()
            if thread.ident is not None:
                self.done.wait()
            raise
        finally:
            if thread.ident is not None:
                thread.join()
        error, result = self.error, self.result
        self.error = self.result = None  # no cycle through the traceback
        if error is not None:
            raise error
        return result  # type: ignore[return-value]

    def _thread_main(self) -> None:
        try:
            with asyncio.Runner() as runner:
                self.result = runner.run(self.main())
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc
        finally:
            self.done.set()

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            if self.loop is not None and self.task is not None:
                self.loop.call_soon_threadsafe(self.task.cancel)
