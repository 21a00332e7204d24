"""The writer's recovery source: what the call log says to skip, settle and send.

An earlier attempt of the writer's scope may have delivered entries, or left calls
without an answer. As this attempt writes its input again, the call log (a
``CallRecorder``) routes each entry: skipped when it was delivered, held back while it
belongs to a call left unanswered, released once that call's entries are all back.
``Recovery`` turns what the log releases into work for the writer:

- ``take()``: entries to send as new and earlier calls to re-send as they were (same
  call, same idempotency key), as ``Outcome``s; and earlier calls to look up at the
  destination first, for a sink that looks calls up by their entries
  (``Reconcile.BY_ENTRIES``);
- ``settle_earlier(call, run)``: look an earlier call up; what is missing goes out new;
- ``hold(call, run)``, then ``settle_own(call, run)``: the same for a call of this
  attempt that got no answer and ``may_have_landed``.

Calls being looked up are in ``looking_up``: their entries count as in flight.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Generic, TypeVar

from ..durable.recorder import CallRecorder
from ..request import CallInfo
from ._buffer import Run
from ._outcomes import Outcome

__all__ = ["LookUp", "Recovery"]

log = logging.getLogger("asyncsink")

E = TypeVar("E")
LookUp = Callable[[CallInfo, list[Any]], Awaitable[Collection[int] | None]]


class Recovery(Generic[E]):
    """Settles what the call log ``log`` left unfinished; ``look_up`` is the sink's
    ``reconcile_entries`` when it declares ``Reconcile.BY_ENTRIES``, else ``None``."""

    def __init__(self, log: CallRecorder, look_up: LookUp | None) -> None:
        self.log = log
        self._look_up = look_up
        self.looking_up: dict[int, Run[E]] = {}

    @property
    def looks_up(self) -> bool:
        """Whether calls without an answer are looked up by their entries."""
        return self._look_up is not None and self.log.persistent

    def take(self) -> tuple[list[Outcome[E]], list[tuple[CallInfo, Run[E]]]]:
        """What the log released: entries to send as new and calls to re-send as they
        were, and calls to look up first (``settle_earlier``)."""
        released, resends = self.log.take_released()
        now = time.monotonic()
        send = [Outcome(Run.of(released), now, fresh=True)] if released else []
        look_up = []
        for info, parts in resends:
            run: Run[E] = Run.of(parts)
            if self._look_up is not None:
                self.looking_up[info.call_id] = run
                look_up.append((info, run))
            else:
                self.log.settle_reconciled(info, None)  # not looked up: re-sent as it was
                send.append(Outcome(run, now, pinned=info))
        return send, look_up

    async def settle_earlier(self, info: CallInfo, run: Run[E]) -> Outcome[E]:
        """Look an earlier attempt's call up: send what the destination does not hold
        as new entries, or the whole call as it was when the lookup cannot tell."""
        held = await self._held(info, run)
        settled = self.log.settle_reconciled(info, held)
        now = time.monotonic()
        if held is None:
            return Outcome(run, now, pinned=info)
        missing = run.pick([i for i, seq in enumerate(run.seqs) if seq not in settled])
        return Outcome(missing, now, fresh=True)

    def hold(self, info: CallInfo, run: Run[E]) -> None:
        """A call of this attempt is to be looked up: in ``looking_up`` from now on."""
        self.looking_up[info.call_id] = run

    async def settle_own(self, info: CallInfo, run: Run[E]) -> tuple[int, list[int]] | None:
        """Look a call of this attempt up (``hold`` first): how many of its entries the
        destination holds, and the indexes of the others; ``None``: it cannot tell."""
        held = await self._held(info, run)
        if held is None:
            return None
        found = self.log.settle_reconciled(info, held, earlier=False)
        return len(found), [i for i, seq in enumerate(run.seqs) if seq not in found]

    async def _held(self, info: CallInfo, run: Run[E]) -> Collection[int] | None:
        """What the destination holds of a call, by its entries; ``None``: cannot tell.
        The call leaves ``looking_up`` (back in the buffer or settled from here on); a
        lookup cancelled with the writer leaves it there, unsettled."""
        assert self._look_up is not None
        try:
            held = await self._look_up(info, list(run.entries))
        except Exception as exc:
            log.warning(
                "%s: looking up call %d failed (%s: %s); re-sending it as it was",
                self.log.scope_name,
                info.call_id,
                type(exc).__name__,
                exc,
            )
            held = None
        del self.looking_up[info.call_id]
        return held
