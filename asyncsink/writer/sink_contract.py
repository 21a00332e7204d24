"""The contract a sink author writes: what a destination tells the writer, and what it may
declare.

``SinkContract`` is the base of ``AsyncSinkWriter`` that holds the methods a destination
implements (``convert``, ``entry_size``, ``submit_request_entries``) and the hooks it may
override, each with a default. What a sink can do beyond that is *declared* in class
attributes, never guessed from which methods it overrides:

    class StreamWriter(AsyncSinkWriter[Row, bytes]):
        reconciliation = Reconcile.BY_ENTRIES

        async def reconcile_entries(self, call, entries): ...

A class that overrides ``reconcile`` or ``reconcile_entries`` without declaring it (or
declares one it does not implement) fails with a ``TypeError`` when it is defined.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Collection, Sequence
from typing import ClassVar, Generic, TypeVar

import orjson

from ..clients.connections import never_opened
from ..errors import DestinationError, RetryableError, ThrottledError
from ..policies.retry import ErrorKind, default_classification
from ..request import CallInfo, SubmitResult

__all__ = ["Reconcile", "SinkContract"]

InputT = TypeVar("InputT")
EntryT = TypeVar("EntryT")


class Reconcile(enum.Flag):
    """How a sink settles a call that got no answer (``SinkContract.reconciliation``).

    - ``NONE``: it cannot tell; such a call is re-sent as it was, with the same key.
    - ``BY_CALL``: ``reconcile(call)`` asks the destination about a call of an earlier
      attempt (by its idempotency key, say).
    - ``BY_ENTRIES``: ``reconcile_entries(call, entries)`` looks its entries up by
      content (a Kinesis stream), for an earlier attempt's call once its entries are
      written again, and for a call of this attempt that ``may_have_landed``.
    """

    NONE = 0
    BY_CALL = enum.auto()
    BY_ENTRIES = enum.auto()


_HOOKS = {"reconcile": Reconcile.BY_CALL, "reconcile_entries": Reconcile.BY_ENTRIES}


class SinkContract(abc.ABC, Generic[InputT, EntryT]):
    """What a destination implements; ``AsyncSinkWriter`` does the rest.

    Subclasses implement ``convert``, ``entry_size`` and ``submit_request_entries``, and
    may override ``classify_error``, ``serialize_entry``, ``may_have_landed`` and, when
    they declare it in ``reconciliation``, ``reconcile`` or ``reconcile_entries``.

    Class attributes (declarations):
        reconciliation: a ``Reconcile`` flag, ``Reconcile.NONE`` by default.
        takes_mappings: ``True`` when ``convert`` takes a dict of a row's fields as it
            takes the Spark ``Row``: rows read through Arrow then reach it as dicts.
        sink_name: the sink's name in metrics; the class name when empty.
    """

    reconciliation: ClassVar[Reconcile] = Reconcile.NONE
    takes_mappings: bool = False
    sink_name: str = ""
    _entry_position = 0

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.reconciliation
        for hook, flag in _HOOKS.items():
            owner = next(klass for klass in cls.__mro__ if hook in vars(klass))
            implemented = owner is not SinkContract
            if implemented and flag not in declared:
                raise TypeError(
                    f"{cls.__qualname__} overrides {hook} but does not declare it: set the "
                    f"class attribute reconciliation = {flag} (asyncsink.Reconcile)"
                )
            if flag in declared and not implemented:
                raise TypeError(
                    f"{cls.__qualname__} declares reconciliation = {declared} but does not "
                    f"implement {hook}"
                )

    @property
    def entry_position(self) -> int:
        """Inside ``convert``: the position of the element being converted in this
        writer's input, counted from 0 (its entry sequence number in the scope, the same
        whenever a retried task replays the input, however the element is converted);
        inside ``convert_all``: the position of the run's first element."""
        return self._entry_position

    @entry_position.setter
    def entry_position(self, position: int) -> None:
        # the writer's intake sets it before it converts an element or a run
        self._entry_position = position

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
        """With ``reconciliation = Reconcile.BY_CALL``: for a call left PENDING by an
        earlier attempt, the sequence numbers among ``call.seqs`` that the destination
        holds, or ``None`` if it cannot tell (the call is then re-sent as it was, with
        the same idempotency key). Raising marks the call FAILED and its entries are
        sent again in new calls."""
        return None

    async def reconcile_entries(
        self, call: CallInfo, entries: list[EntryT]
    ) -> Collection[int] | None:
        """With ``reconciliation = Reconcile.BY_ENTRIES``: for a call left PENDING by an
        earlier attempt, once this attempt was given its ``entries`` again (in
        ``call.seqs`` order), or for a call of this attempt that got no answer (see
        ``may_have_landed``): the sequence numbers the destination holds, or ``None`` if
        it cannot tell (the call is re-sent as it was). For destinations that can only
        be searched by content (a Kinesis stream); the entries not held are sent in a
        new call. ``call.pending_since`` says when the call was recorded,
        ``call.sent_again_at`` when it last left again; ``recorded_results()`` gives the
        result details of the scope's acknowledged calls. An exception counts as
        ``None``. Only a writer with durable call records is asked.
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
