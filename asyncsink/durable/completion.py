"""Completion: a scope is done only when Spark says its work committed.

A task cannot tell a real end of its input from one cut short upstream: when an operator
before the sink fails, the Python worker may see a clean end of its rows while the task
then fails in the JVM. So a writer never marks its own scope done. It reports a
``ScopeSummary`` (how many entries it was given and a digest of them) with its result,
and the driver, once Spark committed the batch or job (every partition of a
``foreachBatch`` returned, a data source's ``commit``), calls ``complete_scopes``: each
scope is sealed COMPLETED, its per-call records are dropped, and only the summary stays.

A replay of a sealed scope (Spark re-running a batch whose commit it did not record, a
re-run with the same ``batchId``) sends nothing; its writer still digests its input and
raises ``ReplayMismatchError`` when it differs from the summary.

A replay may also bring partitions the batch did not have (the same rows cut into more
partitions, or more rows): their scopes are new, with no summary to compare. So the
batch itself is sealed too: partition 0's scope, sealed last, keeps a ``batch`` record
with how many partitions the batch completed, and a writer whose scope is new reads it
before it sends anything (``CompletedBatch``): a new scope in a completed batch means the
input of a committed run changed. A replay in fewer partitions sends nothing its writers
could tell apart, so the driver compares the partitions that ran with the record before
it completes anything (``complete_batch``), and never lowers the recorded count. A batch
of no partitions is recorded as well (partition 0's scope, completed with no entries),
so rows written later under its ids are refused, not delivered.

The digest is the sum, modulo 2**64, of the CRC-32 of every entry the scope settled
(acknowledged, skipped as delivered before, or dead-lettered after the destination
rejected it), so it is summed from the CRCs the call records already hold, whatever order
the requests finish in. It says whether a replay brings the rows that were delivered: the
same rows in another order are the same delivery and pass; a changed, missing or extra
row does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from ..errors import CorruptRecordError, ReplayMismatchError
from ..stores.base import RecordStore, Scope
from .records import load_json_object

__all__ = [
    "BATCH_KEY",
    "CALL_LOG_PREFIXES",
    "SUMMARY_KEY",
    "CompletedBatch",
    "ScopeDigest",
    "ScopeSummary",
    "complete_batch",
    "complete_scopes",
]

SUMMARY_KEY = "summary"
BATCH_KEY = "batch"  # in partition 0's scope: the batch as a whole completed
CALL_LOG_PREFIXES = ("call:", "meta")  # what sealing drops; durable calls (fn:) stay
_MASK = (1 << 64) - 1


class ScopeDigest:
    """Order-independent digest of a scope's entries: the sum of their CRC-32s."""

    __slots__ = ("_sum",)

    def __init__(self) -> None:
        self._sum = 0

    def add(self, crcs: Iterable[int]) -> None:
        self._sum += sum(crcs)

    def hexdigest(self) -> str:
        return f"{self._sum & _MASK:016x}"


@dataclass(frozen=True, slots=True)
class ScopeSummary:
    """What a finished writer was given in its scope: the entry count and their digest.

    A task returns it to the driver, which seals the scope with it once Spark committed.
    """

    scope: Scope
    entries: int
    digest: str

    def encode(self, completed_by: str = "") -> bytes:
        body = {"v": 1, "entries": self.entries, "digest": self.digest}
        if completed_by:
            body["completed_by"] = completed_by
        return orjson.dumps(body)

    @staticmethod
    def decode(data: bytes) -> tuple[int, str]:
        """``(entries, digest)`` of a stored summary.

        Raises:
            ValueError: the bytes are not a summary (the message says why).
        """
        body = load_json_object(data)
        entries, digest = body.get("entries"), body.get("digest")
        if not isinstance(entries, int) or entries < 0 or not isinstance(digest, str):
            raise ValueError(f"not a scope summary: {body!r:.200}")
        return entries, digest


