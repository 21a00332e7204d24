"""Durable calls for user code: outcomes recorded per scope and replayed on a retry.

::

    async with DurableContext(store, scope) as ctx:
        order = await ctx.execute_async(create_order, customer, items)
        await ctx.execute_async(send_mail, order["id"], reconciler=mail_sent)
        await ctx.complete()

    with DurableContext.sync(store, scope) as ctx:   # plain code, e.g. in foreachPartition
        for row in rows:
            ctx.execute(post_row, row.asDict())
        ctx.complete()

Entering takes the scope: its epoch is bumped, so an older attempt still running is fenced
at its next write (``FencedError``), and the records earlier attempts left are loaded.
They live under ``fn:NNNNNNNNNN`` keys, beside the sink call log's ``call:`` records.

**Matching.** Calls are numbered in the order they start; on a re-execution call ``i`` is
matched with record ``i`` by function id (``module.qualname``) and arguments digest.
SUCCEEDED: the recorded result is returned and ``fn`` is not called. FAILED: the recorded
exception is raised again, of the same type. PENDING (an earlier attempt stopped while
``fn`` ran): ``reconciler(key)`` returns the result the call had, recorded as SUCCEEDED,
or raises ``LookupError`` and ``fn`` runs again; without a reconciler ``fn`` runs again.
Another function or other arguments mean the code or its input changed: that record and
every later one are deleted at once (durably, with a warning) and ``fn`` runs afresh. So the
code must make the same calls in the same order on every attempt, as Spark demands of a
replayed task; overlapping ``execute_async`` calls must start in a deterministic order.

**Arguments** are digested with BLAKE2b. JSON-like values (None, bool, int, float, str,
bytes, Decimal, lists, tuples, dicts, sets, dataclasses, datetimes, UUIDs, enums) are
encoded canonically with orjson (sorted keys and sets): the digest is the same in every
process. Other values fall back to their pickle, stable only where pickling is
deterministic (not for sets of strings, whose order varies between processes, nor for
objects whose state is not their value). Tuples and lists, ``{1: x}`` and ``{"1": x}``,
digest alike; ``functools.partial`` arguments count, the instance of a bound method does
not. Arguments that cannot be encoded raise ``TypeError`` before ``fn`` runs.

**Outcomes.** Results are pickled (an unpicklable one raises ``DurableError`` and the call
counts as unrecorded). An ``Exception`` from ``fn`` is an outcome too: it is recorded and
raised again on every later attempt, without calling ``fn``; if it does not survive
pickling, its type and message are kept and a replay raises ``DurableError`` naming the
type. Exceptions of the ``transient`` types a call names (a connection error, a timeout:
a failure the next attempt should try again) are not outcomes, nor are ``BaseException``
subclasses (cancellation, interrupts) and ``DurableError``: they propagate unrecorded,
leaving the call as it was before ``fn`` ran (PENDING, or no record), so the next attempt
asks its reconciler or calls ``fn`` again. Records are unpickled on replay: trust the store
as much as the code.

**Store.** Given a store URL instead of a ``RecordStore``, the context opens the store
itself and closes it when it exits.

**Write order.** The terminal record is durable before ``execute`` returns or raises. A
PENDING record is written before ``fn`` runs only with a ``reconciler`` or
``pending=True``: one more store write per call, which buys a fence check before ``fn``
starts and a trace of an interrupted call (without it the reconciler is never asked).
Without it, a crash during ``fn`` leaves nothing and a retry runs ``fn`` again, and a
fenced attempt learns it only when recording the outcome.

**Idempotency key.** Call ``i`` has the key ``call_key(scope, i, function, digest)`` on
every attempt: ``current_key()`` returns it inside ``fn`` and the reconciler gets it. It
depends on the function and the arguments digest too, so a call that takes the place of
another (the code or its input changed) never gets the key the other one had.

**Retrying in place.** When a call raised a ``transient`` exception and the next call to
start is the same function with the same arguments, that one takes its number: a loop
that tries it again in the same context makes it the same call ``i`` as an attempt where
it succeeded at once. Any other call next keeps the numbering of an attempt where the
failed call ran.
"""

