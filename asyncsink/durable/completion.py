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

The digest is the sum, modulo 2**64, of the CRC-32 of every entry the scope settled
(acknowledged, skipped as delivered before, or dead-lettered after the destination
rejected it), so it is summed from the CRCs the call records already hold, whatever order
the requests finish in. It says whether a replay brings the rows that were delivered: the
same rows in another order are the same delivery and pass; a changed, missing or extra
row does not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from ..stores.base import RecordStore, Scope
from .records import load_json_object

__all__ = [
    "CALL_LOG_PREFIXES",
    "SUMMARY_KEY",
    "ScopeDigest",
    "ScopeSummary",
    "complete_scopes",
]

SUMMARY_KEY = "summary"
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


async def complete_scopes(
    store: RecordStore, summaries: Iterable[ScopeSummary], *, completed_by: str = ""
) -> int:
    """Seal each summary's scope COMPLETED, keeping only its summary; return how many.
    ``completed_by`` names what completed them (kept in the summary, for the records CLI).

    Call it once Spark committed the work of those scopes, never from a task. Sealing
    fences any attempt of the scope that still runs (a zombie, a speculative copy).

    Raises:
        DurableError: the store cannot be written (the scopes stay replayable, call by
            call, so nothing is lost; the records are only larger than they need be).
    """
    count = 0
    for summary in summaries:
        puts = {SUMMARY_KEY: summary.encode(completed_by)}
        await store.seal(summary.scope, puts, drop_prefixes=CALL_LOG_PREFIXES)
        count += 1
    return count
