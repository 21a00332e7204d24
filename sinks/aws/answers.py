"""Per-entry failures in an AWS batch answer (SQS ``Failed`` entries, Firehose records with
an ``ErrorCode``), as the writer's ``SubmitResult``: the entries to retry, those to reject
as bad records, and whether the service pushed back."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from asyncsink.request import SubmitResult

from .errors import RETRYABLE_CODES, THROTTLING_CODES

__all__ = ["EntryFailure", "result_of"]


@dataclass(frozen=True, slots=True)
class EntryFailure:
    """One entry the answer says failed: its index in the request, the service's code and
    message, and whether the service blames the entry itself (``sender_fault``)."""

    index: int
    code: str
    message: str = ""
    sender_fault: bool = False


def result_of(
    failures: Iterable[EntryFailure],
    unnamed: Iterable[int] = (),
    throttling: frozenset[str] = THROTTLING_CODES,
) -> SubmitResult:
    """The writer's result: entries blamed on the sender (and not a throttle or a
    transient failure) are rejected as bad records, the others retried; ``unnamed``
    entries (the answer does not say they were stored) are retried too. ``throttling``:
    the codes that mean the service pushes back."""
    retry, rejected, throttled, reasons = list(unnamed), {}, False, []
    if retry:
        reasons.append(f"{len(retry)} entries missing from the answer")
    for failure in failures:
        reason = f"{failure.code}: {failure.message}" if failure.message else failure.code
        transient = failure.code in throttling or failure.code in RETRYABLE_CODES
        if failure.sender_fault and not transient:
            rejected[failure.index] = reason
            continue
        retry.append(failure.index)
        throttled = throttled or failure.code in throttling
        reasons.append(reason)
    return SubmitResult(
        retry=sorted(retry),
        rejected=rejected,
        throttled=throttled,
        reason=reasons[0] if reasons else None,
    )
