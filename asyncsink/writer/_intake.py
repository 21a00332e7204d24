"""Intake: input elements become sized entries, or bad records.

The writer numbers the elements it is given; ``Intake`` converts them with the sink's
``convert``/``convert_all`` and sizes them with ``entry_size``/``entry_sizes``. An
element that cannot be converted or sized, or an entry larger than
``maxRecordSizeInBytes``, is a bad record for the dead-letter target (or a
``BadRecordError``). A run of elements converts at once (``run``) when none of them needs
a closer look; otherwise the writer takes them one at a time (``one``), which finds the
bad record and its position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Generic, TypeVar

from ..durable.recorder import CallRecorder
from ..entries.packed import PackedEntries
from ..errors import FatalError, describe
from ..policies.dead_letter import DeadLetters
from ..request import integer
from ._buffer import Run
from .sink_contract import SinkContract

__all__ = ["Chunks", "Intake"]

InputT = TypeVar("InputT")
EntryT = TypeVar("EntryT")


@dataclass(slots=True)
class Intake(Generic[InputT, EntryT]):
    """Converts and sizes elements for a writer.

    Fields:
        sink: the writer, for its conversion and sizing methods (``entry_position`` is
            set here, before each conversion).
        max_record: ``maxRecordSizeInBytes``.
        dead_letters: where bad records go.
        log: the call log, for elements of a completed scope and replays.
        fail: ends the writer with an error (an ``entry_size`` that is no size).
    """

    sink: SinkContract[InputT, EntryT]
    max_record: int
    dead_letters: DeadLetters
    log: CallRecorder
    fail: Callable[[BaseException], None]

    def one(self, seq: int, element: InputT) -> tuple[EntryT, int] | None:
        """The entry of ``element`` (at position ``seq``) and its size; ``None`` when it
        is a bad record, now in the dead-letter target.

        Raises:
            BadRecordError, DeadLetterError: as ``DeadLetters.bad_record``.
            FatalError: ``entry_size`` gave no size in bytes.
        """
        sink, bad_record = self.sink, self.dead_letters.bad_record
        sink.entry_position = seq
        try:
            entry = sink.convert(element)
        except Exception as exc:
            reason = f"conversion failed: {type(exc).__name__}: {exc}"
            bad_record(seq, reason, element=element, error_type=type(exc).__name__)
            return None
        try:
            size = sink.entry_size(entry)
        except Exception as exc:
            reason = f"entry_size failed: {describe(exc)}"
            bad_record(seq, reason, entry=entry, error_type=type(exc).__name__)
            return None
        if type(size) is not int or size < 0:
            size = self._checked_size(size, seq)
        if size > self.max_record:
            reason = f"entry of {size} bytes exceeds maxRecordSizeInBytes ({self.max_record})"
            bad_record(seq, reason, entry=entry, error_type="RecordTooLarge")
            return None
        return entry, size

    def run(self, elements: Sequence[InputT], seq: int) -> Run[EntryT] | None:
        """The run of ``elements`` converted at once, numbered from ``seq``; or ``None``
        when they must be taken one at a time (the call log replays them, or one is a
        bad record)."""
        if self.log.recovering:
            return None
        sink = self.sink
        sink.entry_position = seq
        try:
            entries = sink.convert_all(elements)
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
            sizes = sink.entry_sizes(entries)
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
        if size > self.max_record and max(sizes) > self.max_record:
            return None
        return Run(range(seq, seq + len(entries)), entries, sizes, size)

    def skip(self, seq: int, element: InputT) -> None:
        """An element of a scope completed by an earlier run: not sent, only digested (a
        bad record was dealt with by that run, and is not digested)."""
        sink = self.sink
        sink.entry_position = seq
        try:
            entry = sink.convert(element)
            fits = 0 <= sink.entry_size(entry) <= self.max_record
        except Exception:
            self.log.skip_completed((), 1)
            return
        self.log.skip_completed((entry,) if fits else (), 1)

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
        self.fail(fatal)
        raise fatal


class Chunks(Generic[InputT]):
    """What ``write_all`` is given, in chunks: slices of a ``Sequence``, lists taken from
    any other iterable."""

    def __init__(self, elements: Iterable[InputT]) -> None:
        self._sliced = elements if isinstance(elements, Sequence) else None
        self._iterator = iter(elements) if self._sliced is None else None
        self._done = 0

    def take(self, count: int) -> Sequence[InputT]:
        if self._sliced is not None:
            chunk = self._sliced[self._done : self._done + count]
            self._done += count
            return chunk
        assert self._iterator is not None
        return list(islice(self._iterator, count))

    def unwritten(self, chunk: Sequence[InputT], start: int) -> tuple[InputT, ...]:
        """The elements of ``chunk`` from ``start`` on, when they were taken from an
        iterator (gone from it); ``()`` from a ``Sequence``."""
        return () if self._sliced is not None else tuple(chunk[start:])


def _as_ints(sizes: Sequence[Any]) -> list[int] | None:
    """``entry_sizes`` results as ``int`` (numpy integers...), or ``None`` if one is not
    an integer."""
    tolist = getattr(sizes, "tolist", None)
    ints = list(map(integer, tolist() if callable(tolist) else sizes))
    return None if None in ints else ints  # type: ignore[return-value]
