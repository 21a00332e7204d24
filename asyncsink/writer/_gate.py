"""The gate between the buffer and the requests: the writer's ordering policy says which
entries cut from the buffer may leave now.

``cut`` takes the next request's entries from the buffer and lets the ordering admit
them; while it holds entries back (parked, waiting for an earlier entry of their key),
more are cut to fill the request. Entries that follow a dead letter of their key go to
the dead letters here. Once a request settled, ``settled`` tells the ordering which of
its entries ended, and the entries that waited for them go back at the front of the
buffer. With no ordering (``NO_ORDERING``) every cut batch leaves as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from ..durable.recorder import CallRecorder
from ..options import SinkOptions
from ..policies.dead_letter import DeadLetters
from ..policies.ordering import Ordering
from ._buffer import RequestBuffer, Run, joined

__all__ = ["Gate"]

E = TypeVar("E")


class Gate(Generic[E]):
    """Cuts requests for a writer, with its parts and options."""

    __slots__ = ("buffer", "ordering", "dead_letters", "max_bytes", "max_record")

    def __init__(
        self,
        buffer: RequestBuffer[E],
        ordering: Ordering,
        dead_letters: DeadLetters,
        options: SinkOptions,
    ) -> None:
        self.buffer, self.ordering, self.dead_letters = buffer, ordering, dead_letters
        self.max_bytes = options.max_batch_size_in_bytes
        self.max_record = options.max_record_size_in_bytes

    @property
    def buffered(self) -> int:
        """Entries accepted and not sent: in the buffer, or held back by the ordering."""
        return self.buffer.count + self.ordering.parked

    def cut(self, limit: int, now: float, fresh: bool) -> tuple[Run[E] | None, Any]:
        """The next request's entries (at most ``limit``; ``fresh``: fresh entries may
        go), and its call when it is one sent again whole; ``(None, None)``: none."""
        buffer, max_bytes = self.buffer, self.max_bytes
        run, pinned = buffer.take(limit, max_bytes, now, include_fresh=fresh)
        if run is None or pinned is not None:
            return run, pinned
        pieces: list[Run[E]] = []
        count = size = 0
        while True:
            admitted = self._admit(run)
            if admitted is run and not pieces:
                return run, None  # nothing held back: the common case
            if admitted is not None:
                pieces.append(admitted)
                count, size = count + len(admitted), size + admitted.size
            if count >= limit or max_bytes - size < self.max_record:
                break
            run, pinned = buffer.take(limit - count, max_bytes - size, now, include_fresh=fresh)
            if run is None:
                break
            if pinned is not None:  # a call to send again whole goes in a request of its own
                buffer.requeue(run, 0.0, pinned)
                break
        if not pieces:
            return None, None
        return (pieces[0] if len(pieces) == 1 else joined(pieces, size)), None

    def _admit(self, run: Run[E]) -> Run[E] | None:
        """The part of ``run`` the ordering lets leave now (``None``: none of it)."""
        admitted = self.ordering.admit(run.seqs, run.entries, run.sizes, False)
        if admitted is None:
            return run
        leave, letters = admitted
        for index in letters:
            seq = run.seqs[index]
            reason = "an earlier entry of its orderingKey went to the dead letters"
            self.dead_letters.bad_record(seq, reason, entry=run.entries[index], cause="ordering")
            self.ended((seq,))
        return run.pick(leave) if leave else None

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
        freed = self.ordering.release(seqs)
        if freed:
            self.buffer.requeue(Run.of(freed), 0.0)
