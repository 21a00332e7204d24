"""Settling a lost attempt's calls by reading the shards: each row stored once in Kinesis.

PutRecords takes no idempotency key. When a task dies with requests in flight (killed,
its machine lost, its answer never read), the durable call records know which calls it
left PENDING and, once the retry was given their rows again, which records they carried;
only the stream knows whether they landed. ``StreamScan`` finds out by reading it:

1. **Wait** until the lost request can no longer land: the time the call last left (its
   PENDING record, or its last re-send) plus ``requestTimeoutMs`` (the writer gives up on
   a request by then) plus
   ``reconcileClockSkewMs`` (that time comes from another machine's clock). Logged at
   INFO. Calls of one retry are looked up together, in one scan.
2. **Find the shards** the call's records map to: ListShards gives each shard's hash key
   range and parents; a record's explicit hash key, else the MD5 of its partition key,
   picks its shard. A record may have landed in a shard that closed since (a split or a
   merge), so closed shards are read too, unless a child of theirs already took records
   of this scope before the lost call was sent.
3. **Read each shard** from a safe starting point: just after the highest sequence number
   this scope recorded as acknowledged in that shard by calls answered *before the lost
   call was first sent* (each call's result detail keeps, per shard, its highest
   sequence number and how many calls had been sent by then; calls answered later may
   have landed after the lost one), else at the time the call was recorded minus the
   clock-skew margin (AT_TIMESTAMP). Read up to the stream's tip, or until records
   arrive after the lost request could last have landed, whichever comes first; stop
   early once every record looked for in that shard was found.
4. **Match** the call's records by partition key and data (compared whole; the shard's
   hash key range stands for the explicit hash key, which GetRecords does not return),
   counting multiplicity: two identical records in the call need two in the stream.
   Found: acknowledged. Not found in a shard read to its end: sent again, in a new call.

The one assumption: a record with the same partition key and data written into the same
shard inside that window by someone else (another producer, or this job for a duplicate
row of its input) is indistinguishable from the lost one, and is taken for it; the row
is then not sent again. Make rows unique if they can repeat: include an id or an event
time in the data, or use such a field as ``partitionKeyField``.

**Bounded cost.** A scan stops at ``reconcileTimeBudgetMs`` (after the wait) or once it
read ``reconcileByteBudget`` bytes; it keeps to GetRecords' limits (5 calls a second per
shard, shared with the stream's consumers; pages of at most 10,000 records) and backs off
when throttled. A call the scan could not settle is re-sent as it was (at least once: its
records may then be stored twice), logged at WARNING, and counted in the writer's
statistics as re-sent unsettled (``resent_calls``); settled calls count as
``reconciled``. Each scan's cost is kept in ``StreamScan.reports``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from botocore.exceptions import ClientError

from asyncsink.request import CallInfo

from .converter import KinesisEntry
from .errors import translate_error
from .shards import ReadCost, Shard, ShardCursor, error_code, hash_key, list_shards

__all__ = [
    "ReconcileSettings",
    "ScanReport",
    "StreamScan",
    "acknowledged_detail",
    "safe_starts",
]

log = logging.getLogger("asyncsink.kinesis")

_MAX_SHARDS_AT_ONCE = 8
_FIRST_PAGE = 500  # records; each later page of a shard is twice as large (up to 10,000)


def acknowledged_detail(results: Sequence[Mapping[str, Any]], sent: int) -> dict[str, Any]:
    """A PutRecords answer's result detail for the call records: ``s`` maps each shard to
    the highest sequence number stored in it, ``n`` is how many calls had been sent (call
    ids below ``n``) when the answer came. ``results`` are the answer's ``Records``, read
    already (``asyncsink.sinks.kinesis.answers``): a result without ``ErrorCode`` holds both."""
    tops: dict[str, str] = {}
    for result in results:
        shard = result.get("ShardId")
        if shard is None:
            continue  # a failed record
        sequence = result["SequenceNumber"]
        top = tops.get(shard)
        # decimal numbers without leading zeros: longer is larger
        if top is None or (len(sequence), sequence) > (len(top), top):
            tops[shard] = sequence
    return {"n": sent, "s": tops}


def safe_starts(details: Sequence[Any], call_id: int) -> dict[str, str]:
    """Per shard, the highest sequence number acknowledged by a call answered before call
    ``call_id`` was first sent: the lost call's records can only come after it."""
    tops: dict[str, tuple[int, str]] = {}
    for detail in details:
        if not isinstance(detail, Mapping):
            continue
        sent, shards = detail.get("n"), detail.get("s")
        if type(sent) is not int or sent > call_id or not isinstance(shards, Mapping):
            continue
        for shard, sequence in shards.items():
            if isinstance(sequence, str) and sequence.isdigit():
                value = int(sequence)
                if shard not in tops or value > tops[shard][0]:
                    tops[shard] = (value, sequence)
    return {shard: sequence for shard, (_, sequence) in tops.items()}


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    """How long a lost request may still land, and what one scan may cost (seconds,
    bytes)."""

    request_timeout: float
    clock_skew: float
    time_budget: float
    byte_budget: int


