"""The call log: a writer's durable memory of its requests, per scope.

Write order, which decides what can be recovered:

1. ``new_call`` makes the call's PENDING record; the writer ``sync()``s it to the store
   before the request leaves (several calls' records share one store write).
2. After the response, the terminal record (SUCCEEDED with the acknowledged entries, or
   FAILED) overwrites that slot; it is written with the next sync.
3. Only the driver marks the scope COMPLETED, once Spark committed its work
   (``completion.complete_scopes`` with the ``summary()`` the task returned): a writer
   that reached the end of its input cannot know that the input was whole.

Every store write is conditional on the epoch this attempt took the scope with, so an
attempt that was taken over (a zombie, a speculative copy) is fenced and stops.

On a re-execution of the scope, ``open`` reads what the earlier attempts left: a
COMPLETED scope sends nothing (its input is still digested and must match what was
completed); PENDING (and FAILED) calls are settled first by the writer's reconciler or,
without one, re-sent as the same call with the same idempotency key once their entries
have been written again; acknowledged entries are skipped as they are written. Each
replayed entry is checked against its recorded CRC: a mismatch means the input changed, so
that record and every later one are dropped (the trimmed state is persisted at once) and
the entry is sent as new. Entries checked before the mismatch matched what was delivered,
so they stay delivered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from typing import Any

import anyio
import orjson

from ..errors import (
    CorruptRecordError,
    DurableError,
    ReplayMismatchError,
    WriterStateError,
    describe,
)
from ..request import CallInfo, idempotency_key
from ..stores.base import RecordStore, Scope
from .completion import (
    CALL_LOG_PREFIXES,
    SUMMARY_KEY,
    CompletedBatch,
    ScopeDigest,
    ScopeSummary,
    complete_scopes,
)
from .recorder import CallLookUp, Released, Serializer
from .records import (
    FAILED,
    PENDING,
    SUCCEEDED,
    CallRecord,
    crc_of,
    decode_record,
    encode_record,
)

__all__ = ["CallLog"]

log = logging.getLogger("asyncsink.durable")

_META_KEY = "meta"
_CALL_PREFIX = "call:"


def _key(call_id: int) -> str:
    return f"{_CALL_PREFIX}{call_id:010d}"


def _is_call_log_key(key: str) -> bool:
    return key.startswith(CALL_LOG_PREFIXES)


class CallLog:
    """Durable call records of one scope, for one writer (a ``CallRecorder``).

    Args:
        store: where records live.
        scope: the Spark task's share of work this writer delivers.
    """

    def __init__(self, store: RecordStore, scope: Scope) -> None:
        self.store = store
        self.scope = scope
        self.persistent = True
        self.ahead = store.records_ahead  # whether the writer records requests ahead
        self.scope_name = str(scope)
        self.epoch = 0
        self.completed = False
        self.entries = 0  # entries written in the scope, known once the input ended
        self.digest = ScopeDigest()
        self._completed_as: tuple[int, str] | None = None
        self.recovering = False
        self.next_call_id = 0
        self.skipped = 0
        self.reconciled = 0
        self.resent_calls = 0
        self._serialize: Serializer = bytes
        self._records: dict[int, CallRecord] = {}
        self._crc_at: dict[int, int] = {}  # seq -> recorded CRC, for entries being replayed
        self._done: dict[int, int] = {}  # seq -> call id, for delivered entries
        self._resend: dict[int, int] = {}  # seq -> call id, for calls to re-send
        self._collected: dict[int, dict[int, Released]] = {}
        self._released: list[Released] = []
        self._rejected: list[tuple[int, Any, str]] = []  # replayed dead letters, with reasons
        self._resends: list[tuple[CallInfo, list[Released]]] = []
        self._requeued: set[int] = set()  # calls of earlier attempts re-sent whole
        self._queue: dict[str, bytes] = {}
        self._deletes: set[str] = set()
        self._queued = 0
        self._durable = 0
        self._writing: anyio.Event | None = None
        self._broken: BaseException | None = None
        self._opened = False

    def statistics(self) -> dict[str, int]:
        return {
            "skipped": self.skipped,
            "reconciled": self.reconciled,
            "resent_calls": self.resent_calls,
        }

    # ------------------------------------------------------------------ opening

    async def open(self, serialize: Serializer, reconcile: CallLookUp) -> None:
        """Take the scope (bumping its epoch) and plan the recovery of earlier attempts.

        Raises:
            CorruptRecordError: a stored record cannot be decoded (scope, call, reason).
            ReplayMismatchError: the scope is new to a batch that was completed without it.
            DurableError: the store cannot be reached.
            WriterStateError: a writer opened this call log already: its records, epoch
                and digest are that writer's (each attempt takes a ``CallLog`` of its own).
        """
        if self._opened:
            raise WriterStateError(
                f"{self.scope}: this CallLog was opened by a writer already; give each "
                "writer, and each attempt, a CallLog of its own (the same store and scope)"
            )
        self._opened = True
        self._serialize = serialize
        state = await self.store.take(self.scope)
        self.epoch = state.epoch
        if state.completed:
            self.completed = True
            self._completed_as = self._decode_summary(state.records.get(SUMMARY_KEY))
            log.info("%s: completed by an earlier run; nothing will be sent", self.scope)
            return
        if self.scope.partition_id > 0 and not any(map(_is_call_log_key, state.records)):
            # A new scope: unless its batch was completed without it. Checked before
            # anything happens in the scope (a dead letter, a durable call of the task).
            batch = await CompletedBatch.of(self.store, self.scope)
            if batch is not None:
                raise ReplayMismatchError(self.scope, None, None, partitions=batch.partitions)
        next_call = 0
        for key, data in state.records.items():
            if key == _META_KEY:
                next_call = max(next_call, self._decode_meta(data))
                continue
            if not key.startswith(_CALL_PREFIX):
                continue  # another user of the scope (durable calls) owns this record
            try:
                record = decode_record(data)
            except ValueError as exc:
                raise CorruptRecordError(self.scope, key, str(exc)) from exc
            if key != _key(record.call_id):
                raise CorruptRecordError(self.scope, key, f"holds call {record.call_id}")
            self._records[record.call_id] = record
            next_call = max(next_call, record.call_id + 1)
        self.next_call_id = next_call
        for record in sorted(self._records.values(), key=lambda r: r.call_id):
            self._crc_at.update(zip(record.seqs, record.crcs, strict=True))
            if record.status == SUCCEEDED:
                for seq in record.acked:
                    self._done[seq] = record.call_id
                for seq in record.rejected:
                    self._done[seq] = record.call_id
            else:
                await self._settle_unfinished(record, reconcile)
        self.recovering = bool(self._done or self._resend)
        if self._records:
            log.info(
                "%s: recovering %d calls (%d entries delivered, %d to re-send as before)",
                self.scope,
                len(self._records),
                len(self._done),
                len(self._resend),
            )
        await self.sync()

    def _decode_summary(self, data: bytes | None) -> tuple[int, str] | None:
        if data is None:
            return None  # completed before summaries were kept: nothing to compare
        try:
            return ScopeSummary.decode(data)
        except ValueError as exc:
            raise CorruptRecordError(self.scope, SUMMARY_KEY, str(exc)) from exc

    def _decode_meta(self, data: bytes) -> int:
        try:
            return int(orjson.loads(data)["next_call"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CorruptRecordError(self.scope, _META_KEY, repr(exc)) from exc

    async def _settle_unfinished(self, record: CallRecord, reconcile: CallLookUp) -> None:
        info = self._info(record)
        try:
            held = await reconcile(info)
        except Exception as exc:
            log.warning("%s: reconciling call %d failed: %s", self.scope, record.call_id, exc)
            record.status = FAILED
            record.error = f"reconcile failed: {type(exc).__name__}: {exc}"
            self._put(record)
            return
        if held is None:
            for seq in record.seqs:
                self._resend[seq] = record.call_id
            return
        self.reconciled += 1
        record.status = SUCCEEDED
        record.acked = frozenset(held).intersection(record.seqs)
        for seq in record.acked:
            self._done[seq] = record.call_id
        self._put(record)

    def _crc(self, entry: Any) -> int:
        """CRC-32 of an entry: of the entry itself when it is bytes-like, else of
        ``serialize_entry(entry)``."""
        try:
            return crc_of(entry)
        except TypeError:
            return crc_of(self._serialize(entry))

    def _info(self, record: CallRecord) -> CallInfo:
        """The call as the destination sees it; its key covers the entries' digests, so
        the same call number never carries other content under the same key."""
        content = record.fixed_fields()[1].encode()
        key = idempotency_key(self.scope_name, record.call_id, content)
        scope, seqs = self.scope_name, record.seqs  # a range or a tuple already
        return CallInfo(record.call_id, key, scope, seqs, record.started_at, record.sent_at)

    # ------------------------------------------------------------------ digest

    def skip_completed(self, entries: Sequence[Any], count: int | None = None) -> None:
        """``count`` elements (default: one per entry) of a completed scope: not sent; their
        ``entries`` are digested, to compare with what was completed at the end."""
        self.skipped += len(entries) if count is None else count
        try:
            self.digest.add(map(crc_of, entries))  # entries that are bytes already
        except TypeError:
            self.digest.add(map(self._crc, entries))

    def summary(self) -> ScopeSummary:
        """What this attempt was given: for the driver to complete the scope with."""
        return ScopeSummary(self.scope, self.entries, self.digest.hexdigest())

    # ------------------------------------------------------------------ replay

    def admit(self, seq: int, entry: Any, size: int, now: float) -> bool:
        """Route a replayed entry: ``True`` if the log took it (already delivered, or
        held for the re-send of its call), ``False`` if the writer should send it as new."""
        call_id = self._done.pop(seq, None)
        resend = False
        if call_id is None:
            call_id = self._resend.pop(seq, None)
            resend = call_id is not None
        if call_id is None:
            return False
        record = self._records[call_id]
        crc = self._crc(entry)
        if self._crc_at[seq] != crc:
            self._diverged(record, seq)
            self._released.append((seq, entry, size))
        elif resend:
            collected = self._collected.setdefault(call_id, {})
            collected[seq] = (seq, entry, size)
            if len(collected) == len(record.seqs):
                del self._collected[call_id]
                parts = [collected[s] for s in record.seqs]
                self._resends.append((self._info(record), parts))
                self._requeued.add(call_id)
        else:
            reason = record.rejected.get(seq)
            if reason is None:
                self.skipped += 1
            else:
                self._rejected.append((seq, entry, reason))
            self.digest.add((crc,))
        self.recovering = bool(self._done or self._resend)
        return True

    def take_rejected(self) -> list[tuple[int, Any, str]]:
        rejected, self._rejected = self._rejected, []
        return rejected

    def _diverged(self, record: CallRecord, seq: int) -> None:
        # Calls already re-sent whole matched entry by entry: they stay.
        dropped = [
            r
            for r in self._records.values()
            if r.call_id >= record.call_id and r.call_id not in self._requeued
        ]
        log.warning(
            "%s: entry %d differs from what call %d sent: the input changed since the "
            "earlier attempt (Spark replays must be deterministic); dropping call %d and "
            "the %d calls after it and sending their entries again",
            self.scope,
            seq,
            record.call_id,
            record.call_id,
            len(dropped) - 1,
        )
        for dead in dropped:
            del self._records[dead.call_id]
            self._deletes.add(_key(dead.call_id))
            self._queue.pop(_key(dead.call_id), None)
            for s in dead.seqs:
                if self._done.get(s) == dead.call_id:
                    del self._done[s]
                if self._resend.get(s) == dead.call_id:
                    del self._resend[s]
            for part in self._collected.pop(dead.call_id, {}).values():
                self._released.append(part)
        self._queued += 1
        self.needs_sync = True

    needs_sync = False

    def settle_reconciled(
        self, call: CallInfo, held: Collection[int] | None, *, earlier: bool = True
    ) -> frozenset[int]:
        """A call left without an answer, by an earlier attempt (``earlier``) or by this
        one, was looked up at the destination with its entries: ``held`` are the sequence
        numbers it holds (``None``: it cannot tell, and the call is re-sent as it was, and
        counted so). Returns the entries now known as delivered (counted as skipped when
        an earlier attempt delivered them)."""
        if held is None:
            self.resent_calls += 1
            return frozenset()
        record = self._records[call.call_id]
        acked = frozenset(held).intersection(record.seqs)
        record.status = SUCCEEDED
        record.acked = acked
        self._put(record)
        self._digest_settled(record, acked)
        if earlier:
            self.skipped += len(acked)
        self.reconciled += 1
        return acked

    def recorded_results(self) -> list[Any]:
        """The result details the destination gave for the acknowledged calls of this scope
        (of earlier attempts and this one), in call order; for a reconciler."""
        return [
            record.result
            for _, record in sorted(self._records.items())
            if record.status == SUCCEEDED and record.result is not None
        ]

    def take_released(self) -> tuple[list[Released], list[tuple[CallInfo, list[Released]]]]:
        """Entries to send as new, and whole calls to re-send as they were."""
        released, resends = self._released, self._resends
        self._released, self._resends = [], []
        return released, resends

    def finish_input(self, entries: int) -> None:
        """The input ended after ``entries`` entries: calls whose entries did not all come
        back are sent anew.

        Raises:
            ReplayMismatchError: the scope was completed with other input.
        """
        self.entries = entries
        if self.completed:
            self._check_replay()
            return
        for call_id, collected in self._collected.items():
            log.warning(
                "%s: only %d of the %d entries of call %d were written again; the input "
                "changed since the earlier attempt; sending them in new calls",
                self.scope,
                len(collected),
                len(self._records[call_id].seqs),
                call_id,
            )
            self._released.extend(collected.values())
            self._deletes.add(_key(call_id))
            del self._records[call_id]
        self._collected.clear()
        if self._done:
            log.warning(
                "%s: %d entries delivered by an earlier attempt were not written again",
                self.scope,
                len(self._done),
            )
        self._done.clear()
        self._resend.clear()
        self.recovering = False

    def _check_replay(self) -> None:
        if self._completed_as is None:
            return
        got = (self.entries, self.digest.hexdigest())
        if got != self._completed_as:
            raise ReplayMismatchError(self.scope, self._completed_as, got)

    # ------------------------------------------------------------------ recording

    def new_call(self, seqs: Sequence[int], entries: Sequence[Any]) -> CallInfo:
        """Number a new request and queue its PENDING record."""
        call_id = self.next_call_id
        self.next_call_id += 1
        if type(seqs) is not range:
            seqs = tuple(seqs)
        try:
            crcs = tuple(map(crc_of, entries))  # entries that are bytes already
        except TypeError:
            crcs = tuple(self._crc(entry) for entry in entries)
        record = CallRecord(call_id, PENDING, seqs, crcs, started_at=time.time())
        self._records[call_id] = record
        self._put(record)
        self._queue[_META_KEY] = orjson.dumps({"next_call": self.next_call_id})
        return self._info(record)

    def sending_again(self, call: CallInfo) -> CallInfo:
        """``call`` is about to be sent again (after a failed send, or by a later attempt):
        its record notes when, before it leaves, so that whoever settles it later knows
        until when it could still land. Returns the call with that time."""
        record = self._records.get(call.call_id)
        if record is None or record.status == SUCCEEDED:
            return call
        record.sent_at = time.time()
        self._put(record)
        return self._info(record)

    def record_result(
        self, call: CallInfo, acked: Collection[int], rejected: dict[int, str], detail: Any
    ) -> None:
        record = self._records[call.call_id]
        record.status = SUCCEEDED
        # Every entry acknowledged, the writer's own range of them: no set to build.
        everything = type(acked) is range and len(acked) == len(record.seqs)
        record.acked = acked if everything else frozenset(acked)
        record.rejected = rejected
        record.result = detail
        self._put(record)
        if len(record.acked) + len(rejected) == len(record.seqs):
            self.digest.add(record.crcs)  # all settled
        else:
            self._digest_settled(record, frozenset(record.acked).union(rejected))

    def _digest_settled(self, record: CallRecord, settled: frozenset[int]) -> None:
        """Count the entries of ``record`` that ``settled`` names into the scope's digest."""
        if len(settled) == len(record.seqs):
            self.digest.add(record.crcs)
        else:
            crcs = zip(record.seqs, record.crcs, strict=True)
            self.digest.add(crc for seq, crc in crcs if seq in settled)

    def record_failure(self, call: CallInfo, error: BaseException | None) -> None:
        record = self._records[call.call_id]
        record.status = FAILED
        record.error = describe(error)[:2000] if error else "failed"
        self._put(record)

    @property
    def changes(self) -> int:
        """How many changes were queued so far: a mark for ``sync(through=...)``."""
        return self._queued

    def _put(self, record: CallRecord) -> None:
        key = _key(record.call_id)
        self._queue[key] = encode_record(record)
        self._deletes.discard(key)
        self._queued += 1

    async def sync(self, through: int | None = None) -> None:
        """Make every record queued so far durable (one store write for all of them); with
        ``through``, those queued until ``changes`` reached it (and those queued since,
        when a store write is needed anyway).

        Raises:
            FencedError: another attempt took the scope.
            DurableError: the store failed; the log is unusable from then on.
        """
        target = self._queued if through is None else through
        while self._durable < target:
            if self._broken is not None:
                raise self._broken
            if self._writing is not None:
                await self._writing.wait()
                continue
            self._writing = writing = anyio.Event()
            puts, deletes, version = self._queue, self._deletes, self._queued
            self._queue, self._deletes = {}, set()
            try:
                await self.store.put(self.scope, self.epoch, puts, deletes)
            except DurableError as exc:
                self._broken = exc
                raise
            except Exception as exc:
                self._broken = DurableError(f"{self.scope}: writing call records failed: {exc}")
                raise self._broken from exc
            except BaseException:
                # Cancelled mid-write: keep what was not known to be written, newer first.
                self._queue = {**puts, **self._queue}
                self._deletes |= deletes - self._queue.keys()
                raise
            else:
                self._durable = version
                self.needs_sync = False
            finally:
                self._writing = None
                writing.set()

    async def complete(self) -> None:
        """Seal the scope COMPLETED with this attempt's summary, keeping only the summary.

        For code that drives a writer itself, outside Spark, and knows its input was whole
        once the writer closed; the Spark entry points leave this to the driver, after
        Spark committed.

        Raises:
            FencedError: another attempt took the scope.
            DurableError: the store cannot be written.
        """
        await self.sync()
        await complete_scopes(self.store, [self.summary()], completed_by="CallLog.complete")
        self.completed = True