from __future__ import annotations

import base64
import contextvars
import decimal
import functools
import hashlib
import inspect
import logging
import pickle
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeAlias, TypeVar, cast, overload

import anyio
import anyio.from_thread
import orjson
from anyio.from_thread import BlockingPortal

from ..errors import CorruptRecordError, DurableError, FencedError
from ..request import idempotency_key
from ..stores import open_store
from ..stores.base import RecordStore, Scope, ScopeState
from .records import FAILED, PENDING, SUCCEEDED, load_json_object

__all__ = [
    "FN_PREFIX",
    "DurableCallStatistics",
    "DurableContext",
    "FnRecord",
    "SyncDurableContext",
    "args_digest",
    "call_key",
    "current_key",
    "decode_fn_record",
    "fn_key",
    "function_id",
]

log = logging.getLogger("asyncsink.durable")

T = TypeVar("T")
_Reconciler: TypeAlias = Callable[[str], Awaitable[T] | T]
_Transient: TypeAlias = type[Exception] | tuple[type[Exception], ...]

FN_PREFIX = "fn:"
_FORMAT_VERSION = 2  # 1: keys of calls from their number alone (``call_key``)
_JSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

_current_key: contextvars.ContextVar[str] = contextvars.ContextVar("asyncsink_fn_key")


def current_key() -> str:
    """The idempotency key of the durable call running now, inside its ``fn``.

    Raises:
        LookupError: called outside a durable call.
    """
    return _current_key.get()


def fn_key(index: int) -> str:
    """The store key of call ``index``."""
    return f"{FN_PREFIX}{index:010d}"


# ---------------------------------------------------------------------- identity


def function_id(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn`` (of the wrapped function, for a ``functools.partial``;
    of the class, for a callable instance)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    target: Any = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(target, '__module__', None) or '?'}.{target.__qualname__}"


def call_key(
    scope: Scope | str, index: int, function: str, digest: str, *, version: int = _FORMAT_VERSION
) -> str:
    """The idempotency key of durable call ``index`` of ``scope``, made by ``function``
    (``function_id``) with arguments of digest ``digest`` (``args_digest``). A call left
    PENDING by a record of format ``version`` 1 keeps the key it had then, from its
    number alone."""
    if version == 1:
        return idempotency_key(f"{scope}/fn", index)
    return idempotency_key(f"{scope}/fn", index, f"{function}({digest})".encode())