@dataclass(slots=True)
class ScanReport:
    """What one scan looked for, found and cost. ``settled`` calls were answered from the
    stream; ``unsettled`` ones are re-sent as they were (``reason`` says why)."""

    calls: int
    records: int
    found: int = 0
    settled: int = 0
    unsettled: int = 0
    shards_listed: int = 0
    shards_read: int = 0
    waited_s: float = 0.0
    seconds: float = 0.0
    cost: ReadCost = field(default_factory=ReadCost)
    reason: str = ""


class _Lookup:
    """A call of a lost attempt, waiting to be looked up."""

    __slots__ = ("call", "done", "entries", "result", "since", "starts", "until")

    def __init__(
        self,
        call: CallInfo,
        entries: list[KinesisEntry],
        settings: ReconcileSettings,
        starts: dict[str, str],
    ) -> None:
        assert call.pending_since is not None
        self.call = call
        self.entries = entries
        self.starts = starts
        self.since = call.pending_since - settings.clock_skew  # its records arrived later
        last_sent = call.last_sent if call.last_sent is not None else call.pending_since
        self.until = last_sent + settings.request_timeout + settings.clock_skew
        self.result: set[int] | None = None
        self.done = False


class _Want:
    """A record of a lost call, looked for in the shards that cover its hash key."""

    __slots__ = ("found", "hash_key", "lookup", "seq", "shards")

    def __init__(self, lookup: _Lookup, seq: int, hash_key: int) -> None:
        self.lookup = lookup
        self.seq = seq
        self.hash_key = hash_key
        self.shards: list[str] = []  # the shards read for it
        self.found = False


