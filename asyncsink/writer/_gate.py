"""The gate between the writer's intake and its buffer: the writer's ordering policy says
which written entries may be buffered now.

``add`` hands entries to the ordering on their way into the buffer; the ones it holds
back (parked, waiting for an earlier entry of their key) stay with it, so every request
cut from the buffer may leave as it is. Entries that follow a dead letter of their key
go to the dead letters here. Once a request settled, ``settled`` tells the ordering which
of its entries ended, and the entries that waited for them go back at the front of the
buffer. With no ordering (``NO_ORDERING``) every entry goes straight into the buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from ..durable.recorder import CallRecorder
from ..policies.dead_letter import DeadLetters
from ..policies.ordering import Ordering
from ._buffer import RequestBuffer, Run

__all__ = ["Gate"]

E = TypeVar("E")


class Gate(Generic[E]):
    """Buffers a writer's entries through its ordering policy."""

    __slots__ = ("buffer", "ordering", "dead_letters")

    def __init__(
        self, buffer: RequestBuffer[E], ordering: Ordering, dead_letters: DeadLetters
    ) -> None:
        self.buffer, self.ordering, self.dead_letters = buffer, ordering, dead_letters

    @property
    def buffered(self) -> int:
        """Entries accepted and not sent: in the buffer, or held back by the ordering."""
        return self.buffer.count + self.ordering.parked

    def add(self, run: Run[E], now: float) -> None:
        """Buffer fresh entries written at ``now``, those the ordering lets in."""
        admitted = self._admit(run)
        if admitted is not None:
            self.buffer.extend(admitted, now)

    def append(self, seq: int, entry: E, size: int, now: float) -> None:
        """``add`` one entry."""
        admitted = self.ordering.admit((seq,), (entry,), (size,))
        if admitted is None:
            self.buffer.append(seq, entry, size, now)
        else:
            self._sort(Run([seq], [entry], [size], size), *admitted)

    def _admit(self, run: Run[E]) -> Run[E] | None:
        """The part of ``run`` the ordering lets in (``None``: none of it)."""
        admitted = self.ordering.admit(run.seqs, run.entries, run.sizes)
        return run if admitted is None else self._sort(run, *admitted)

    def _sort(self, run: Run[E], leave: list[int], letters: list[int]) -> Run[E] | None:
        """The entries of ``run`` at ``leave``, after the ones at ``letters`` went to the
        dead letters."""
        if letters:
            self._dead_letter(run.pick(letters))
        return run.pick(leave) if leave else None

    def _dead_letter(self, run: Run[E]) -> None:
        """Entries that follow a dead letter of their key go there too, and end."""
        reason = "an earlier entry of its orderingKey went to the dead letters"
        for seq, entry in zip(run.seqs, run.entries, strict=True):
            self.dead_letters.bad_record(seq, reason, entry=entry, cause="ordering")
            self.ended((seq,))

    def replayed(self, log: CallRecorder, seq: int, entry: E, size: int, now: float) -> bool:
        """``log.admit`` of an entry while the log replays a scope; the ordering learns
        whether it was delivered before (it ended) or belongs to an earlier attempt's
        call, which its key's later entries wait for."""
        skipped = log.statistics()["skipped"]
        if not log.admit(seq, entry, size, now):
            return False
        if log.statistics()["skipped"] > skipped:
            self.ended((seq,))
        else:
            self.ordering.hold(seq)
        return True

    def settled(self, run: Run[E], again: Run[E] | None) -> None:
        """A request of ``run`` settled; the entries in ``again`` are sent again, the
        others ended."""
        if again is None:
            self.ended(run.seqs)
        else:
            sent_again = set(again.seqs)
            self.ended([seq for seq in run.seqs if seq not in sent_again])

    def ended(self, seqs: Sequence[int]) -> None:
        """Entries ``seqs`` reached their end: the entries of their keys that waited go
        next, ahead of the buffer."""
        freed, letters = self.ordering.release(seqs)
        if freed[0]:
            self.buffer.requeue(Run(*freed, sum(freed[2])), 0.0)
        if letters[0]:
            self._dead_letter(Run(*letters, sum(letters[2])))
