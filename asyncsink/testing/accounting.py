"""What the fault-injecting endpoint counts: the live ``Ledger`` and its ``FaultServerStats``.

An entry's identity is the value of its id field (``"id"`` unless configured); an entry
without that field is identified by its canonical JSON (keys sorted), and so is an id that
is itself a list or an object. Every application of an identity after its first counts as
one duplicate.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import orjson

__all__ = ["FaultServerStats", "Ledger", "entry_identity"]

_MISSING = object()


def entry_identity(entry: Any, id_field: str) -> Hashable:
    """The identity of ``entry`` for duplicate counting (see the module docstring)."""
    if isinstance(entry, dict):
        value = entry.get(id_field, _MISSING)
        if value is not _MISSING and not isinstance(value, dict | list):
            return value  # type: ignore[no-any-return]
        if value is not _MISSING:
            entry = value
    return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS).decode()


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultServerStats:
    """A snapshot of the endpoint's counters since start or the last ``reset``.

    Attributes:
        requests: ingest requests received (control requests are not counted).
        statuses: responses sent, by HTTP status.
        applied_requests: requests whose entries were applied (including those whose
            response was then dropped by a reset or a timeout after apply).
        entries_received: entries applied (stored), duplicates included.
        entries_rejected: entries answered with a failed item status and not stored.
        unique_ids: distinct entry identities applied.
        duplicates: applications of an identity beyond its first.
        replays: stored responses replayed for a repeated idempotency key.
        conflicts: 409 answers (the key's first request was still in flight).
        mismatches: 422 answers (the key was used before with a different body).
        resets: connections reset without a response.
        timeouts: requests left unanswered until the client gave up or ``hang_s`` passed.
        connections: connections accepted, control connections included.
        queue_waits_ms: with ``Faults.capacity``, how long each ingest request waited in
            line for a slot, in milliseconds, in the order they got one (empty without).
        max_waiting: with ``Faults.capacity``, the most requests waiting in line at once.
    """

    requests: int = 0
    statuses: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    applied_requests: int = 0
    entries_received: int = 0
    entries_rejected: int = 0
    unique_ids: int = 0
    duplicates: int = 0
    replays: int = 0
    conflicts: int = 0
    mismatches: int = 0
    resets: int = 0
    timeouts: int = 0
    connections: int = 0
    queue_waits_ms: tuple[float, ...] = ()
    max_waiting: int = 0

    def to_json(self) -> dict[str, Any]:
        """The snapshot as a JSON-ready dict (what ``GET /_control/stats`` returns)."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["statuses"] = {str(status): count for status, count in self.statuses.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultServerStats:
        """A snapshot from a dict as ``to_json`` makes it."""
        values = dict(data)
        statuses = {int(status): int(count) for status, count in values["statuses"].items()}
        values["statuses"] = MappingProxyType(dict(sorted(statuses.items())))
        values["queue_waits_ms"] = tuple(values.get("queue_waits_ms", ()))
        return cls(**values)


class Ledger:
    """The live counters and the record of applied entry identities (event-loop local).

    With ``keep_ids`` the identities are only appended as requests are applied and folded
    into the set of distinct ones when a snapshot is taken, which keeps that work off the
    request path; without it they go straight into the set and only distinct ones are kept.
    Either way ``duplicates == entries_received - unique_ids``.
    """

    def __init__(self, *, keep_ids: bool = True) -> None:
        self.keep_ids = keep_ids
        self.clear()

    def clear(self) -> None:
        """Forget everything counted so far."""
        self.requests = 0
        self.statuses: Counter[int] = Counter()
        self.applied_requests = 0
        self.entries_received = 0
        self.entries_rejected = 0
        self.replays = 0
        self.conflicts = 0
        self.mismatches = 0
        self.resets = 0
        self.timeouts = 0
        self.connections = 0
        self.queue_waits: list[float] = []  # seconds, one per request that took a slot
        self.waiting = 0
        self.max_waiting = 0
        self.ids: list[Hashable] = []
        self._seen: set[Hashable] = set()
        self._folded = 0

    def apply(self, identities: list[Hashable], rejected: int) -> None:
        """Record one applied request: the (hashable) identities stored, the count rejected."""
        self.applied_requests += 1
        self.entries_rejected += rejected
        self.entries_received += len(identities)
        if self.keep_ids:
            self.ids.extend(identities)
        else:
            self._seen.update(identities)

    def unique_ids(self) -> int:
        """How many distinct identities were applied."""
        if self._folded < len(self.ids):
            self._seen.update(itertools.islice(self.ids, self._folded, None))
            self._folded = len(self.ids)
        return len(self._seen)

    def snapshot(self) -> FaultServerStats:
        """The counters as a frozen ``FaultServerStats``."""
        unique = self.unique_ids()
        return FaultServerStats(
            requests=self.requests,
            statuses=MappingProxyType(dict(sorted(self.statuses.items()))),
            applied_requests=self.applied_requests,
            entries_received=self.entries_received,
            entries_rejected=self.entries_rejected,
            unique_ids=unique,
            duplicates=self.entries_received - unique,
            replays=self.replays,
            conflicts=self.conflicts,
            mismatches=self.mismatches,
            resets=self.resets,
            timeouts=self.timeouts,
            connections=self.connections,
            queue_waits_ms=tuple(wait * 1000 for wait in self.queue_waits),
            max_waiting=self.max_waiting,
        )
