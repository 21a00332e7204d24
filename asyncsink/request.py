"""What a sink sees of one request, and what it tells back.

While ``submit_request_entries`` runs, ``current_call()`` describes the request: its call
id, its stable idempotency key and the sequence number of each entry. A re-send of the
same call (after a timeout, a connection error, a 5xx, or on recovery of a PENDING call)
carries the same ``CallInfo``, so the destination can drop the duplicate.

A sink answers with the entries to retry (a subsequence of the request, in order), or
``None`` when all were accepted, or a ``SubmitResult`` when it knows more: which entries
to retry by index, which were rejected as bad records, whether the destination throttled.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import operator
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .entries.packed import PackedEntries

__all__ = ["CallInfo", "SubmitResult", "current_call", "idempotency_key"]

_NAMESPACE = uuid.UUID("6f1c7f2e-3b1a-5d6e-9a43-0c2f5b8e7d10").bytes


def idempotency_key(scope: str, call_id: int, content: bytes = b"") -> str:
    """A stable, opaque key for call ``call_id`` of ``scope`` (a name-based UUID).

    ``content`` (a digest of what the call carries) makes the key differ whenever the
    content differs, so a key is never reused for other entries, even for the same call
    of a scope whose records were purged and written anew.
    """
    name = f"{scope}#{call_id}"
    if content:
        name += "#" + hashlib.blake2b(content, digest_size=16).hexdigest()
    # str(uuid.uuid5(namespace, name)), spelled out: a third of its cost, once a request
    digest = bytearray(hashlib.sha1(_NAMESPACE + name.encode()).digest()[:16])
    digest[6] = digest[6] & 0x0F | 0x50  # version 5
    digest[8] = digest[8] & 0x3F | 0x80  # the RFC 4122 variant
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(frozen=True, slots=True)
class CallInfo:
    """One request: identical on every re-send of the same call.

    ``scope`` is the durable scope's name (``sink/[run/]batch/partition``) or, without
    durable records, a name unique to the writer instance. ``seqs[i]`` is the sequence
    number of the request's ``i``-th entry, in write order within the scope: a ``range``
    when they are consecutive (no object per entry), else a tuple. For a call of the
    durable records, ``pending_since`` is when it was first recorded, before it first
    left, and ``sent_again_at`` when it was last sent again, if it was (``time.time()``,
    recorded before it left): a reconciler learns from them from when and until when the
    call's entries could have landed.
    """

    call_id: int
    idempotency_key: str
    scope: str
    seqs: Sequence[int]
    pending_since: float | None = None
    sent_again_at: float | None = None

    @property
    def last_sent(self) -> float | None:
        """When the call last left (``sent_again_at``, else ``pending_since``)."""
        return self.sent_again_at if self.sent_again_at is not None else self.pending_since


_current: contextvars.ContextVar[CallInfo] = contextvars.ContextVar("asyncsink_call")


def current_call() -> CallInfo:
    """The request being submitted, inside ``submit_request_entries``.

    Raises:
        LookupError: called outside a request.
    """
    return _current.get()


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """A sink's detailed answer to a request.

    ``retry``: indices of entries that failed and should be sent again.
    ``rejected``: index -> reason, for entries the destination refused as malformed (bad
    records: dead-lettered or failing the task; never retried).
    ``throttled``: the failures were the destination pushing back (shrinks the window).
    ``retry_after``: the destination's hint, in seconds, before retrying.
    ``reason``: why the entries to retry failed (the destination's error for one of them,
    or a count of its error codes), for the writer's messages: the cause a
    ``DeliveryError`` shows when they run out of retries.
    ``detail``: anything to keep in the call's record (see ``recorded_results``).
    ``stale``: indices of entries the destination refused because it holds a newer
    version of them (a versioned write); they count as delivered, and as
    ``skipped_stale``, and are never retried.
    """

    retry: Sequence[int] = ()
    rejected: Mapping[int, str] = field(default_factory=dict)
    throttled: bool = False
    retry_after: float | None = None
    detail: Any = None
    reason: str | None = None
    stale: Sequence[int] = ()


def as_result(answer: object, entries: Sequence[object]) -> SubmitResult:
    """Normalise a sink's answer (``None``, a list of failed entries, a ``SubmitResult``).

    Failed entries are matched to the request by identity, in order, so equal entries at
    different positions are told apart; entries of ``PackedEntries``, built anew each
    time one is read, by their bytes, in order.

    Raises:
        TypeError: the answer is not one of the three forms, names entries that were not
            in the request (or not in the request's order), or is a ``SubmitResult``
            whose indexes are not those of the request's entries, or that names an entry
            both to retry and as rejected.
    """
    if answer is None:
        return _ALL_OK
    if isinstance(answer, SubmitResult):
        if _is_empty(answer.retry) and _is_empty(answer.rejected) and _is_empty(answer.stale):
            # Nothing to retry, nothing rejected (an empty list or tuple says so too).
            if isinstance(answer.rejected, Mapping):
                return answer
            return dataclasses.replace(answer, rejected={})
        return _checked(answer, len(entries))
    if isinstance(answer, Sequence) and not isinstance(answer, str | bytes):
        if not answer:
            return _ALL_OK
        retry = []
        position = 0
        packed = type(entries) is PackedEntries
        sent = list(entries) if packed else entries  # each packed entry built once
        same = operator.eq if packed else operator.is_
        for failed in answer:
            while position < len(sent) and not same(sent[position], failed):
                position += 1
            if position == len(sent):
                raise TypeError(
                    "submit_request_entries returned an entry that is not in the request "
                    "(return failed entries as the same objects, in request order)"
                )
            retry.append(position)
            position += 1
        return SubmitResult(retry=retry)
    raise TypeError(
        "submit_request_entries must return None, a sequence of failed entries or a "
        f"SubmitResult, not {type(answer).__name__}"
    )


def _checked(result: SubmitResult, count: int) -> SubmitResult:
    """``result`` with its indexes checked against a request of ``count`` entries (and
    made plain ints, ``rejected`` a dict)."""
    rejected = result.rejected
    if not isinstance(rejected, Mapping):
        raise TypeError(
            "SubmitResult.rejected must map entry indexes to reasons, "
            f"not {type(rejected).__name__}"
        )
    retry = _indexes(result.retry, count, "retry")
    refused = _indexes(rejected.keys(), count, "rejected")
    both = set(retry).intersection(refused)
    if both:
        raise TypeError(
            f"SubmitResult names entry {min(both)} both to retry and as rejected "
            "(an entry is either sent again or a bad record)"
        )
    stale = _indexes(result.stale, count, "stale")
    twice = set(stale).intersection([*retry, *refused])
    if twice:
        raise TypeError(
            f"SubmitResult names entry {min(twice)} as stale and to retry or as rejected "
            "(a stale entry is settled)"
        )
    return dataclasses.replace(
        result,
        retry=retry,
        rejected=dict(zip(refused, rejected.values(), strict=True)),
        stale=stale or result.stale,
    )


def integer(value: object) -> int | None:
    """``value`` as an ``int`` (a numpy integer too), or ``None`` when it is no integer
    (a ``bool`` is none either)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def _is_empty(values: object) -> bool:
    try:
        return len(values) == 0  # type: ignore[arg-type]
    except TypeError:  # no length: checked with the rest
        return False


def _indexes(values: object, count: int, what: str) -> list[int]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(
            f"SubmitResult.{what} must hold entry indexes, not be {type(values).__name__}"
        )
    indexes = []
    for value in values:
        index = integer(value)
        if index is None:
            raise TypeError(f"SubmitResult.{what} holds {value!r:.50}, not an entry index")
        if not 0 <= index < count:
            raise TypeError(
                f"SubmitResult.{what} holds index {index}, but the request has {count} "
                f"entries (indexes 0 to {count - 1})"
            )
        indexes.append(index)
    return indexes


_ALL_OK = SubmitResult()
