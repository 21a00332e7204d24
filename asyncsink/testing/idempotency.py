"""The endpoint's memory of idempotency keys (IETF httpapi draft "The Idempotency-Key HTTP
Header Field").

A key is recorded when its request starts being applied and completed with the response
the endpoint produced. A later request with the same key and the same body digest gets that
response replayed; one arriving while the first is still in flight gets 409 Conflict; one
with a different body gets 422 Unprocessable Content. Keys are kept in a bounded LRU.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["IdempotencyStore", "KeyRecord", "Verdict"]


class Verdict(enum.Enum):
    """What to do with a request that carries an idempotency key."""

    NEW = "new"
    REPLAY = "replay"
    CONFLICT = "conflict"
    MISMATCH = "mismatch"


@dataclass(slots=True)
class KeyRecord:
    """One key: the digest of its body and, once completed, the response produced."""

    digest: bytes
    status: int | None = None
    body: bytes | None = None

    @property
    def completed(self) -> bool:
        """Whether the request was applied and its response stored."""
        return self.status is not None


class IdempotencyStore:
    """Keys seen by the endpoint, at most ``capacity`` of them (least recently used go)."""

    def __init__(self, capacity: int = 1_000_000) -> None:
        if capacity < 1:
            raise ValueError(f"idempotency capacity must be >= 1, got {capacity!r}")
        self.capacity = capacity
        self._records: OrderedDict[str, KeyRecord] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: str) -> KeyRecord | None:
        """The record of ``key``, or ``None`` if unknown."""
        return self._records.get(key)

    def check(self, key: str, digest: bytes) -> tuple[Verdict, KeyRecord | None]:
        """Judge a request carrying ``key`` whose decompressed body has ``digest``."""
        record = self._records.get(key)
        if record is None:
            return Verdict.NEW, None
        self._records.move_to_end(key)
        if record.digest != digest:
            return Verdict.MISMATCH, record
        if not record.completed:
            return Verdict.CONFLICT, record
        return Verdict.REPLAY, record

    def begin(self, key: str, digest: bytes) -> None:
        """Mark ``key`` in flight: its request is being applied."""
        self._records[key] = KeyRecord(digest)
        self._records.move_to_end(key)
        while len(self._records) > self.capacity:
            self._records.popitem(last=False)

    def complete(self, key: str, digest: bytes, status: int, body: bytes) -> None:
        """Store the response of ``key``'s applied request, for replays."""
        self._records[key] = KeyRecord(digest, status, body)
        self._records.move_to_end(key)
        while len(self._records) > self.capacity:
            self._records.popitem(last=False)

    def abandon(self, key: str) -> None:
        """Forget an in-flight ``key`` whose request was never applied."""
        record = self._records.get(key)
        if record is not None and not record.completed:
            del self._records[key]

    def clear(self) -> None:
        """Forget every key."""
        self._records.clear()
