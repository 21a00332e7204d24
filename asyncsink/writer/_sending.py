"""One request: sent under its deadline, and how it ended.

``send`` makes the call's PENDING record durable, sends the request through the sink's
``submit_request_entries`` within ``requestTimeoutMs`` (``asyncio.timeout``), and returns
how it ended: an answer, an error, or no answer in time. A sink that ignores the timeout
and answers late still has its answer taken: it is the truth about the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NamedTuple, TypeVar, cast

from ..durable.recorder import CallRecorder
from ..errors import FatalError, FencedError, describe
from ..request import CallInfo, SubmitResult, _current, as_result
from ._buffer import Run

__all__ = ["Call", "Ending", "error_type", "is_stray", "record_call", "send"]

E = TypeVar("E")


class Call(Generic[E]):
    """A request of the writer: its call, its entries, when it was started and sent, and
    the call log's mark (``changes``) once its record was queued."""

    __slots__ = ("info", "recorded", "run", "sent", "settled", "started")

    def __init__(self, info: CallInfo, run: Run[E], started: float, recorded: int = 0) -> None:
        self.info = info
        self.run = run
        self.started = started
        self.sent = started  # when the request left
        self.settled = False
        self.recorded = recorded


def record_call(log: CallRecorder, run: Run[E], pinned: CallInfo | None, now: float) -> Call[E]:
    """The call of ``run``, recorded in ``log``: a new call, or ``pinned`` sent again
    (its record notes when, durable with the sync before it leaves).

    Raises:
        FatalError: the entries cannot be recorded (``serialize_entry`` failed).
    """
    if pinned is not None:
        info = log.sending_again(pinned)
    else:
        try:
            info = log.new_call(run.seqs, run.entries)
        except Exception as exc:
            fatal = FatalError(f"recording a request of {len(run)} entries failed: {describe(exc)}")
            raise fatal from exc
    return Call(info, run, now, log.changes)


class Ending(NamedTuple):
    result: SubmitResult | None  # ``None`` unless it answered
    error: BaseException | None
    timed_out: bool
    late: bool = False  # it answered after its deadline, ignoring the cancellation


async def send(
    call: Call[Any],
    submit: Callable[[list[Any]], Awaitable[object]],
    sync: Callable[[], Awaitable[None]],
    seconds: float,
) -> Ending:
    """Send ``call``'s request once its record is durable (``sync``).

    Raises:
        FencedError: another attempt took the scope over (from ``sync``).
        FatalError: the answer is none (see ``as_result``).
        BaseException: what ends the writer rather than the request (``is_stray``), or
            the task's own cancellation.
    """
    token = _current.set(call.info)
    # A list, or a slice of the PackedEntries the writer's convert_all returned
    entries = cast("list[Any]", call.run.entries)
    try:
        await sync()  # PENDING is durable before the request leaves
        call.sent = time.monotonic()
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                answer = await submit(entries)
        except TimeoutError:
            if not deadline.expired():
                raise  # the sink's own timeout: a failure of the request
            return Ending(None, None, True)
    except FencedError:
        raise
    except Exception as exc:
        return Ending(None, exc, False)  # the request failed: classify_error sorts it
    finally:
        _current.reset(token)
    late = time.monotonic() > call.sent + seconds
    return Ending(as_result(answer, entries), None, False, late)


def error_type(error: BaseException | None, timed_out: bool) -> str | None:
    """A failed request's ``error.type`` in metrics; ``None`` for an answer."""
    if timed_out:
        return "timeout"
    return None if error is None else type(error).__name__


def is_stray(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a request, ends the writer (raised by the barrier)
    rather than the request's task: anything but the task being cancelled (by the
    writer, or its caller). A ``KeyboardInterrupt`` or ``SystemExit`` escaping a task
    would stop the event loop itself, which a Spark worker keeps for its later tasks."""
    if isinstance(exc, GeneratorExit):
        return False
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and not task.cancelling()
    return True