@dataclass(frozen=True, slots=True)
class CompletedBatch:
    """What partition 0's scope keeps of its batch once Spark committed it: how many
    partitions completed (numbered 0 to ``partitions - 1``)."""

    partitions: int

    def encode(self) -> bytes:
        return orjson.dumps({"v": 1, "partitions": self.partitions})

    @staticmethod
    def decode(data: bytes) -> CompletedBatch:
        """Raises:
        ValueError: the bytes are not a completed batch (the message says why)."""
        body = load_json_object(data)
        partitions = body.get("partitions")
        if type(partitions) is not int or partitions < 0:
            raise ValueError(f"not a completed batch: {body!r:.200}")
        return CompletedBatch(partitions)

    @staticmethod
    async def of(store: RecordStore, scope: Scope) -> CompletedBatch | None:
        """The completed batch ``scope`` belongs to, or ``None`` while it is not.

        Raises:
            CorruptRecordError: the batch record cannot be decoded.
        """
        first = dataclasses.replace(scope, partition_id=0)
        data = await store.load_record(first, BATCH_KEY)
        if data is None:
            return None
        try:
            return CompletedBatch.decode(data)
        except ValueError as exc:
            raise CorruptRecordError(first, BATCH_KEY, str(exc)) from exc


async def complete_scopes(
    store: RecordStore,
    summaries: Iterable[ScopeSummary],
    *,
    completed_by: str = "",
    whole_batches: bool = False,
) -> int:
    """Seal each summary's scope COMPLETED, keeping only its summary; return how many.
    ``completed_by`` names what completed them (kept in the summary, for the records CLI).

    Call it once Spark committed the work of those scopes, never from a task. Sealing
    fences any attempt of the scope that still runs (a zombie, a speculative copy).

    With ``whole_batches`` (Spark committed a batch: the summaries are every partition
    of theirs), partition 0's scope of each batch is sealed last, with the batch's
    ``CompletedBatch`` record.

    Raises:
        DurableError: the store cannot be written (the scopes stay replayable, call by
            call, so nothing is lost; the records are only larger than they need be).
    """
    summaries = list(summaries)
    batches: dict[Scope, int] = {}  # partition 0's scope of each batch: its partitions
    for summary in summaries if whole_batches else ():
        first = dataclasses.replace(summary.scope, partition_id=0)
        batches[first] = max(batches.get(first, 0), summary.scope.partition_id + 1)
    ordered = sorted(summaries, key=lambda summary: summary.scope in batches)
    for summary in ordered:
        puts = {SUMMARY_KEY: summary.encode(completed_by)}
        if summary.scope in batches:
            puts[BATCH_KEY] = CompletedBatch(batches[summary.scope]).encode()
        await store.seal(summary.scope, puts, drop_prefixes=CALL_LOG_PREFIXES)
    return len(ordered)


async def complete_batch(
    store: RecordStore,
    first: Scope,
    summaries: Iterable[ScopeSummary],
    *,
    partitions: int,
    completed_by: str = "",
) -> int:
    """Spark committed a batch of ``partitions`` partitions (``first`` is its partition
    0's scope; ``summaries`` those of its partitions): seal them as ``complete_scopes``
    does with ``whole_batches``; return how many scopes were sealed.

    A batch of no partitions seals ``first`` with no entries, so that a later write
    under the same ids is refused.

    Raises:
        ReplayMismatchError: the batch was completed before with another number of
            partitions (nothing is sealed, and the record keeps its count).
        DurableError: the store cannot be read or written.
    """
    recorded = await CompletedBatch.of(store, first)
    if recorded is not None and recorded.partitions != partitions:
        raise ReplayMismatchError(first, None, None, partitions=recorded.partitions, ran=partitions)
    ordered = sorted(summaries, key=lambda summary: summary.scope == first)
    if partitions == 0:
        ordered = [ScopeSummary(first, 0, ScopeDigest().hexdigest())]
    for summary in ordered:
        puts = {SUMMARY_KEY: summary.encode(completed_by)}
        if summary.scope == first:
            puts[BATCH_KEY] = CompletedBatch(partitions).encode()
        await store.seal(summary.scope, puts, drop_prefixes=CALL_LOG_PREFIXES)
    return len(ordered)
