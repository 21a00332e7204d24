"""``AsyncSinkWriter``: the generic async writer every destination subclasses.

A subclass implements ``asyncsink.writer.sink_contract.SinkContract``. The writer buffers entries,
cuts batches by count, bytes and time, and dispatches them as far as its parts allow;
``flush()`` is the barrier: it returns once every accepted entry is acknowledged, or
raises. Its parts, each behind a small contract: congestion control (``congestion``), a
retry policy (``retry``), a recovery source (``recovery``), a dead-letter target
(``dead_letter``), an intake (``intake``: elements to sized entries), and what a settled
request means (``outcomes``).

Lifecycle: a writer is used inside ``async with``; entering opens it (and its durable
call log, if one was given), leaving flushes and closes it. Leaving on an exception
cancels what is in flight instead, and the call log keeps the calls for a retry. A
writer runs on an asyncio event loop (``asyncio.run``, or ``anyio.run``'s default), with
asyncio's tasks, events, timers and timeouts only: see ``asyncsink.writer._tasks`` for why.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from ..clients.connections import mark_reached
from ..durable.recorder import CallRecorder, NoRecords
from ..errors import (
    AsyncSinkError,
    BadRecordError,
    FatalError,
    WriterStateError,
    describe,
)
from ..options import SinkOptions
from ..policies.congestion import Congestion, CongestionStrategy
from ..policies.dead_letter import DeadLetters
from ..policies.exhausted import ExhaustedEntries, exhausted_policy
from ..policies.ordering import Ordering, ordering_for
from ..policies.rate_cap import RateCap, rate_cap_for
from ..policies.retry import BackoffRetry, RetryPolicy
from ..request import SubmitResult
from ..stats import DeadLetterCauses, Tally, WriterStatistics
from ..telemetry import NoMetrics, WriterMetrics, sink_attributes, writer_metrics
from ..telemetry.live import CAUSE_COUNT, Reading
from ._ahead import Ahead
from ._buffer import RequestBuffer, Run
from ._gate import Gate
from ._intake import Chunks, Intake
from ._outcomes import Outcome, Outcomes
from ._recovery import Recovery
from ._sending import Call, error_type, is_stray, record_call, send
from ._tasks import Progress, Tasks, Timer, finish
from .sink_contract import Reconcile, SinkContract

__all__ = ["AsyncSinkWriter", "WriterSnapshot"]

log = logging.getLogger("asyncsink")

_RUN = 2048  # elements ``write_all`` converts at once: whole batches, as many as fit

InputT = TypeVar("InputT")
EntryT = TypeVar("EntryT")


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class WriterSnapshot(Generic[EntryT]):
    """Every entry a writer has accepted but not yet seen acknowledged, with its sequence
    number, in order: in-flight entries first (they count as unsent), then the buffer."""

    entries: tuple[tuple[int, EntryT], ...]
    next_seq: int


class AsyncSinkWriter(SinkContract[InputT, EntryT]):
    """Buffers, batches and delivers entries to a destination; subclass it per destination.

    Subclasses implement ``convert``, ``entry_size`` and ``submit_request_entries``, may
    override the hooks of ``SinkContract`` and declare what they do in class attributes
    (``reconciliation = Reconcile.BY_CALL`` with ``reconcile``...; see ``SinkContract``).
    One that takes its own constructor arguments passes ``**kwargs`` on to this one.

    Args:
        options: buffering hints, limits and retry policy (``SinkOptions()`` if omitted).
        call_log: durable call records for this writer's scope (a ``CallLog``, or any
            ``CallRecorder``); without one, nothing is remembered across attempts
            (idempotency keys are then unique per writer).
        retry_policy: how failures are classified, backed off and given up on (a
            ``RetryPolicy``); ``BackoffRetry`` from ``options`` and the sink's
            ``classify_error`` if omitted.
        congestion: how much may be in flight (a ``CongestionStrategy``); ``Congestion``
            from ``options`` if omitted.
        ordering: which entries may leave now (an ``Ordering``); ``KeyOrder`` by the
            ``orderingKey`` option's fields if set, else none.
        exhausted: entries answered until out of retries (an ``ExhaustedEntries``);
            from ``onRetriesExhausted`` if omitted.
        rate_cap: its share of the job's rate caps (a ``RateCap``); from the options if
            omitted.
    """

    def __init__(
        self,
        *,
        options: SinkOptions | None = None,
        call_log: CallRecorder | None = None,
        retry_policy: RetryPolicy | None = None,
        congestion: CongestionStrategy | None = None,
        ordering: Ordering | None = None,
        exhausted: ExhaustedEntries | None = None,
        rate_cap: RateCap | None = None,
    ) -> None:
        self.options = options = options or SinkOptions()
        self._log: CallRecorder = call_log if call_log is not None else NoRecords()
        self._state = _State.NEW
        self._buffer: RequestBuffer[EntryT] = RequestBuffer()
        self._calls: dict[int, Call[EntryT]] = {}
        self._ahead: Ahead[EntryT] = Ahead(self._log.ahead)
        self._in_flight_entries = 0
        self._congestion: CongestionStrategy = congestion or Congestion(options)
        self._retry: RetryPolicy = retry_policy or BackoffRetry(
            options, self.classify_error, self.describe_destination
        )
        ordering = self._ordering = ordering or ordering_for(options.ordering_key)
        self._dead_letters = DeadLetters(
            options.dead_letter,
            self.serialize_entry,
            ordering.dead_lettered,
            limit=options.max_dead_letters,
            max_bytes=options.max_dead_letter_bytes,
        )
        self._gate: Gate[EntryT] = Gate(self._buffer, ordering, self._dead_letters)
        self._intake: Intake[InputT, EntryT] = Intake(
            self, options.max_record_size_in_bytes, self._dead_letters, self._log, self._fail
        )
        by_entries = Reconcile.BY_ENTRIES in self.reconciliation
        self._recovery: Recovery[EntryT] = Recovery(
            self._log, self.reconcile_entries if by_entries else None
        )
        self._tasks = Tasks(self._fail, lambda: self._state is _State.OPEN)
        self._progress = Progress()
        self._timer = Timer(self._next_deadline, self._pump)
        self._tally = Tally()
        self._outcomes: Outcomes[EntryT] = Outcomes(
            self._log,
            self._tally,
            self._congestion,
            self._retry,
            self._dead_letters,
            self.may_have_landed,
            options.max_batch_size_in_bytes,
            exhausted or exhausted_policy(options, self._dead_letters),
        )
        self._rate_cap = rate_cap if rate_cap is not None else rate_cap_for(options)
        self._timeout = options.request_timeout_ms / 1000
        self._max_time_in_buffer = options.max_time_in_buffer_ms / 1000
        self._max_buffered = options.max_buffered_requests
        self._max_bytes = options.max_batch_size_in_bytes
        self._written = 0
        self._clock = time.monotonic()
        self._log_sync_scheduled = False
        self._scope = self._retry.scope = self._dead_letters.scope = self._log.scope_name
        self._dead_letters.persistent = self._log.persistent
        self._next_seq = 0
        self._flushing = 0
        self._fatal: BaseException | None = None
        self._skip_all = False
        self._metrics: WriterMetrics = NoMetrics()  # until opened with an SDK configured

    def recorded_results(self) -> list[Any]:
        """The result details (``SubmitResult.detail``) of the acknowledged calls of this
        writer's durable scope, of earlier attempts and this one, in call order."""
        return self._log.recorded_results()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._state is not _State.NEW:
            raise WriterStateError(f"writer is {self._state.value}; it can be opened once")
        cls = type(self)
        self._congestion.resume((cls.__module__, cls.__qualname__, self.describe_destination()))
        self._tasks.open()
        self._state = _State.OPEN
        try:
            await self._log.open(self.serialize_entry, self.reconcile)
            self._scope = self._retry.scope = self._dead_letters.scope = self._log.scope_name
            self._skip_all = self._log.completed
            self._metrics = writer_metrics(self.metric_attributes(), self._metric_reading)
            self._take_from_log()
            self._tasks.spawn(self._timer.run)
        except BaseException:
            await self._shutdown(save=False)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            try:
                await self._flush(final=True)
            except BaseException:
                await self._shutdown(save=True)
                raise
        await self._shutdown(save=exc is not None)

    async def _shutdown(self, *, save: bool) -> None:
        """Close: with ``save`` (leaving after an error), first persist the terminal
        records already known, so the retry skips those entries (best effort, bounded in
        time); then cancel and await every task."""
        cancelled = None
        if save:
            cancelled = await finish(self._save_outcomes(on_abort=True), seconds=5)
        self._state = _State.CLOSED
        self._progress.signal()
        cancelled = await self._tasks.close() or cancelled
        self._metrics.close()
        if self._tally.counts["delivered"]:
            mark_reached(self.describe_destination())
        self._congestion.close()
        if cancelled is not None:
            raise cancelled  # once the writer is closed

    # ------------------------------------------------------------------ writing

    async def write(self, element: InputT) -> None:
        """Accept one element; wait while the buffer is full (backpressure).

        Raises:
            BadRecordError: the element cannot be converted or is too large, and no
                dead-letter target is set. The element is not accepted.
            FatalError, FencedError: an earlier request failed fatally; the writer is done.
            WriterStateError: the writer is not open.
        """
        if self._state is not _State.OPEN or self._fatal is not None:
            self._check_usable()
        if self._buffer.count >= self._max_buffered:
            await self._make_room()
        if self._accept(element):
            if self._log.needs_sync:
                await self._log.sync()  # a trimmed log is persisted at once
            await asyncio.sleep(0)  # let the requests just started go out

    async def write_all(self, elements: Iterable[InputT] | AsyncIterable[InputT]) -> None:
        """``write`` each element in turn, the same as a loop of ``write`` calls but
        several times faster: elements are converted in runs (``convert_all``) of whole
        batches, as many as fit in 2048 elements (at least one), while the buffer has
        room. A ``Sequence`` is cut into runs by slicing it, so a sequence type of its
        own (an Arrow record batch's rows...) reaches ``convert_all`` as slices of itself.

        Raises:
            BadRecordError: as ``write``; the elements before the bad one are accepted,
                and none after it. From an iterator, the elements already taken from it
                past the bad one are the error's ``unwritten``: write them first to go on.
            FatalError, FencedError, WriterStateError: as ``write``.
        """
        if isinstance(elements, AsyncIterable):
            async for element in elements:
                await self.write(element)
            return
        chunks = Chunks(elements)
        batch = self.options.max_batch_size
        run = batch * max(1, _RUN // batch)
        while True:
            if self._state is not _State.OPEN or self._fatal is not None:
                self._check_usable()
            if await self._make_room(batch):
                continue
            # Runs of whole batches where there is room for them: a batch cut across two
            # runs would be two pieces joined, entry by entry.
            room = self._max_buffered - self._gate.buffered
            chunk = chunks.take(min(room if room < batch else room - room % batch, run))
            if not chunk:
                return
            first = self._next_seq
            try:
                started = self._accept_many(chunk)
            except BadRecordError as exc:
                exc.unwritten = chunks.unwritten(chunk, exc.position - first + 1)
                raise
            if started:
                if self._log.needs_sync:
                    await self._log.sync()  # a trimmed log is persisted at once
                await asyncio.sleep(0)  # let the requests just started go out

    async def _make_room(self, batch: int = 1) -> bool:
        """Wait while the buffer is full, or has room for fewer than ``batch`` entries
        while a whole batch of fresh ones waits in it (a request is about to take them;
        entries backing off for a retry do not count). Returns whether it waited."""
        waited = False
        while True:
            room = self._max_buffered - self._gate.buffered
            if room > 0 and not room < batch <= self._buffer.fresh_count:
                return waited
            waited = True
            self._pump()
            await self._wait_for_progress()

    def _accept(self, element: InputT) -> bool:
        """Take one element in; ``True`` when the caller should yield to the event loop."""
        seq = self._next_seq
        self._next_seq = seq + 1
        if self._skip_all:
            self._written += 1
            self._intake.skip(seq, element)
            return False
        self._ordering.note((seq,), (element,))
        taken = self._intake.one(seq, element)
        self._written += 1  # a bad record is accepted into the dead-letter target
        if taken is None:
            self._gate.ended((seq,))
            return False
        entry, size = taken
        buffer = self._buffer
        if buffer.fresh_count:
            # Only the oldest entry's time sets a deadline; a later entry may carry an
            # earlier clock reading, which can only make it leave sooner.
            now = self._clock
        else:
            now = self._clock = time.monotonic()
            self._timer.wake()
        if self._log.recovering and self._gate.replayed(self._log, seq, entry, size, now):
            self._take_from_log()
            return self._log.needs_sync
        self._gate.append(seq, entry, size, now)
        limit = self._congestion.batch_limit()
        if buffer.fresh_count >= limit or buffer.fresh_bytes >= self._max_bytes:
            return self._pump()
        return False

    def _accept_many(self, elements: Sequence[InputT]) -> bool:
        """``_accept`` each of ``elements``, converting and buffering them together when
        none of them needs a closer look; ``True`` when the caller should yield."""
        run = self._intake.run(elements, self._next_seq)
        if run is None:
            started = False
            for element in elements:
                started = self._accept(element) or started
            return started
        count = len(run.entries)
        self._next_seq += count
        self._written += count
        if self._skip_all:
            self._log.skip_completed(run.entries)
            return False
        self._ordering.note(run.seqs, elements)
        buffer = self._buffer
        if not buffer.fresh_count:
            self._timer.wake()
        self._clock = now = time.monotonic()
        self._gate.add(run, now)
        limit = self._congestion.batch_limit()
        if buffer.fresh_count >= limit or buffer.fresh_bytes >= self._max_bytes:
            return self._pump()
        return False

    async def flush(self) -> None:
        """The barrier: return once every accepted entry is acknowledged.

        Raises:
            DeliveryError: entries ran out of retries (counts and a sample cause).
            BadRecordError: the destination rejected an entry and no dead-letter is set.
            FatalError, FencedError: a request failed fatally.
        """
        await self._flush(final=False)

    async def _flush(self, *, final: bool) -> None:
        self._check_usable()
        if final:
            self._log.finish_input(self._next_seq)
            self._take_from_log()
        self._flushing += 1
        try:
            self._pump()
            while self._gate.buffered or self._calls or self._ahead or self._recovery.looking_up:
                await self._wait_for_progress()
        finally:
            self._flushing -= 1
        failed = self._retry.delivery_error(self._tally.counts["delivered"])
        if failed is not None:
            raise failed from self._retry.last_error
        await self._dead_letters.flush()
        await self._log.sync()

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._state is not _State.OPEN:
            raise WriterStateError(
                f"writer is {self._state.value}: use it inside 'async with' before closing"
            )

    async def _wait_for_progress(self) -> None:
        await self._progress.wait()
        if self._fatal is not None:
            raise self._fatal

    # ------------------------------------------------------------------ dispatching

    def _pump(self) -> bool:
        """Start as many requests as the limits allow and the buffer warrants, those
        recorded ahead first; while none may start, record full batches ahead."""
        if self._state is not _State.OPEN or self._fatal is not None:
            return False
        started = False
        buffer, calls, congestion, ahead = self._buffer, self._calls, self._congestion, self._ahead
        cap = self._rate_cap
        while buffer or ahead:
            limit = congestion.capacity(len(calls), self._in_flight_entries)
            now = self._clock = time.monotonic()
            if limit and cap.wait(now) > 0:  # the rate cap: none starts before cap.until
                limit = 0
            if limit and ahead:
                call = ahead.pop(now)
            else:
                batch, depth = congestion.batch_limit(), congestion.limit
                early = limit == 0 and ahead.wants(buffer, batch, depth, now)
                limit = batch if early else limit
                if limit == 0:
                    break
                oldest = buffer.oldest_fresh()
                send_fresh = oldest is not None and (
                    early
                    or self._flushing > 0
                    or buffer.fresh_count >= limit
                    or buffer.fresh_bytes >= self._max_bytes
                    or self._gate.buffered >= self._max_buffered
                    or oldest + self._max_time_in_buffer <= now
                )
                if not send_fresh and not buffer.has_ready_retry(now):
                    break
                run, pinned = buffer.take(limit, self._max_bytes, now, include_fresh=send_fresh)
                if run is None:
                    break
                try:
                    call = record_call(self._log, run, pinned, now)
                except FatalError as fatal:
                    self._fail(fatal)
                    return started
                if early:
                    ahead.add(call)
                    self._schedule_save()
                    continue
            calls[call.info.call_id] = call
            self._in_flight_entries += len(call.run.entries)
            cap.took(len(call.run.entries), call.run.size, now)
            self._tasks.spawn(self._send, call)
            started = True
        if started:
            self._progress.signal()
        return started

    def _next_deadline(self) -> tuple[float | None, bool]:
        """When the timer should start requests (the oldest fresh entry's time in the
        buffer is up, or a retry's backoff), and whether it waits for a request to end."""
        if self._congestion.capacity(len(self._calls), self._in_flight_entries) == 0:
            return None, True  # a completing request pumps and wakes the timer
        if self._rate_cap.until > time.monotonic() and (self._buffer or self._ahead):
            return self._rate_cap.until, False  # the rate cap lets the next one start then
        oldest = self._buffer.oldest_fresh()
        due = oldest + self._max_time_in_buffer if oldest is not None else None
        retry = self._buffer.next_retry()
        candidates = [t for t in (due, retry) if t is not None]
        return (min(candidates) if candidates else None), False

    # ------------------------------------------------------------------ requests

    async def _send(self, call: Call[EntryT]) -> None:
        try:
            sync = partial(self._log.sync, call.recorded)  # its own record, not those after
            ending = await send(call, self.submit_request_entries, sync, self._timeout)
            if ending.late:  # the sink ignored the timeout; its answer is still the truth
                self._tally.counts["late_responses"] += 1
            self._settle(call, ending.result, ending.error, ending.timed_out)
        except Exception as exc:  # fenced, an answer that is not one, a failing classify_error
            self._fail(exc, call)
        except BaseException as exc:
            if not is_stray(exc):
                raise
            self._fail(exc, call)  # not a failure of the request a sink reports

    def _settle(
        self,
        call: Call[EntryT],
        result: SubmitResult | None,
        error: BaseException | None,
        timed_out: bool,
    ) -> None:
        if call.settled:
            self._tally.counts["late_responses"] += 1
            return
        call.settled = True
        del self._calls[call.info.call_id]
        run = call.run
        self._in_flight_entries -= len(run.entries)
        now = time.monotonic()
        self._tally.request_ended(len(run.entries), now - call.started)
        self._metrics.request_ended(now - call.started, error_type(error, timed_out))
        if timed_out or error is not None:
            looks_up = self._recovery.looks_up and self._state is _State.OPEN
            self._apply(self._outcomes.failed(call, error, now, looks_up=looks_up), call)
        else:
            assert result is not None
            in_flight = len(self._calls) + 1
            self._apply(self._outcomes.answered(call, result, now, in_flight), call)
        # A request started now writes the outcome with its own record, unless its record
        # was written ahead; without one, a task of its own writes it.
        if not self._pump() or self._ahead.enabled:
            self._schedule_save()
        self._timer.wake_if_blocked()
        self._metrics.update()
        self._progress.signal()

    def _schedule_save(self) -> None:
        """Write what was recorded (outcomes, calls recorded ahead) in a task of its own,
        together with whatever is recorded meanwhile."""
        if self._log.persistent and not self._log_sync_scheduled and self._state is _State.OPEN:
            self._log_sync_scheduled = True
            self._tasks.spawn(self._save_outcomes)

    async def _save_outcomes(self, *, on_abort: bool = False) -> None:
        """Persist the terminal records of calls that just settled, together (one store
        write for all that settle meanwhile), so a retried task skips their entries; on
        the way out after an error, those already known."""
        if not on_abort:
            await asyncio.sleep(0)
            self._log_sync_scheduled = False
        try:
            await self._log.sync()
        except Exception as exc:
            if not on_abort:
                self._fail(exc)
                return
            log.warning("%s: could not save call records on abort: %s", self._scope, exc)

    def _apply(
        self,
        outcome: Outcome[EntryT] | None,
        call: Call[EntryT] | None,
        run: Run[EntryT] | None = None,
    ) -> None:
        """Do what a settled request's (or a looked up call's, of ``run``) ``outcome``
        says."""
        if call is not None:
            run = call.run
        if run is not None and not (outcome is not None and (outcome.look_up or outcome.fatal)):
            self._gate.settled(run, outcome.again if outcome is not None else None)
        if outcome is None:
            return
        if outcome.fatal is not None:
            self._fail(outcome.fatal, call)
        elif outcome.look_up:
            assert call is not None
            self._recovery.hold(call.info, call.run)
            args = (call, self._recovery.settle_own, outcome.cause)
            self._tasks.spawn(self._look_up, call, None, self._outcomes.looked_up, *args)
        elif outcome.again is not None:
            if outcome.fresh:
                self._buffer.extend(outcome.again, outcome.not_before)
            else:
                self._buffer.requeue(outcome.again, outcome.not_before, outcome.pinned)
            self._timer.wake()  # the retry may be due before the timer's deadline

    def _fail(self, error: BaseException, call: Call[EntryT] | None = None) -> None:
        """End the writer with ``error``: every later call raises it. An ``Exception``
        that is not asyncsink's own is wrapped in ``FatalError`` naming the request; a
        ``BaseException`` (an end of the program, not a failure) is raised as it is."""
        if self._fatal is None:
            plain = not isinstance(error, Exception | asyncio.CancelledError)
            if isinstance(error, AsyncSinkError) or plain:
                self._fatal = error
            else:
                where = f"request {call.info.call_id}" if call else "a request"
                fatal = FatalError(f"{where} failed: {describe(error)}")
                fatal.__cause__ = error
                self._fatal = fatal
            log.error("%s: writer failed: %s", self._scope, self._fatal)
        self._progress.signal()

    # ------------------------------------------------------------------ recovery

    def _take_from_log(self) -> None:
        """Buffer what the recovery source released, and look up what it asks to."""
        outcomes, look_ups = self._recovery.take()
        for seq, entry, reason in self._log.take_rejected():  # only a taken attempt's stay
            self._dead_letters.recorded(seq, entry, reason)
            self._gate.ended((seq,))
        for outcome in outcomes:
            self._apply(outcome, None)
        for info, run in look_ups:
            self._tasks.spawn(self._look_up, None, run, self._recovery.settle_earlier, info, run)

    async def _look_up(
        self,
        call: Call[EntryT] | None,
        run: Run[EntryT] | None,
        look_up: Callable[..., Awaitable[Outcome[EntryT] | None]],
        *args: Any,
    ) -> None:
        """Look a call without an answer up at the destination (an earlier attempt's, of
        ``run``, or ``call`` of this one) with ``look_up(*args)``, and do what it says."""
        try:
            self._apply(await look_up(*args), call, run)
            await self._log.sync()
        except Exception as exc:
            self._fail(exc, call)
        finally:  # a lookup cancelled with the writer leaves its call in flight, unsettled
            self._pump()
            self._timer.wake()
            self._progress.signal()

    # ------------------------------------------------------------------ state

    def snapshot(self) -> WriterSnapshot[EntryT]:
        """The live state: every accepted, unacknowledged entry, read from the writer
        itself at this moment (in-flight requests count as unsent)."""
        entries: list[tuple[int, EntryT]] = []
        looking_up = self._recovery.looking_up.values()
        calls = (*self._calls.values(), *self._ahead)
        for run in (*(call.run for call in calls), *looking_up):
            entries.extend(zip(run.seqs, run.entries, strict=True))
        entries.extend(self._ordering)
        entries.extend(self._buffer)
        return WriterSnapshot(tuple(entries), self._next_seq)

    def restore(self, snapshot: WriterSnapshot[EntryT]) -> None:
        """Load a snapshot into this writer before anything is written to it; the entries
        are sent like freshly written ones.

        Raises:
            WriterStateError: entries were already written to this writer.
        """
        if self._next_seq or self._buffer or self._calls or self._state is _State.CLOSED:
            raise WriterStateError("restore() needs a writer nothing was written to yet")
        now = time.monotonic()
        for seq, entry in snapshot.entries:
            self._buffer.append(seq, entry, self.entry_size(entry), now)
        self._written += len(snapshot.entries)
        self._next_seq = snapshot.next_seq
        self._timer.wake()
        self._pump()

    def statistics(self) -> WriterStatistics:
        """A frozen snapshot of what this writer did so far."""
        looking_up = self._recovery.looking_up.values()
        return self._tally.snapshot(
            written=self._written,
            dead_lettered=self._dead_letters.count,
            diverted=self._dead_letters.diverted,
            dead_letter_causes=DeadLetterCauses.of(self._dead_letters.by_cause),
            rate_cap_waited_ms=self._rate_cap.waited_ms,
            **self._log.statistics(),
            failed=self._retry.exhausted,
            buffered=self._gate.buffered + self._ahead.entries(),  # recorded ahead: not sent
            in_flight=self._in_flight_entries + sum(map(len, looking_up)),
            window=self._congestion.window,
            in_flight_limit=self._congestion.limit,
        )

    def metric_attributes(self) -> dict[str, str]:
        """The attributes of this writer's metrics: its sink's name (``sink_name``, else
        the class name), its ``sinkId`` (with durable records) and ``destination_name``.
        Read once the writer is open."""
        sink_id = getattr(getattr(self._log, "scope", None), "sink_id", None)
        name = self.sink_name or type(self).__name__
        return sink_attributes(name, self.destination_name(), sink_id)

    def _metric_reading(self) -> Reading:
        counts = {
            **self._tally.counts,
            **self._log.statistics(),
            "dead_lettered": self._dead_letters.count,
            "diverted": self._dead_letters.diverted,
            **{CAUSE_COUNT + cause: n for cause, n in self._dead_letters.by_cause.items()},
            "rate_cap_waited_ms": self._rate_cap.waited_ms,
            "written": self._written,
            "failed": self._retry.exhausted,
        }
        return counts, self._congestion.limit, len(self._calls), len(self._buffer)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._state.value} scope={self._scope} "
            f"buffered={len(self._buffer)} in_flight={len(self._calls)}>"
        )
