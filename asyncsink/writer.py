"""``AsyncSinkWriter``: the generic async writer every destination subclasses.

A subclass says how to turn an input element into a request entry (``convert``), how big
an entry is (``entry_size``) and how to send a batch (``submit_request_entries``).
The writer does the rest: it buffers entries, cuts batches by count, bytes and time,
keeps as many requests in flight as the destination serves without queueing (learned
from their latency, at most ``max_in_flight_requests``, starting from what the last
writer of the same destination in this process learned; see ``asyncsink.concurrency``)
and an AIMD window of entries, re-sends failed entries with backoff and only those,
and ``flush()`` is the barrier: it returns once every accepted entry is acknowledged,
or raises.

Lifecycle: a writer is used inside ``async with``; entering opens it (and its durable
call log, if one was given), leaving flushes and closes it. Leaving on an exception
cancels what is in flight instead, and the call log keeps the calls for a retry. A
writer runs on an asyncio event loop (``asyncio.run``, or ``anyio.run``'s default).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
import time
from collections.abc import AsyncIterable, Collection, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, cast

import anyio
import anyio.abc
import anyio.lowlevel
import orjson

from .buffer import RequestBuffer, Run
from .concurrency import ConcurrencyLimiter, Learned, recall, remember
from .connections import (
    ConnectionFailure,
    connection_failure,
    ever_reached,
    mark_reached,
    never_opened,
)
from .dead_letter import DeadLetter, dead_letter_target, element_bytes
from .errors import (
    AsyncSinkError,
    BadRecordError,
    DeadLetterError,
    DeliveryError,
    DestinationError,
    FatalError,
    FencedError,
    RetryableError,
    ThrottledError,
    WriterStateError,
    describe,
)
from .options import SinkOptions
from .packed import PackedEntries
from .rate_limit import AIMDWindow
from .recording import CallRecorder, NoRecords
from .request import CallInfo, SubmitResult, _current, as_result, integer
from .retry import ErrorKind, RetryPolicy, default_classification
from .stats import LatencyHistogram, RequestSizes, WriterStatistics, new_latency_counts
from .telemetry import NoMetrics, WriterMetrics, sink_attributes, writer_metrics
from .telemetry.live import Reading

__all__ = ["AsyncSinkWriter", "WriterSnapshot"]

log = logging.getLogger("asyncsink")

_RUN = 2048  # elements ``write_all`` converts at once: whole batches, as many as fit
_POSITIONS_SHOWN = 10  # input positions of entries out of retries that a DeliveryError names

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


class _Call(Generic[EntryT]):
    __slots__ = ("info", "run", "sent", "settled", "started")

    def __init__(self, info: CallInfo, run: Run[EntryT], started: float) -> None:
        self.info = info
        self.run = run
        self.started = started
        self.sent = started  # when the request left
        self.settled = False


class AsyncSinkWriter(abc.ABC, Generic[InputT, EntryT]):
    """Buffers, batches and delivers entries to a destination; subclass it per destination.

    Subclasses implement ``convert``, ``entry_size`` and ``submit_request_entries``, and
    may override ``classify_error``, ``serialize_entry`` and ``reconcile``. A subclass that
    takes its own constructor arguments passes ``**kwargs`` on to this one. One that
    converts a dict of a row's fields as it converts the Spark ``Row`` sets
    ``takes_mappings``: rows read through Arrow then reach it as dicts, which is faster.

    Args:
        options: buffering hints, limits and retry policy (``SinkOptions()`` if omitted).
        call_log: durable call records for this writer's scope (a ``CallLog``, or any
            ``CallRecorder``); without one, nothing is remembered across attempts
            (idempotency keys are then unique per writer).
    """

    takes_mappings: bool = False
    sink_name: str = ""  # the sink's name in metrics; the class name when empty

    def __init__(
        self, *, options: SinkOptions | None = None, call_log: CallRecorder | None = None
    ) -> None:
        self.options = options = options or SinkOptions()
        self._log: CallRecorder = call_log if call_log is not None else NoRecords()
        self._state = _State.NEW
        self._buffer: RequestBuffer[EntryT] = RequestBuffer()
        self._calls: dict[int, _Call[EntryT]] = {}
        self._in_flight_entries = 0
        self._window = AIMDWindow(
            ceiling=options.max_batch_size * options.max_in_flight_requests,
            increase=max(1, options.max_batch_size // 10),
            enabled=options.rate_limiting,
        )
        self._limiter = self._new_limiter()
        self._learning_key: tuple[Any, ...] | None = None  # set when opened
        self._retry = RetryPolicy(options.initial_backoff_ms, options.max_backoff_ms)
        self._timeout = options.request_timeout_ms / 1000
        self._max_time_in_buffer = options.max_time_in_buffer_ms / 1000
        self._dead_letter = dead_letter_target(options.dead_letter)
        self._max_buffered = options.max_buffered_requests
        self._max_record = options.max_record_size_in_bytes
        self._max_bytes = options.max_batch_size_in_bytes
        self._max_batch = options.max_batch_size  # lowered while the AIMD window is smaller
        self._written = 0
        self._clock = time.monotonic()
        self._log_sync_scheduled = False
        self._scope = self._log.scope_name
        self._next_seq = 0
        self._entry_position = 0  # of the element being converted
        self._flushing = 0
        self._fatal: BaseException | None = None
        self._exhausted = 0  # entries out of retries
        self._exhausted_at: list[int] = []  # the first of their positions
        self._attempts: dict[int, int] = {}  # seq -> failed attempts, while it has any
        self._last_error: BaseException | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # the tasks of ``_spawn``
        self._timer_scope: anyio.CancelScope | None = None
        self._progress = asyncio.Event()
        self._waiting = 0  # tasks waiting for ``_progress``
        self._wake = asyncio.Event()
        self._timer_blocked = False  # the timer waits for a request to end
        self._skip_all = False
        # Calls without an answer being looked up by content: their entries are in flight
        self._looking_up: dict[int, Run[EntryT]] = {}
        self._reads_entries = type(self).reconcile_entries is not AsyncSinkWriter.reconcile_entries
        self._counts = dict.fromkeys(
            (
                "delivered",
                "dead_lettered",
                "retried",
                "bytes_sent",
                "requests",
                "requests_failed",
                "throttled",
                "timeouts",
                "late_responses",
            ),
            0,
        )
        self._latency = new_latency_counts()
        self._request_entries: dict[int, int] = {}  # requests by the entries they carried
        self._connection_failed_once = False
        self._metrics: WriterMetrics = NoMetrics()  # until opened with an SDK configured

    # ------------------------------------------------------------------ the contract

    @property
    def entry_position(self) -> int:
        """Inside ``convert``: the position of the element being converted in this
        writer's input, counted from 0 (its entry sequence number in the scope, the same
        whenever a retried task replays the input, however the element is converted);
        inside ``convert_all``: the position of the run's first element."""
        return self._entry_position

    @abc.abstractmethod
    def convert(self, element: InputT) -> EntryT:
        """Turn an input element (a Spark ``Row``, a dict...) into a request entry.

        An exception makes the element a bad record (position and reason reported).
        """

    def convert_all(self, elements: Sequence[InputT]) -> Sequence[EntryT]:
        """Convert a run of elements, one entry per element, in order.

        The writer converts what ``write_all`` is given in runs: lists, or slices of the
        ``Sequence`` it was given. The default calls ``convert`` on each element, at its
        own ``entry_position``; an override that calls ``convert`` itself should call
        ``super().convert_all`` instead when ``convert`` reads ``entry_position`` (in an
        override, it stays the run's first element's: element ``i`` is at
        ``entry_position + i``).
        Override it when a run converts faster at once, giving each element the very
        entry ``convert`` gives it: a retried task and a replay convert one element at
        a time, and recognise delivered entries by their bytes. If it raises, the writer
        converts that run again one element at a time, with ``convert``, to report the
        bad record at its position.

        Return a list, or, for entries that are bytes, ``PackedEntries``: the writer
        keeps those packed, and a request cut from one run reaches
        ``submit_request_entries`` as a slice of it (any other sequence is copied into
        a list).
        """
        convert, first = self.convert, self._entry_position
        entries = []
        for offset, element in enumerate(elements):
            self._entry_position = first + offset
            entries.append(convert(element))
        return entries

    @abc.abstractmethod
    def entry_size(self, entry: EntryT) -> int:
        """The entry's size in bytes, as the destination counts it for its limits."""

    def entry_sizes(self, entries: list[EntryT]) -> list[int]:
        """``entry_size`` of each of a run of entries; override it when a run is sized
        faster at once (``list(map(len, entries))`` for entries that are bytes)."""
        return list(map(self.entry_size, entries))

    @abc.abstractmethod
    async def submit_request_entries(
        self, entries: list[EntryT]
    ) -> Sequence[EntryT] | SubmitResult | None:
        """Send one request carrying ``entries``; return the entries to retry.

        ``entries`` is a list, unless ``convert_all`` returned ``PackedEntries``: then it
        may be a slice of those.

        Return ``None`` (or an empty list) when all were accepted, the failed entries (the
        same objects, in request order) for a partial failure, or a ``SubmitResult``.
        Raise to fail the whole request: ``RetryableError``/``ThrottledError`` to have it
        re-sent as the same call, ``FatalError`` to fail the writer. ``current_call()``
        gives the request's idempotency key and entry sequence numbers.
        """

    def describe_destination(self) -> str:
        """Where this writer's requests go, for logs and messages: never a secret (show a
        URL with ``asyncsink.masking.mask_url``). Defaults to the writer's class name."""
        return type(self).__name__

    def destination_name(self) -> str:
        """Where this writer's requests go, short and stable, for metric attributes: a
        host and path, a stream, an index; never a credential. Defaults to
        ``describe_destination`` (the attribute drops what ``mask_url`` would mask)."""
        return self.describe_destination()

    def classify_error(self, exc: BaseException) -> ErrorKind:
        """Sort a whole-request failure into retryable, throttled or fatal."""
        return default_classification(exc)

    def serialize_entry(self, entry: EntryT) -> bytes:
        """The entry's bytes, for content digests in the call log and dead letters.

        Entries that are already bytes-like are digested as they are.
        """
        if isinstance(entry, bytes):
            return entry
        if isinstance(entry, str):
            return entry.encode()
        try:
            return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return repr(entry).encode()

    async def reconcile(self, call: CallInfo) -> Collection[int] | None:
        """For a call left PENDING by an earlier attempt: the sequence numbers among
        ``call.seqs`` that the destination holds, or ``None`` if it cannot tell (the call
        is then re-sent as it was, with the same idempotency key). Raising marks the call
        FAILED and its entries are sent again in new calls."""
        return None

    async def reconcile_entries(
        self, call: CallInfo, entries: list[EntryT]
    ) -> Collection[int] | None:
        """For a call left PENDING by an earlier attempt, once this attempt was given its
        ``entries`` again (in ``call.seqs`` order), or for a call of this attempt that got
        no answer (see ``may_have_landed``): the sequence numbers the destination holds,
        or ``None`` if it cannot tell (the call is re-sent as it was). For destinations
        that can only be searched by content (a Kinesis stream); the entries not held are
        sent in a new call. ``call.pending_since`` says when the call was recorded,
        ``call.sent_again_at`` when it last left again; ``recorded_results()`` gives the
        result details of the scope's acknowledged calls. An exception counts as
        ``None``. Only a writer with durable call records is asked.

        The default does not look: ``None``.
        """
        return None

    def may_have_landed(self, error: BaseException | None) -> bool:
        """Whether a request that failed with ``error`` (``None``: it timed out) may have
        reached the destination all the same: it left and no answer came (a timeout, a
        connection lost after sending), or the answer was a failure that can come after
        the work was done (a ``RetryableError`` with a ``status``: a 5xx from the
        destination, or from a gateway that gave up waiting for it). A writer that looks
        calls up by content (``reconcile_entries``) looks such a call up before sending it
        again. Not: a throttle, a refusal (a ``FatalError`` answer), or a connection that
        never opened (refused, a name that does not resolve)."""
        if error is None:
            return True
        if isinstance(error, ThrottledError):
            return False
        if isinstance(error, DestinationError) and error.status is not None:
            return isinstance(error, RetryableError)
        return not never_opened(error)

    def recorded_results(self) -> list[Any]:
        """The result details (``SubmitResult.detail``) of the acknowledged calls of this
        writer's durable scope, of earlier attempts and this one, in call order."""
        return self._log.recorded_results()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._state is not _State.NEW:
            raise WriterStateError(f"writer is {self._state.value}; it can be opened once")
        self._loop = asyncio.get_running_loop()
        self._resume_learning()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._state = _State.OPEN
        try:
            await self._log.open(self.serialize_entry, self.reconcile)
            self._scope = self._log.scope_name
            self._skip_all = self._log.completed
            self._metrics = writer_metrics(self.metric_attributes(), self._metric_reading)
            self._take_from_log()
            tg.start_soon(self._timer_loop)
        except BaseException as exc:
            await self._shutdown(exc)
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
            except BaseException as error:
                await self._save_what_is_known()
                await self._shutdown(error)
                raise
        else:
            await self._save_what_is_known()
        await self._shutdown(exc)

    async def _save_what_is_known(self) -> None:
        """On the way out after an error, persist the terminal records already known, so
        the retry skips those entries (best effort, bounded in time)."""
        with anyio.move_on_after(5, shield=True):
            try:
                await self._log.sync()
            except Exception as error:
                log.warning("%s: could not save call records on abort: %s", self._scope, error)

    async def _shutdown(self, exc: BaseException | None) -> None:
        self._state = _State.CLOSED
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        for task in self._tasks:
            task.cancel()
        self._signal()
        await tg.__aexit__(None, None, None)  # children never raise; ``exc`` propagates
        if self._tasks:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(self._tasks)
        self._metrics.close()
        if self._counts["delivered"]:
            mark_reached(self.describe_destination())
        if self._learning_key is not None:
            remember(self._learning_key, self._limiter.learned())

    def _resume_learning(self) -> None:
        """Start the concurrency limit from what the last writer of this destination (the
        same sink class, ``describe_destination`` and maximum) learned in this process."""
        options = self.options
        if not options.adaptive_concurrency:
            return
        key = (
            type(self).__module__,
            type(self).__qualname__,
            self.describe_destination(),
            options.max_in_flight_requests,
        )
        self._learning_key = key
        learned = recall(key)
        if learned is not None:
            self._limiter = self._new_limiter(learned)

    def _new_limiter(self, start: Learned | None = None) -> ConcurrencyLimiter:
        options = self.options
        return ConcurrencyLimiter(
            maximum=options.max_in_flight_requests,
            adaptive=options.adaptive_concurrency,
            start=start,
        )

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
            await self._after_accept()

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
        sliced = elements if isinstance(elements, Sequence) else None
        iterator = iter(elements) if sliced is None else None
        buffer = self._buffer
        batch = self.options.max_batch_size
        run = batch * max(1, _RUN // batch)
        done = 0
        while True:
            if self._state is not _State.OPEN or self._fatal is not None:
                self._check_usable()
            if self._needs_room(batch):
                await self._make_room(batch)
                continue
            # Runs of whole batches where there is room for them: a batch cut across two
            # runs would be two pieces joined, entry by entry.
            room = self._max_buffered - buffer.count
            count = min(room if room < batch else room - room % batch, run)
            if sliced is not None:
                chunk: Sequence[InputT] = sliced[done : done + count]
                done += count
            else:
                assert iterator is not None
                chunk = list(islice(iterator, count))
            if not chunk:
                return
            first = self._next_seq
            try:
                started = self._accept_many(chunk)
            except BadRecordError as exc:
                if iterator is not None:
                    exc.unwritten = tuple(chunk[exc.position - first + 1 :])
                raise
            if started:
                await self._after_accept()

    def _needs_room(self, batch: int) -> bool:
        """Whether to wait before buffering more: the buffer is full, or has room for
        fewer than ``batch`` entries while a whole batch of fresh ones waits in it (a
        request is about to take them; entries backing off for a retry do not count)."""
        room = self._max_buffered - self._buffer.count
        return room <= 0 or room < batch <= self._buffer.fresh_count

    async def _make_room(self, batch: int = 1) -> None:
        while self._needs_room(batch):
            self._pump()
            await self._wait_for_progress()

    async def _after_accept(self) -> None:
        if self._log.needs_sync:
            await self._log.sync()  # a trimmed log is persisted at once
        await anyio.lowlevel.checkpoint()  # let the requests just started go out

    def _accept(self, element: InputT) -> bool:
        """Take one element in; ``True`` when the caller should yield to the event loop."""
        seq = self._next_seq
        self._next_seq = seq + 1
        if self._skip_all:
            self._skip_completed(seq, element)
            return False
        self._entry_position = seq
        try:
            entry = self.convert(element)
        except Exception as exc:
            reason = f"conversion failed: {type(exc).__name__}: {exc}"
            self._bad_record(seq, reason, element=element)
            self._written += 1  # accepted into the dead-letter target
            return False
        try:
            size = self.entry_size(entry)
        except Exception as exc:
            self._bad_record(seq, f"entry_size failed: {describe(exc)}", entry=entry)
            self._written += 1  # accepted into the dead-letter target
            return False
        if type(size) is not int or size < 0:
            size = self._checked_size(size, seq)
        if size > self._max_record:
            self._bad_record(
                seq,
                f"entry of {size} bytes exceeds maxRecordSizeInBytes ({self._max_record})",
                entry=entry,
            )
            self._written += 1  # accepted into the dead-letter target
            return False
        self._written += 1
        buffer = self._buffer
        if buffer.fresh_count:
            # Only the oldest entry's time sets a deadline; a later entry may carry an
            # earlier clock reading, which can only make it leave sooner.
            now = self._clock
        else:
            now = self._clock = time.monotonic()
            self._wake.set()
        if self._log.recovering:
            if self._log.admit(seq, entry, size, now):
                self._take_from_log()
                return self._log.needs_sync
        buffer.append(seq, entry, size, now)
        return self._pump_if_batch_ready()

    def _accept_many(self, elements: Sequence[InputT]) -> bool:
        """``_accept`` each of ``elements``, converting and buffering them together when
        none of them needs a closer look; ``True`` when the caller should yield."""
        run = self._convert_run(elements)
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
        buffer = self._buffer
        if not buffer.fresh_count:
            self._wake.set()
        self._clock = now = time.monotonic()
        buffer.extend(run, now)
        return self._pump_if_batch_ready()

    def _checked_size(self, size: object, seq: int) -> int:
        """An ``entry_size`` result as an ``int`` (from a numpy integer...).

        Raises:
            FatalError: it is no size in bytes (an ``int`` >= 0): the sink is wrong, so
                the writer fails.
        """
        value = integer(size)
        if value is not None and value >= 0:
            return value
        fatal = FatalError(
            f"entry_size returned {size!r:.50} ({type(size).__name__}) for entry {seq}: "
            "an entry's size in bytes is an int >= 0"
        )
        self._fail(fatal)
        raise fatal

    def _skip_completed(self, seq: int, element: InputT) -> None:
        """An element of a scope completed by an earlier run: not sent, only digested (a
        bad record was dealt with by that run, and is not digested)."""
        self._written += 1
        self._entry_position = seq
        try:
            entry = self.convert(element)
            fits = 0 <= self.entry_size(entry) <= self._max_record
        except Exception:
            self._log.skip_completed((), 1)
            return
        self._log.skip_completed((entry,) if fits else (), 1)

    def _convert_run(self, elements: Sequence[InputT]) -> Run[EntryT] | None:
        """The run of ``elements`` converted at once, numbered from ``_next_seq``; or
        ``None`` when they must be taken one at a time (the call log replays them, or one
        is a bad record)."""
        if self._log.recovering:
            return None
        self._entry_position = self._next_seq
        try:
            entries = self.convert_all(elements)
        except Exception:
            return None
        if len(entries) != len(elements):
            raise TypeError(
                f"convert_all returned {len(entries)} entries for {len(elements)} "
                "elements (it must return one entry per element, in order)"
            )
        if type(entries) is not list and type(entries) is not PackedEntries:
            entries = list(entries)
        try:
            sizes = self.entry_sizes(entries)
            size = sum(sizes)
        except Exception:
            return None  # one at a time: the entry whose size fails is a bad record
        if type(size) is not int:  # numpy integers, or no sizes at all
            ints = _as_ints(sizes)
            if ints is None:
                return None  # one at a time: the entry whose size is none says so
            sizes, size = ints, sum(ints)
        if len(sizes) != len(entries) or (sizes and min(sizes) < 0):
            return None
        if size > self._max_record and max(sizes) > self._max_record:
            return None
        seq = self._next_seq
        return Run(range(seq, seq + len(entries)), entries, sizes, size)

    def _pump_if_batch_ready(self) -> bool:
        """Start requests when the fresh entries fill a batch; ``True`` if any started."""
        buffer = self._buffer
        if buffer.fresh_count >= self._max_batch or buffer.fresh_bytes >= self._max_bytes:
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
            while self._buffer or self._calls or self._looking_up:
                await self._wait_for_progress()
        finally:
            self._flushing -= 1
        if self._exhausted:
            raise DeliveryError(
                self._exhausted, self._counts["delivered"], self._last_error, self._exhausted_at
            ) from self._last_error
        await self._log.sync()

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._state is not _State.OPEN:
            raise WriterStateError(
                f"writer is {self._state.value}: use it inside 'async with' before closing"
            )

    async def _wait_for_progress(self) -> None:
        self._waiting += 1
        try:
            await self._progress.wait()
        finally:
            self._waiting -= 1
        if self._fatal is not None:
            raise self._fatal

    def _signal(self) -> None:
        if self._waiting:
            self._progress.set()
            self._progress = asyncio.Event()

    def _wake_timer(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ bad records

    def _bad_record(self, seq: int, reason: str, *, entry: Any = None, element: Any = None) -> None:
        """Fail with the record's position, or hand it to the dead-letter target.

        ``entry`` is a converted entry; ``element`` an input the converter refused.
        """
        if self._dead_letter is None:
            raise BadRecordError(seq, reason, self._scope if self._log.persistent else None)
        if element is not None:
            record = element_bytes(element)
        else:
            try:
                record = self.serialize_entry(entry)
            except Exception:
                record = repr(entry).encode()
        try:
            self._dead_letter(DeadLetter(seq, reason, record, self._scope))
        except Exception as exc:
            raise DeadLetterError(
                f"{self._scope}: writing bad record {seq} to the dead-letter target "
                f"{self._dead_letter!r} failed: {type(exc).__name__}: {exc}; the record "
                "is not settled, so the task fails and its retry handles it again"
            ) from exc
        self._counts["dead_lettered"] += 1

    # ------------------------------------------------------------------ dispatching

    def _capacity(self) -> int:
        """How many entries the next request may carry now (0: no request may start)."""
        if len(self._calls) >= self._limiter.limit:
            return 0
        room = self._window.size - self._in_flight_entries
        return min(self.options.max_batch_size, room) if room > 0 else 0

    def _pump(self) -> bool:
        """Start as many requests as the limits allow and the buffer warrants."""
        if self._state is not _State.OPEN or self._fatal is not None or self._tg is None:
            return False
        started = False
        buffer = self._buffer
        while buffer:
            limit = self._capacity()
            if limit == 0:
                break
            now = self._clock = time.monotonic()
            oldest = buffer.oldest_fresh()
            send_fresh = oldest is not None and (
                self._flushing > 0
                or buffer.fresh_count >= limit
                or buffer.fresh_bytes >= self.options.max_batch_size_in_bytes
                or buffer.count >= self.options.max_buffered_requests
                or oldest + self._max_time_in_buffer <= now
            )
            if not send_fresh and not buffer.has_ready_retry(now):
                break
            run, pinned = buffer.take(
                limit, self.options.max_batch_size_in_bytes, now, include_fresh=send_fresh
            )
            if run is None:
                break
            if pinned is not None:
                info = self._log.sending_again(pinned)  # durable with the sync before it leaves
            else:
                try:
                    info = self._log.new_call(run.seqs, run.entries)
                except Exception as exc:  # serialize_entry failed: nothing can be recorded
                    fatal = FatalError(
                        f"recording a request of {len(run)} entries failed: {describe(exc)}"
                    )
                    fatal.__cause__ = exc
                    self._fail(fatal)
                    return started
            call = _Call(info, run, now)
            self._calls[info.call_id] = call
            self._in_flight_entries += len(run.entries)
            self._spawn(self._send(call))
            started = True
        if started:
            self._signal()
        return started

    async def _timer_loop(self) -> None:
        """Start requests when the oldest fresh entry's time in the buffer is up, or a
        retry's backoff: woken when entries arrive in an empty buffer, a retry is queued,
        or a request ends while no request could start."""
        while True:
            self._wake = asyncio.Event()
            self._timer_blocked = self._capacity() == 0
            deadline = self._next_deadline()
            if deadline is None:
                await self._wake.wait()
            else:
                with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                    await self._wake.wait()
            self._pump()

    def _next_deadline(self) -> float | None:
        if self._capacity() == 0:
            return None  # a completing request pumps and wakes us
        oldest = self._buffer.oldest_fresh()
        due = oldest + self._max_time_in_buffer if oldest is not None else None
        retry = self._buffer.next_retry()
        candidates = [t for t in (due, retry) if t is not None]
        return min(candidates) if candidates else None

    # ------------------------------------------------------------------ requests

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (a request, or saving outcomes) in a plain asyncio task: a third of
        the cost of a task group's, which every request would pay. The writer cancels and
        awaits these tasks when it closes."""
        assert self._loop is not None
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_ended)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A task of ``_spawn`` ended. Its work handles what a request can raise; what
        escapes it anyway (``KeyboardInterrupt`` and ``SystemExit``, which asyncio also
        raises from the event loop) fails the writer, so that nothing waits on it. Only
        the writer's close cancels these tasks: one cancelled while the writer is open was
        cancelled by the sink or a library it uses, and its request will never settle."""
        self._tasks.discard(task)
        if task.cancelled():
            if self._state is _State.OPEN:
                self._fail(
                    FatalError(
                        "a request's task was cancelled, not by the writer (by the sink, "
                        "or a library it uses): its request cannot settle"
                    )
                )
            return
        error = task.exception()
        if error is None:
            return
        if self._state is _State.OPEN:
            self._fail(error)
        else:
            log.error("%s: a request ended the closed writer with %r", self._scope, error)

    async def _send(self, call: _Call[EntryT]) -> None:
        token = _current.set(call.info)
        answer: object = _NO_ANSWER
        error: BaseException | None = None
        timed_out = False
        # A list, or a slice of the PackedEntries this writer's convert_all returned
        entries = cast("list[EntryT]", call.run.entries)
        try:
            await self._log.sync()  # PENDING is durable before the request leaves
            call.sent = time.monotonic()
            with anyio.move_on_after(self._timeout) as scope:
                answer = await self.submit_request_entries(entries)
            timed_out = scope.cancelled_caught
        except FencedError as exc:
            self._fail(exc)
            return
        except Exception as exc:
            error = exc  # the request failed: classify_error sorts it
        except BaseException as exc:
            if not _is_stray(exc):
                raise
            self._fail(exc, call)  # not a failure of the request a sink reports
            return
        finally:
            _current.reset(token)
        try:
            result = None
            if answer is not _NO_ANSWER:
                result = as_result(answer, entries)
                if time.monotonic() > call.sent + self._timeout:
                    # The sink ignored the cancellation and answered late: the answer is
                    # still the truth about this call, which nothing else has settled.
                    self._counts["late_responses"] += 1
            self._settle(call, result, error, timed_out)
        except Exception as exc:  # an answer that is not one, a classify_error that fails
            self._fail(exc, call)

    def _settle(
        self,
        call: _Call[EntryT],
        result: SubmitResult | None,
        error: BaseException | None,
        timed_out: bool,
    ) -> None:
        if call.settled:
            self._counts["late_responses"] += 1
            return
        call.settled = True
        del self._calls[call.info.call_id]
        self._in_flight_entries -= len(call.run.entries)
        now = time.monotonic()
        self._counts["requests"] += 1
        self._latency[LatencyHistogram.bucket((now - call.started) * 1000)] += 1
        sizes, size = self._request_entries, len(call.run.entries)
        sizes[size] = sizes.get(size, 0) + 1
        self._metrics.request_ended(now - call.started, _error_type(error, timed_out))
        if timed_out or error is not None:
            self._on_request_failed(call, error, timed_out, now)
        else:
            assert result is not None
            run = call.run
            full = 2 * len(run.entries) >= self._max_batch or 2 * run.size >= self._max_bytes
            self._limiter.on_response(call.sent, now, len(self._calls) + 1, full=full)
            self._on_response(call, result, now)
        # A request started now writes the outcome with its own record, before it leaves;
        # without one, a task of its own writes it.
        started = self._pump()
        if (
            self._log.persistent
            and not started
            and not self._log_sync_scheduled
            and self._tg is not None
        ):
            self._log_sync_scheduled = True
            self._spawn(self._save_outcomes())
        if self._timer_blocked:
            self._wake_timer()
        self._metrics.update()
        self._signal()

    async def _save_outcomes(self) -> None:
        """Persist the terminal records of calls that just settled, together (one store
        write for all that settle meanwhile), so a retried task skips their entries."""
        await anyio.lowlevel.checkpoint()
        self._log_sync_scheduled = False
        try:
            await self._log.sync()
        except Exception as exc:
            self._fail(exc)

    def _on_request_failed(
        self, call: _Call[EntryT], error: BaseException | None, timed_out: bool, now: float
    ) -> None:
        self._counts["requests_failed"] += 1
        if timed_out:
            self._counts["timeouts"] += 1
            error = TimeoutError(
                f"request {call.info.call_id} got no response within "
                f"requestTimeoutMs ({self.options.request_timeout_ms})"
            )
            kind = ErrorKind.FATAL if self.options.fail_on_timeout else ErrorKind.RETRYABLE
            self._limiter.on_congestion(call.sent, now)
        else:
            assert error is not None
            kind = self.classify_error(error)
            if kind is not ErrorKind.FATAL and self._refused_at_once(error):
                error, kind = self._refused_error(error), ErrorKind.FATAL
        if kind is ErrorKind.FATAL:
            self._exhausted += len(call.run)  # never to be sent again: failed
            self._fail(error, call)
            return
        if kind is ErrorKind.THROTTLED:
            self._throttled(call, now)
        retry_after = getattr(error, "retry_after", None)
        if (
            self._reads_entries
            and self._log.persistent
            and self._tg is not None
            and self.may_have_landed(None if timed_out else error)
        ):
            self._looking_up[call.info.call_id] = call.run
            self._tg.start_soon(self._look_up_then_send, call, error, retry_after)
            return
        kept = self._requeue(call.run, error, retry_after, now, pinned=call.info)
        if not kept:
            self._log.record_failure(call.info, error)

    def _refused_at_once(self, error: BaseException) -> bool:
        """Log the writer's first failed connection; whether ``error`` is a refused
        connection to fail on at once (``failFastOnConnectionRefused``: nothing was ever
        delivered there from this process)."""
        failure = connection_failure(error)
        if failure is None:
            return False
        if not self._connection_failed_once:
            self._connection_failed_once = True
            log.warning(
                "%s: cannot connect to %s (%s): %s",
                self._scope,
                self.describe_destination(),
                failure.value,
                error,
            )
        return (
            failure is ConnectionFailure.REFUSED
            and self.options.fail_fast_on_connection_refused
            and not self._counts["delivered"]
            and not ever_reached(self.describe_destination())
        )

    def _refused_error(self, error: BaseException) -> FatalError:
        fatal = FatalError(
            f"{self.describe_destination()} refused the connection and nothing was ever "
            "delivered there from this process: is the destination running, and are its "
            "host and port right? (failFastOnConnectionRefused=false retries instead): "
            f"{error}"
        )
        fatal.__cause__ = error
        return fatal

    def _on_response(self, call: _Call[EntryT], result: SubmitResult, now: float) -> None:
        run = call.run
        seqs = run.seqs
        retry = set(result.retry)
        rejected = result.rejected
        acked: Sequence[int] = seqs
        if retry or rejected:
            acked = [
                seq
                for index, seq in enumerate(seqs)
                if index not in retry and index not in rejected
            ]
        self._counts["delivered"] += len(acked)
        self._counts["bytes_sent"] += run.size
        rejected_seqs = {seqs[index]: reason for index, reason in rejected.items()}
        if self._attempts:
            for seq in acked:
                self._attempts.pop(seq, None)
            for seq in rejected_seqs:
                self._attempts.pop(seq, None)
        # Rejected entries count as settled only once their dead letter is written; without
        # a target, or when writing it fails, they fail the task and its retry meets them.
        settled: dict[int, str] = {}
        failure: AsyncSinkError | None = None
        for index, reason in rejected.items():
            seq, entry = seqs[index], run.entries[index]
            try:
                self._bad_record(seq, f"rejected by the destination: {reason}", entry=entry)
            except (BadRecordError, DeadLetterError) as exc:
                failure = exc
                break
            settled[seq] = reason
        self._log.record_result(call.info, acked, settled, result.detail)
        if failure is not None:
            self._fail(failure, call)
            return
        if retry:
            if result.throttled:
                self._throttled(call, now)
            failed = run.pick(sorted(retry))
            why = f": {result.reason}" if result.reason else ""
            cause = AsyncSinkError(
                f"request {call.info.call_id}: {len(failed)} of {len(seqs)} entries failed{why}"
            )
            self._requeue(failed, cause, result.retry_after, now, pinned=None)
        else:
            self._window.on_success()
            self._max_batch = min(self.options.max_batch_size, self._window.size)

    def _throttled(self, call: _Call[EntryT], now: float) -> None:
        """The destination pushed back on ``call``: shrink the AIMD window of entries (and
        the batch size with it) and the limit of requests in flight."""
        self._counts["throttled"] += 1
        self._window.on_congestion(call.started, now)
        self._limiter.on_congestion(call.sent, now)
        self._max_batch = min(self.options.max_batch_size, self._window.size)

    def _requeue(
        self,
        run: Run[EntryT],
        error: BaseException | None,
        retry_after: float | None,
        now: float,
        *,
        pinned: CallInfo | None,
    ) -> bool:
        """Put the failed entries of ``run`` back at the front, or give up on those out
        of retries.

        Returns whether any entries were kept for another attempt.
        """
        self._last_error = error
        attempts = 0
        kept: list[int] = []  # indexes into ``run``
        attempts_of, max_retries = self._attempts, self.options.max_retries
        for index, seq in enumerate(run.seqs):
            count = attempts_of.get(seq, 0) + 1
            attempts = max(attempts, count)
            if count > max_retries:
                attempts_of.pop(seq, None)
                if len(self._exhausted_at) < _POSITIONS_SHOWN:
                    self._exhausted_at.append(seq)
            else:
                attempts_of[seq] = count
                kept.append(index)
        if len(kept) < len(run):
            self._exhausted += len(run) - len(kept)
            log.warning(
                "%s: %d entries out of retries (maxRetries=%d): %s",
                self._scope,
                len(run) - len(kept),
                self.options.max_retries,
                error,
            )
        if kept:
            self._counts["retried"] += len(kept)
            delay = self._retry.delay(attempts, retry_after)
            whole = len(kept) == len(run)
            self._buffer.requeue(
                run if whole else run.pick(kept), now + delay, pinned if whole else None
            )
            self._wake_timer()  # the retry may be due before the timer's deadline
        return bool(kept)

    def _fail(self, error: BaseException, call: _Call[EntryT] | None = None) -> None:
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
        self._signal()

    # ------------------------------------------------------------------ durable log

    def _take_from_log(self) -> None:
        now = time.monotonic()
        released, resends = self._log.take_released()
        for seq, entry, size in released:
            if not self._buffer.fresh_count:
                self._wake_timer()
            self._buffer.append(seq, entry, size, now)
        for info, parts in resends:
            if self._reads_entries and self._tg is not None:
                run = Run.of(parts)
                self._looking_up[info.call_id] = run
                self._tg.start_soon(self._reconcile_then_send, info, run)
            else:
                self._log.settle_reconciled(info, None)  # not looked up: re-sent as it was
                self._buffer.requeue(Run.of(parts), now, info)
            self._wake_timer()

    async def _look_up(self, info: CallInfo, run: Run[EntryT]) -> Collection[int] | None:
        """What the destination holds of a call, by its entries; ``None``: cannot tell."""
        try:
            return await self.reconcile_entries(info, list(run.entries))
        except Exception as exc:
            log.warning(
                "%s: looking up call %d failed (%s: %s); re-sending it as it was",
                self._scope,
                info.call_id,
                type(exc).__name__,
                exc,
            )
            return None

    async def _look_up_then_send(
        self, call: _Call[EntryT], error: BaseException | None, retry_after: float | None
    ) -> None:
        """A request of this attempt that got no answer may have landed: look it up by
        its entries, count what the destination holds as delivered, and send the rest
        again (the whole call as it was, when the lookup cannot tell)."""
        info, run = call.info, call.run
        try:
            held = await self._look_up(info, run)
            del self._looking_up[info.call_id]  # back in the buffer or settled from here on
            now = time.monotonic()
            if held is None:
                if self._requeue(run, error, retry_after, now, pinned=info):
                    self._log.settle_reconciled(info, None, earlier=False)  # re-sent as it was
                else:
                    self._log.record_failure(info, error)
            else:
                found = self._log.settle_reconciled(info, held, earlier=False)
                self._counts["delivered"] += len(found)
                missing = [i for i, seq in enumerate(run.seqs) if seq not in found]
                if missing:
                    self._requeue(run.pick(missing), error, retry_after, now, pinned=None)
            await self._log.sync()
        except Exception as exc:
            self._fail(exc, call)
        finally:  # a lookup cancelled with the writer leaves its call in flight, unsettled
            self._pump()
            self._wake_timer()
            self._signal()

    async def _reconcile_then_send(self, info: CallInfo, run: Run[EntryT]) -> None:
        """Look an earlier attempt's call up by its entries; send only what is missing."""
        try:
            held = await self._look_up(info, run)
            del self._looking_up[info.call_id]  # back in the buffer or settled from here on
            settled = self._log.settle_reconciled(info, held)
            now = time.monotonic()
            if held is None:
                self._buffer.requeue(run, now, info)
            else:
                for seq, entry, size in zip(run.seqs, run.entries, run.sizes, strict=True):
                    if seq not in settled:
                        self._buffer.append(seq, entry, size, now)
            await self._log.sync()
        except Exception as exc:
            self._fail(exc)
        finally:  # a lookup cancelled with the writer leaves its call in flight, unsettled
            self._pump()
            self._wake_timer()
            self._signal()

    # ------------------------------------------------------------------ state

    def snapshot(self) -> WriterSnapshot[EntryT]:
        """The live state: every accepted, unacknowledged entry, read from the writer
        itself at this moment (in-flight requests count as unsent)."""
        entries: list[tuple[int, EntryT]] = []
        for run in (*(call.run for call in self._calls.values()), *self._looking_up.values()):
            entries.extend(zip(run.seqs, run.entries, strict=True))
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
        self._wake_timer()
        self._pump()

    def statistics(self) -> WriterStatistics:
        """A frozen snapshot of what this writer did so far."""
        log_stats = self._log.statistics()
        return WriterStatistics(
            **self._counts,
            written=self._written,
            **log_stats,
            failed=self._exhausted,
            buffered=len(self._buffer),
            in_flight=self._in_flight_entries + sum(map(len, self._looking_up.values())),
            window=self._window.size,
            in_flight_limit=self._limiter.limit,
            latency=LatencyHistogram.of(list(self._latency)),
            request_entries=RequestSizes.of(self._request_entries),
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
            **self._counts,
            **self._log.statistics(),
            "written": self._written,
            "failed": self._exhausted,
        }
        return counts, self._limiter.limit, len(self._calls), len(self._buffer)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._state.value} scope={self._scope} "
            f"buffered={len(self._buffer)} in_flight={len(self._calls)}>"
        )


_NO_ANSWER = object()  # a request that did not answer (it raised, or timed out)


def _as_ints(sizes: Sequence[object]) -> list[int] | None:
    """``entry_sizes`` results as ``int`` (numpy integers...), or ``None`` if one is not
    an integer."""
    tolist = getattr(sizes, "tolist", None)
    ints = list(map(integer, tolist() if callable(tolist) else sizes))
    return None if None in ints else ints  # type: ignore[return-value]


def _error_type(error: BaseException | None, timed_out: bool) -> str | None:
    """A failed request's ``error.type`` in metrics; ``None`` for an answer."""
    if timed_out:
        return "timeout"
    return None if error is None else type(error).__name__


def _is_stray(exc: BaseException) -> bool:
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
