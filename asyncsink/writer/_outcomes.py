"""Outcomes: what a request's answer, or its failure, means for its entries.

The writer hands each settled request here. ``Outcomes`` counts it, records it in the
call log, tells congestion control and the retry policy, hands rejected entries to the
dead-letter target, and returns what the writer does next, as an ``Outcome``: send
entries again (``again``, not before ``not_before``, as the same call when ``pinned``, or
as fresh entries), look the call up first (``look_up``), or fail (``fatal``). ``None``:
nothing to do.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..durable.recorder import CallRecorder
from ..errors import AsyncSinkError, BadRecordError, DeadLetterError
from ..policies.congestion import CongestionStrategy
from ..policies.dead_letter import SPENT, DeadLetters, status_in
from ..policies.exhausted import ExhaustedEntries
from ..policies.retry import ErrorKind, RetryPolicy
from ..request import CallInfo, SubmitResult
from ..stats import Tally
from ._buffer import Run
from ._sending import Call

__all__ = ["Outcome", "Outcomes"]

E = TypeVar("E")
# (call, its entries) -> (entries held, indexes of the others), or None: cannot tell
LookUpOwn = Callable[[CallInfo, Run[Any]], Awaitable[tuple[int, list[int]] | None]]


@dataclass(slots=True)
class Outcome(Generic[E]):
    """What to do after a request settled (see the module)."""

    again: Run[E] | None = None
    not_before: float = 0.0
    pinned: CallInfo | None = None
    fresh: bool = False  # ``again`` goes at the back, as freshly written entries
    look_up: bool = False
    fatal: BaseException | None = None
    cause: BaseException | None = None  # of a call to look up


@dataclass(slots=True)
class Outcomes(Generic[E]):
    """Settles requests for a writer, with its parts (``may_have_landed``: the sink's)."""

    log: CallRecorder
    tally: Tally
    congestion: CongestionStrategy
    retry: RetryPolicy
    dead_letters: DeadLetters
    may_have_landed: Callable[[BaseException | None], bool]
    max_bytes: int  # ``maxBatchSizeInBytes``
    exhausted: ExhaustedEntries  # entries the destination answered until out of retries

    def answered(
        self, call: Call[E], result: SubmitResult, now: float, in_flight: int
    ) -> Outcome[E] | None:
        """``call`` was answered with ``result``, ``in_flight`` requests being out."""
        run, seqs = call.run, call.run.seqs
        batch, max_bytes = self.congestion.batch_limit(), self.max_bytes
        full = 2 * len(run.entries) >= batch or 2 * run.size >= max_bytes
        self.congestion.on_answer(call.sent, now, in_flight, full=full)
        retry = set(result.retry)
        rejected = result.rejected
        acked: Sequence[int] = seqs
        if retry or rejected:
            acked = [seq for i, seq in enumerate(seqs) if i not in retry and i not in rejected]
        counts = self.tally.counts
        counts["delivered"] += len(acked)
        counts["skipped_stale"] += len(result.stale)
        counts["bytes_sent"] += run.size
        self.retry.forget(acked)
        self.retry.forget([seqs[index] for index in rejected])
        # Rejected entries count as settled only once their dead letter is written; without
        # a target, or when writing it fails, they fail the task and its retry meets them.
        settled: dict[int, str] = {}
        failure: AsyncSinkError | None = None
        for index, reason in rejected.items():
            seq, entry = seqs[index], run.entries[index]
            try:
                reason_given = f"rejected by the destination: {reason}"
                status = status_in(reason)
                self.dead_letters.bad_record(
                    seq, reason_given, entry=entry, cause="rejected", status=status
                )
            except (BadRecordError, DeadLetterError) as exc:
                failure = exc
                break
            settled[seq] = reason
        if failure is not None or not retry:
            self.log.record_result(call.info, acked, settled, result.detail)
            if failure is not None:
                return Outcome(fatal=failure)
            self.congestion.on_success()
            return None
        if result.throttled:
            counts["throttled"] += 1
            self.congestion.on_congestion(call.sent, now, throttled=True)
        failed = run.pick(sorted(retry))
        why = f": {result.reason}" if result.reason else ""
        cause = AsyncSinkError(
            f"request {call.info.call_id}: {len(failed)} of {len(seqs)} entries failed{why}"
        )
        # Entries out of retries the destination answered may be settled elsewhere (the
        # ``onRetriesExhausted`` policy); they are then recorded with the rejected ones.
        try:
            outcome = self.again(failed, cause, result.retry_after, now, pinned=None, spent=settled)
        except (BadRecordError, DeadLetterError) as exc:
            outcome = Outcome(fatal=exc)
        self.log.record_result(call.info, acked, settled, result.detail)
        return outcome

    def failed(
        self, call: Call[E], error: BaseException | None, now: float, *, looks_up: bool
    ) -> Outcome[E] | None:
        """``error`` ``None``: the request timed out; ``looks_up``: a call that may have
        landed may be looked up by its entries."""
        counts = self.tally.counts
        counts["requests_failed"] += 1
        if error is None:
            counts["timeouts"] += 1
            self.congestion.on_congestion(call.sent, now, throttled=False)
        delivered = counts["delivered"] > 0
        reported, kind = self.retry.judge(error, call.info.call_id, delivered=delivered)
        if kind is ErrorKind.FATAL:
            self.retry.give_up(len(call.run))  # never to be sent again: failed
            return Outcome(fatal=reported)
        if kind is ErrorKind.THROTTLED:
            counts["throttled"] += 1
            self.congestion.on_congestion(call.sent, now, throttled=True)
        if looks_up and self.may_have_landed(error):
            return Outcome(look_up=True, cause=reported)
        outcome = self.again(call.run, reported, _retry_after(reported), now, pinned=call.info)
        if outcome is None:
            self.log.record_failure(call.info, reported)
        return outcome

    async def looked_up(
        self, call: Call[E], look_up: LookUpOwn, reported: BaseException | None
    ) -> Outcome[E] | None:
        """Look a call of this attempt that failed with ``reported`` up (``look_up``:
        ``Recovery.settle_own``): count what the destination holds, and send the rest
        again (the whole call as it was, when the lookup could not tell)."""
        found = await look_up(call.info, call.run)
        now = time.monotonic()
        retry_after = _retry_after(reported)
        info, run = call.info, call.run
        if found is None:
            outcome = self.again(run, reported, retry_after, now, pinned=info)
            if outcome is None:
                self.log.record_failure(info, reported)
            else:
                self.log.settle_reconciled(info, None, earlier=False)  # re-sent as it was
            return outcome
        held, missing = found
        self.tally.counts["delivered"] += held
        return self.again(run.pick(missing), reported, retry_after, now, pinned=None)

    def again(
        self,
        run: Run[E],
        error: BaseException | None,
        retry_after: object,
        now: float,
        *,
        pinned: CallInfo | None,
        spent: dict[int, str] | None = None,
    ) -> Outcome[E] | None:
        """The failed entries of ``run`` to send again after their backoff (``None`` when
        all are out of retries). With ``spent`` (the destination answered these entries
        one by one), those out of retries go to the ``exhausted`` policy, and the ones it
        settles are added to ``spent``.

        Raises:
            BadRecordError, DeadLetterError: as ``ExhaustedEntries.spent``.
        """
        if not run.entries:
            return None
        kept, delay = self.retry.attempt(run.seqs, error, retry_after)
        if spent is not None and len(kept) < len(run):
            out = run.pick(sorted(set(range(len(run))) - set(kept)))
            reason = f"{SPENT} (maxRetries={self._max_retries()}): {error}"
            settled = self.exhausted.spent(out.seqs, out.entries, reason)
            if settled:
                self.retry.diverted(list(settled))
                spent.update(settled)
        if not kept:
            return None
        self.tally.counts["retried"] += len(kept)
        whole = len(kept) == len(run)
        return Outcome(run if whole else run.pick(kept), now + delay, pinned if whole else None)

    def _max_retries(self) -> object:
        options = getattr(self.retry, "options", None)
        return getattr(options, "max_retries", "?")


def _retry_after(error: BaseException | None) -> object:
    return getattr(error, "retry_after", None)