def args_digest(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A digest of a call's arguments, stable across processes for JSON-like values.

    Raises:
        TypeError: the arguments are neither JSON-like nor picklable.
    """
    try:
        data = b"j" + orjson.dumps([args, kwargs], option=_JSON_OPTIONS, default=_canonical)
    except TypeError:
        try:
            data = b"p" + pickle.dumps((args, kwargs), protocol=5)
        except Exception as exc:
            raise TypeError(
                f"durable call arguments must be JSON-like or picklable to be digested: {exc}"
            ) from exc
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return ["\x00bytes", base64.b64encode(value).decode()]
    if isinstance(value, set | frozenset):
        encoded = (orjson.dumps(v, option=_JSON_OPTIONS, default=_canonical) for v in value)
        return ["\x00set", sorted(item.decode() for item in encoded)]
    if isinstance(value, decimal.Decimal):
        return ["\x00decimal", str(value)]
    raise TypeError(f"{type(value).__name__} is not JSON-like")


def _unwrap(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments a call really gets, with those bound by ``functools.partial``."""
    while isinstance(fn, functools.partial):
        args = (*fn.args, *args)
        kwargs = {**fn.keywords, **kwargs}
        fn = fn.func
    return args, kwargs


# ---------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class FnRecord:
    """One durable call as stored: JSON, with base64 pickles for the outcome.

    ::

        {"v": 2, "call": 3, "fn": "jobs.post_row", "args": "<blake2b hex>",
         "status": "FAILED", "result": "<base64 pickle>",
         "error": {"type": "httpx.HTTPStatusError", "message": "...",
                   "pickle": "<base64 pickle, absent if it could not be pickled>"}}
    """

    index: int
    function: str
    digest: str
    status: str
    result: str | None = None
    error: dict[str, str] | None = None
    version: int = _FORMAT_VERSION

    def encode(self) -> bytes:
        body = {
            "v": self.version,
            "call": self.index,
            "fn": self.function,
            "args": self.digest,
            "status": self.status,
        }
        if self.result is not None:
            body["result"] = self.result
        if self.error is not None:
            body["error"] = self.error
        return orjson.dumps(body)


def decode_fn_record(data: bytes) -> FnRecord:
    """Decode a stored durable call record (its outcome stays pickled).

    Raises:
        ValueError: the bytes are not a record this version can read (the message says why).
    """
    body = load_json_object(data)
    version = body.get("v")
    if version not in (1, _FORMAT_VERSION):
        raise ValueError(f"unknown format version {version!r}")
    for name, kind in (("call", int), ("fn", str), ("args", str), ("status", str)):
        if not isinstance(body.get(name), kind):
            raise ValueError(f"field {name!r} is missing or not {kind.__name__}")
    status, result, error = body["status"], body.get("result"), body.get("error")
    if status not in (PENDING, SUCCEEDED, FAILED):
        raise ValueError(f"unknown status {status!r}")
    if status == SUCCEEDED and not isinstance(result, str):
        raise ValueError("SUCCEEDED without a result")
    if status == FAILED and not (isinstance(error, dict) and isinstance(error.get("type"), str)):
        raise ValueError("FAILED without an error type")
    return FnRecord(body["call"], body["fn"], body["args"], status, result, error, version)


def _pickled(value: object) -> str:
    return base64.b64encode(pickle.dumps(value, protocol=5)).decode()


def _unpickled(data: str) -> Any:
    return pickle.loads(base64.b64decode(data, validate=True))  # noqa: S301 - trusted store


def _error_of(exc: Exception) -> dict[str, str]:
    kind = type(exc)
    error = {"type": f"{kind.__module__}.{kind.__qualname__}", "message": str(exc)[:4000]}
    try:
        blob = _pickled(exc)
        if type(_unpickled(blob)) is kind:
            error["pickle"] = blob
    except Exception:
        pass  # type and message are all that can be kept
    return error


def _unrecorded(transient: _Transient) -> tuple[type[Exception], ...]:
    """The exceptions of ``fn`` that are not outcomes: ``DurableError`` and the classes
    of a call's ``transient`` argument (checked)."""
    types = transient if isinstance(transient, tuple) else (transient,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            raise TypeError(
                f"transient: expected an Exception subclass or a tuple of them, got {kind!r}"
            )
    return (DurableError, *types)


# ---------------------------------------------------------------------- the context


@dataclass(frozen=True, slots=True)
class DurableCallStatistics:
    """What a context did: calls run, answered from records, settled by a reconciler, and
    records dropped because their calls no longer matched."""

    executed: int
    replayed: int
    reconciled: int
    dropped: int


@dataclass(slots=True)
class _Call:
    index: int
    key: str
    function: str
    digest: str
    found: FnRecord | None  # the matching record an earlier attempt left


class DurableContext:
    """Durable calls of one scope: each call runs once, a retry replays its outcome.

    Use it with ``async with``, or ``DurableContext.sync(...)`` with ``with`` from plain
    code; the module docs give matching, arguments, outcomes and write order.

    Args:
        store: where the records live: a ``RecordStore``, or a store URL (as for
            ``recordStore``) for a store the context opens, and closes when it exits.
        scope: the share of work the calls belong to.
        epoch: join an attempt that already took ``scope`` at this epoch (e.g. a writer's
            call log: ``DurableContext(log.store, log.scope, epoch=log.epoch)``) instead of
            taking the scope anew, which would fence that attempt.
    """

    def __init__(self, store: RecordStore | str, scope: Scope, *, epoch: int | None = None) -> None:
        self._owns_store = isinstance(store, str)
        self.store = open_store(store) if isinstance(store, str) else store
        self.scope = scope
        self.epoch = 0
        self.completed = False
        self._join = epoch
        self._records: dict[int, FnRecord] = {}
        self._next = 0
        self._retry: tuple[int, str, str] | None = None  # a call to try again in place
        self._open = False
        self._lock = anyio.Lock()
        self._counts = dict.fromkeys(("executed", "replayed", "reconciled", "dropped"), 0)

    @staticmethod
    def sync(
        store: RecordStore | str, scope: Scope, *, epoch: int | None = None
    ) -> SyncDurableContext:
        """The same context for plain code: ``with DurableContext.sync(store, scope) as ctx``."""
        return SyncDurableContext(DurableContext(store, scope, epoch=epoch))

    async def __aenter__(self) -> Self:
        """Take (or join) the scope and load its durable call records.

        Raises:
            CorruptRecordError: a stored call record cannot be decoded.
            FencedError: the scope no longer holds the epoch to join.
            DurableError: the store cannot be reached.
        """
        if self._open:
            raise RuntimeError("this DurableContext is already open")
        try:
            state = await self._take()
        except BaseException:
            await self._close_own_store()
            raise
        self.epoch, self.completed, self._open = state.epoch, state.completed, True
        return self

    async def _take(self) -> ScopeState:
        if self._join is None:
            state = await self.store.take(self.scope)
        else:
            loaded = await self.store.load(self.scope)
            if loaded is None or loaded.epoch != self._join:
                raise FencedError(self.scope, self._join, loaded.epoch if loaded else None)
            state = loaded
        for key, data in state.records.items():
            if key.startswith(FN_PREFIX):
                try:
                    record = decode_fn_record(data)
                except ValueError as exc:
                    raise CorruptRecordError(self.scope, key, str(exc)) from exc
                if key != fn_key(record.index):
                    raise CorruptRecordError(self.scope, key, f"holds call {record.index}")
                self._records[record.index] = record
        return state

    async def __aexit__(self, *exc_info: object) -> None:
        self._open = False
        await self._close_own_store()

    async def _close_own_store(self) -> None:
        if self._owns_store:
            await self.store.aclose()

    def statistics(self) -> DurableCallStatistics:
        """A frozen snapshot of what this context did so far."""
        return DurableCallStatistics(**self._counts)

    @overload
    async def execute_async(
        self,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        reconciler: _Reconciler[T] | None = None,
        pending: bool = False,
        transient: _Transient = (),
        **kwargs: Any,
    ) -> T: ...
    @overload
    async def execute_async(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        reconciler: _Reconciler[T] | None = None,
        pending: bool = False,
        transient: _Transient = (),
        **kwargs: Any,
    ) -> T: ...
    async def execute_async(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        reconciler: _Reconciler[Any] | None = None,
        pending: bool = False,
        transient: _Transient = (),
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once for the scope; return (or raise) what it did.

        ``fn`` may be sync or async (an awaitable result is awaited). ``reconciler(key)``
        settles a call an earlier attempt left PENDING: it returns the result the call
        had, or raises ``LookupError`` to have ``fn`` run again. Giving a reconciler, or
        ``pending=True``, makes the call write PENDING before ``fn`` runs. An exception of
        a ``transient`` type (an exception class or a tuple of them) is raised without
        being recorded: the next attempt runs the call again, where any other exception
        would be raised again from its record.

        Raises:
            Exception: what ``fn`` raised, now or in the attempt that recorded it.
            TypeError: the arguments cannot be digested.
            FencedError: another attempt took the scope.
            CorruptRecordError: the matching record's outcome cannot be unpickled.
            DurableError: the store failed, the result cannot be pickled, or the recorded
                exception could not be (its type is named).
        """
        unrecorded = _unrecorded(transient)
        call = await self._begin(fn, args, kwargs, pending or reconciler is not None)
        if self._replays(call):
            return self._replay(call)
        if call.found is not None and reconciler is not None:
            try:
                value = reconciler(call.key)
                if inspect.isawaitable(value):
                    value = await value
            except LookupError:
                pass
            except unrecorded:
                self._give_back(call)
                raise
            else:
                await self._succeed(call, value, reconciled=True)
                return value
        token = _current_key.set(call.key)
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except unrecorded:
            self._give_back(call)
            raise
        except Exception as exc:
            await self._fail(call, exc)
            raise
        finally:
            _current_key.reset(token)
        await self._succeed(call, value)
        return value

    def execute_blocking(
        self,
        portal: BlockingPortal,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        reconciler: Callable[[str], Any] | None,
        pending: bool,
        transient: _Transient,
    ) -> Any:
        """What ``SyncDurableContext.execute`` runs: ``fn`` and the reconciler in the
        calling thread, each step of the call on ``portal``'s event loop; the same steps
        and outcomes as ``execute_async``."""
        unrecorded = _unrecorded(transient)
        call = portal.call(self._begin, fn, args, kwargs, pending or reconciler is not None)
        if self._replays(call):
            return self._replay(call)
        if call.found is not None and reconciler is not None:
            try:
                value = reconciler(call.key)
            except LookupError:
                pass
            except unrecorded:
                self._give_back(call)
                raise
            else:
                portal.call(functools.partial(self._succeed, call, value, reconciled=True))
                return value
        token = _current_key.set(call.key)
        try:
            value = fn(*args, **kwargs)
        except unrecorded:
            self._give_back(call)
            raise
        except Exception as exc:
            portal.call(self._fail, call, exc)
            raise
        finally:
            _current_key.reset(token)
        portal.call(self._succeed, call, value)
        return value

    async def complete(self) -> None:
        """Mark the scope COMPLETED. Its records stay, so a replay still answers from
        them, until the scope is purged.

        Raises:
            FencedError: another attempt took the scope.
        """
        self._check_open()
        async with self._lock:
            await self.store.complete(self.scope, self.epoch, drop_records=False)
        self.completed = True

    # ------------------------------------------------------------------ steps

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("use a DurableContext inside 'async with' (or 'with' for sync)")

    async def _begin(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], pending: bool
    ) -> _Call:
        """Number the call and find its record (one that does not match is dropped with
        every later one); write PENDING if asked and there is no outcome to replay."""
        self._check_open()
        function = function_id(fn)
        digest = args_digest(*_unwrap(fn, args, kwargs))
        retry, self._retry = self._retry, None
        if retry is not None and retry[1:] == (function, digest) and self._next == retry[0] + 1:
            index = retry[0]  # the call that just failed, tried again in place
        else:
            index = self._next
            self._next += 1
        found = self._records.get(index)
        if found is not None and (found.function, found.digest) != (function, digest):
            await self._drop_from(index, found, function)
            found = None
        # A call an earlier attempt left PENDING keeps the key (and format) it had then.
        version = _FORMAT_VERSION if found is None else found.version
        key = call_key(self.scope, index, function, digest, version=version)
        call = _Call(index, key, function, digest, found)
        if pending and not self._replays(call):
            await self._write(FnRecord(index, function, digest, PENDING, version=version))
        return call

    def _give_back(self, call: _Call) -> None:
        """A call left no outcome: the same call started next takes its number."""
        if self._next == call.index + 1:
            self._retry = (call.index, call.function, call.digest)

    @staticmethod
    def _replays(call: _Call) -> bool:
        return call.found is not None and call.found.status != PENDING

    def _replay(self, call: _Call) -> Any:
        """The recorded result, or raise the recorded exception."""
        record, key = call.found, fn_key(call.index)
        assert record is not None
        self._counts["replayed"] += 1
        if record.status == SUCCEEDED:
            try:
                return _unpickled(record.result or "")
            except Exception as exc:
                raise CorruptRecordError(self.scope, key, f"result: {exc!r}") from exc
        error = record.error or {}
        if "pickle" not in error:
            raise DurableError(
                f"scope {self.scope}: call {call.index} ({record.function}) failed in an "
                f"earlier attempt with {error.get('type')}: {error.get('message')} "
                "(the exception could not be recorded to raise it again)"
            )
        try:
            revived = _unpickled(error["pickle"])
        except Exception as exc:
            raise CorruptRecordError(self.scope, key, f"exception: {exc!r}") from exc
        if not isinstance(revived, BaseException):
            raise CorruptRecordError(self.scope, key, f"exception is a {type(revived).__name__}")
        revived.add_note(f"replayed from durable call {call.index} of scope {self.scope}")
        raise revived

    async def _drop_from(self, index: int, record: FnRecord, function: str) -> None:
        doomed = sorted(i for i in self._records if i >= index)
        log.warning(
            "%s: durable call %d was %s and is now %s%s: the code or its input changed since "
            "an earlier attempt (calls must be deterministic); dropping its record and the "
            "%d after it",
            self.scope,
            index,
            record.function,
            function,
            " with other arguments" if record.function == function else "",
            len(doomed) - 1,
        )
        for i in doomed:
            del self._records[i]
        self._counts["dropped"] += len(doomed)
        async with self._lock:
            await self.store.put(self.scope, self.epoch, {}, [fn_key(i) for i in doomed])

    async def _succeed(self, call: _Call, value: object, *, reconciled: bool = False) -> None:
        try:
            blob = _pickled(value)
        except Exception as exc:
            raise DurableError(
                f"scope {self.scope}: the result of call {call.index} ({call.function}) "
                f"cannot be recorded: {exc!r}"
            ) from exc
        await self._write(FnRecord(call.index, call.function, call.digest, SUCCEEDED, blob))
        self._counts["reconciled" if reconciled else "executed"] += 1

    async def _fail(self, call: _Call, exc: Exception) -> None:
        error = _error_of(exc)
        await self._write(FnRecord(call.index, call.function, call.digest, FAILED, None, error))
        self._counts["executed"] += 1

    async def _write(self, record: FnRecord) -> None:
        data = record.encode()
        async with self._lock:
            await self.store.put(self.scope, self.epoch, {fn_key(record.index): data})
        self._records[record.index] = record


class SyncDurableContext:
    """A ``DurableContext`` for plain code: ``fn`` (a plain function) and the reconciler
    run in the caller's thread, the store I/O on an event loop of its own (an anyio
    blocking portal) that runs while the ``with`` block does.

    Built by ``DurableContext.sync(store, scope)``; ``context`` is the ``DurableContext``
    it drives (its ``scope``, ``epoch`` and ``completed``).
    """

    def __init__(self, context: DurableContext) -> None:
        self.context = context
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None

    def __enter__(self) -> Self:
        """Start the loop, take the scope and load its records (see ``DurableContext``)."""
        if self._portal is not None:
            raise RuntimeError("this SyncDurableContext is already open")
        cm = anyio.from_thread.start_blocking_portal()
        portal = cm.__enter__()
        try:
            portal.call(self.context.__aenter__)
        except BaseException as exc:
            cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._portal_cm, self._portal = cm, portal
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cm, portal = self._portal_cm, self._portal
        self._portal_cm = self._portal = None
        if cm is not None and portal is not None:
            try:
                portal.call(self.context.__aexit__, exc_type, exc, tb)
            finally:
                cm.__exit__(exc_type, exc, tb)

    def statistics(self) -> DurableCallStatistics:
        """A frozen snapshot of what this context did so far."""
        return self.context.statistics()

    def execute(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        reconciler: Callable[[str], T] | None = None,
        pending: bool = False,
        transient: _Transient = (),
        **kwargs: Any,
    ) -> T:
        """Run ``fn(*args, **kwargs)`` once for the scope, in this thread; the reconciler,
        ``pending``, ``transient`` and what it raises are as for
        ``DurableContext.execute_async``.

        Raises:
            TypeError: ``fn`` is a coroutine function: use ``DurableContext`` for async code.
        """
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"{function_id(fn)} is async: call it with execute_async")
        return cast(
            T,
            self.context.execute_blocking(
                self._running(),
                fn,
                args,
                kwargs,
                reconciler=reconciler,
                pending=pending,
                transient=transient,
            ),
        )

    def complete(self) -> None:
        """Mark the scope COMPLETED (see ``DurableContext.complete``)."""
        self._running().call(self.context.complete)

    def _running(self) -> BlockingPortal:
        if self._portal is None:
            raise RuntimeError("use a SyncDurableContext inside 'with'")
        return self._portal