class _Scan:
    """One scan over the shards for a batch of lookups."""

    def __init__(
        self, batch: list[_Lookup], report: ScanReport, settings: ReconcileSettings
    ) -> None:
        self.batch = batch
        self.report = report
        self.byte_budget = settings.byte_budget
        self.wanted: dict[tuple[str, bytes], list[_Want]] = {}
        self.wants: list[_Want] = []
        for lookup in batch:
            for seq, entry in zip(lookup.call.seqs, lookup.entries, strict=True):
                want = _Want(lookup, seq, hash_key(entry))
                self.wants.append(want)
                self.wanted.setdefault((entry.partition_key, entry.data), []).append(want)
        sizes = [entry.size for lookup in batch for entry in lookup.entries]
        self.mean_size = max(1, sum(sizes) // max(1, len(sizes)))
        # records that arrived later (by the stream's clock) cannot be the lost ones
        self.until = max(lookup.until for lookup in batch) + settings.clock_skew
        self.remaining: dict[str, int] = {}
        self.complete: set[str] = set()
        self.planned = False

    def plan(self, shards: list[Shard]) -> list[tuple[Shard, dict[str, Any]]]:
        """The shards to read, each with its starting point."""
        children: dict[str, list[Shard]] = {}
        for shard in shards:
            for parent in shard.parents:
                children.setdefault(parent, []).append(shard)
        plan = []
        for shard in shards:
            wants = [want for want in self.wants if shard.covers(want.hash_key)]
            if not wants or (shard.closed and self._closed_before(shard, wants, children)):
                continue
            for want in wants:
                want.shards.append(shard.shard_id)
            self.remaining[shard.shard_id] = len(wants)
            plan.append((shard, self._start(shard, {id(w.lookup): w.lookup for w in wants})))
        self.planned = True
        return plan

    def _closed_before(
        self, shard: Shard, wants: list[_Want], children: dict[str, list[Shard]]
    ) -> bool:
        """Whether the shard closed before every call looked for in it was sent: a
        descendant of it took records of this scope answered before each was."""
        lookups = {id(want.lookup): want.lookup for want in wants}.values()
        descendants: list[str] = []
        stack = [shard.shard_id]
        while stack:
            for child in children.get(stack.pop(), ()):
                descendants.append(child.shard_id)
                stack.append(child.shard_id)
        return bool(descendants) and all(
            any(d in lookup.starts for d in descendants) for lookup in lookups
        )

    @staticmethod
    def _start(shard: Shard, lookups: Mapping[int, _Lookup]) -> dict[str, Any]:
        starts = [lookup.starts.get(shard.shard_id) for lookup in lookups.values()]
        if all(start is not None for start in starts):
            return {"after": min((s for s in starts if s is not None), key=int)}
        return {"at_time": min(lookup.since for lookup in lookups.values())}

    def match(self, shard: Shard, record: Mapping[str, Any]) -> None:
        """Take ``record`` (read from ``shard``) for a wanted record it is identical to."""
        candidates = self.wanted.get((record["PartitionKey"], record["Data"]))
        if not candidates:
            return
        for index, want in enumerate(candidates):
            if not shard.covers(want.hash_key) or not self._could_be(want, shard, record):
                continue
            del candidates[index]
            want.found = True
            self.report.found += 1
            for shard_id in want.shards:
                self.remaining[shard_id] -= 1
            return

    @staticmethod
    def _could_be(want: _Want, shard: Shard, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` arrived where and when the lost call's record could have."""
        after = want.lookup.starts.get(shard.shard_id)
        if after is not None and int(record["SequenceNumber"]) <= int(after):
            return False
        return bool(record["ApproximateArrivalTimestamp"].timestamp() >= want.lookup.since)

    def results(self) -> None:
        """Settle each lookup: the records found, or ``None`` when a shard that could
        hold a record not found was not read to its end."""
        for lookup in self.batch:
            lookup.result, lookup.done = (set() if self.planned else None), True
        for want in self.wants:
            lookup = want.lookup
            if lookup.result is None:
                continue
            if want.found:
                lookup.result.add(want.seq)
            elif not self.complete.issuperset(want.shards):
                lookup.result = None
        for lookup in self.batch:
            if lookup.result is None:
                self.report.unsettled += 1
            else:
                self.report.settled += 1


class StreamScan:
    """Looks the calls of lost attempts up in the stream (see the module docstring).

    Args:
        client: returns the aiobotocore Kinesis client to read with.
        stream: how the API names the stream (``StreamName`` or ``StreamARN``).
        name: the stream as the user named it, for messages.
        settings: the wait and the budgets.
    """

    def __init__(
        self,
        client: Callable[[], Awaitable[Any]],
        stream: Mapping[str, str],
        name: str,
        settings: ReconcileSettings,
    ) -> None:
        self._client = client
        self._stream = dict(stream)
        self._name = name
        self.settings = settings
        self.reports: list[ScanReport] = []
        self._waiting: list[_Lookup] = []
        self._lock = anyio.Lock()

    async def held(
        self, call: CallInfo, entries: list[KinesisEntry], details: Sequence[Any]
    ) -> set[int] | None:
        """The sequence numbers of ``call``'s entries the stream holds, or ``None`` when it
        cannot tell within its budget (the call is then re-sent as it was). ``details``
        are the result details of the scope's acknowledged calls."""
        if call.pending_since is None:
            log.info("%s: call %d was recorded without a time; re-sending it as it was",
                     call.scope, call.call_id)  # fmt: skip
            return None
        lookup = _Lookup(call, entries, self.settings, safe_starts(details, call.call_id))
        self._waiting.append(lookup)
        async with self._lock:
            if not lookup.done:
                await self._settle_waiting()
        return lookup.result

    async def _settle_waiting(self) -> None:
        """Wait until the waiting calls can no longer land, then look them up in one scan
        (calls that come meanwhile join it)."""
        batch: list[_Lookup] = []
        started = time.monotonic()
        while True:
            batch.extend(self._waiting)
            self._waiting.clear()
            delay = max(lookup.until for lookup in batch) - time.time()
            if delay <= 0:
                break
            first = batch[0].call
            log.info(
                "%s: waiting %.1f s before reading Kinesis stream %r for %s left without an "
                "answer, until their requests can no longer land (requestTimeoutMs %d and "
                "reconcileClockSkewMs %d after they last left)",
                first.scope,
                delay,
                self._name,
                _calls(batch),
                round(self.settings.request_timeout * 1000),
                round(self.settings.clock_skew * 1000),
            )
            await anyio.sleep(delay)
        report = ScanReport(calls=len(batch), records=sum(len(lk.entries) for lk in batch))
        report.waited_s = time.monotonic() - started
        scan = _Scan(batch, report, self.settings)
        try:
            await self._scan(scan)
        finally:
            scan.results()
            self.reports.append(report)
        self._log(batch, report)

    async def _scan(self, scan: _Scan) -> None:
        report = scan.report
        started = time.monotonic()
        with anyio.move_on_after(self.settings.time_budget) as budget:
            try:
                client = await self._client()
                since = min(lookup.since for lookup in scan.batch)
                shards = await list_shards(client, self._stream, since, report.cost)
                report.shards_listed = len(shards)
                plan = scan.plan(shards)
                report.shards_read = len(plan)
                limiter = anyio.CapacityLimiter(_MAX_SHARDS_AT_ONCE)
                async with anyio.create_task_group() as tg:
                    for shard, start in plan:
                        tg.start_soon(self._read, client, scan, shard, start, limiter)
            except Exception as exc:
                report.reason = self._failure(exc)
        if budget.cancelled_caught and not report.reason:
            report.reason = f"reconcileTimeBudgetMs ({round(self.settings.time_budget * 1000)})"
        report.seconds = time.monotonic() - started

    async def _read(
        self,
        client: Any,
        scan: _Scan,
        shard: Shard,
        start: dict[str, Any],
        limiter: anyio.CapacityLimiter,
    ) -> None:
        """Read one shard until nothing more is looked for in it, its end or the tip,
        records that arrived too late to be the lost ones, or the byte budget."""
        report = scan.report
        async with limiter:
            try:
                await self._read_shard(client, scan, shard, start)
            except Exception as exc:
                report.reason = report.reason or self._failure(exc)

    async def _read_shard(
        self, client: Any, scan: _Scan, shard: Shard, start: dict[str, Any]
    ) -> None:
        report = scan.report
        cursor = ShardCursor(client, self._stream, shard.shard_id, report.cost, **start)
        # Lost records sit near the start: small pages first, then larger ones
        size = max(_FIRST_PAGE, 4 * scan.remaining[shard.shard_id])
        while scan.remaining[shard.shard_id] > 0:
            left = scan.byte_budget - report.cost.bytes
            if left <= 0:
                report.reason = report.reason or f"reconcileByteBudget ({scan.byte_budget})"
                return
            page = await cursor.next_page(min(size, left // scan.mean_size))
            size *= 2
            late = False
            for record in page.records:
                if record["ApproximateArrivalTimestamp"].timestamp() > scan.until:
                    late = True
                    break
                scan.match(shard, record)
            if late or page.at_end:
                break
        scan.complete.add(shard.shard_id)

    def _failure(self, exc: Exception) -> str:
        """Why reading failed, for the log; an exception that is not the stream's or the
        network's (a bug) is raised again.

        Raises:
            Exception: ``exc``, when it is neither.
        """
        if isinstance(exc, ClientError):
            return _client_error(exc)
        if translate_error(exc, self._name) is None:
            raise exc
        return f"{type(exc).__name__}: {exc}"

    def _log(self, batch: list[_Lookup], report: ScanReport) -> None:
        cost = report.cost
        spent = (
            f"{report.shards_read} of {report.shards_listed} shards read, {cost.get_records} "
            f"GetRecords calls, {cost.bytes:,} bytes in {report.seconds:.2f} s"
        )
        scope = batch[0].call.scope
        settled = [lookup for lookup in batch if lookup.result is not None]
        if settled:
            found = sum(len(lookup.result or ()) for lookup in settled)
            records = sum(len(lookup.entries) for lookup in settled)
            rest = f", the other {records - found} are sent again" if found < records else ""
            log.info(
                "%s: settled %s by reading Kinesis stream %r: %d of their %d records found "
                "there%s; %s",
                scope,
                _calls(settled),
                self._name,
                found,
                records,
                rest,
                spent,
            )
        unsettled = [lookup for lookup in batch if lookup.result is None]
        if unsettled:
            log.warning(
                "%s: could not settle %s by reading Kinesis stream %r (%s); each is re-sent "
                "as it was, so its records may be stored twice; %s",
                scope,
                _calls(unsettled),
                self._name,
                report.reason or "a shard could not be read to its end",
                spent,
            )


def _calls(lookups: list[_Lookup]) -> str:
    ids = sorted(lookup.call.call_id for lookup in lookups)
    shown = ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return f"call {shown}" if len(ids) == 1 else f"calls {shown}"


def _client_error(exc: ClientError) -> str:
    code = error_code(exc) or "an error"
    message = str(exc.response.get("Error", {}).get("Message") or "").strip()
    hint = ""
    if code in ("AccessDeniedException", "UnauthorizedOperation"):
        hint = "; reading needs kinesis:ListShards, GetShardIterator and GetRecords"
    operation = exc.operation_name or "a call"
    return f"{operation} failed with {code}{': ' + message if message else ''}{hint}"
