"""Call records: what the call log stores for each request, and how it is encoded.

A record is a JSON object (format version 2)::

    {"v": 2, "call": 17, "status": "SUCCEEDED",
     "seqs": [[0, 489], [977, 986]],        # entry sequence numbers, request order, ranges
     "crc": "<base64 of one CRC-32 per entry, big-endian>",   # the content digest
     "acked": [[0, 480], [482, 489]],       # what the destination acknowledged (true: all)
     "rejected": {"481": "mapping error"},  # dead-lettered bad records
     "result": ..., "error": "...",
     "t": 1763870000.123,                   # when the PENDING record was made (wall clock)
     "s": 1763870002.456}                   # when it was last sent again, if it was

``status`` is ``PENDING`` (written before the request leaves), ``SUCCEEDED`` (the
destination answered; ``acked`` says for which entries) or ``FAILED`` (out of retries,
or a reconciler failed). Format 1 records carry no ``status``: they read as SUCCEEDED
(every entry acknowledged) when they hold a ``result`` and FAILED when they hold an
``error``. Digests are per entry so a replay verifies each entry as it is written, with
nothing held back, whatever order the calls completed in.
"""

from __future__ import annotations

import base64
import math
import struct
import sys
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "FAILED",
    "FORMAT_VERSION",
    "PENDING",
    "SUCCEEDED",
    "CallRecord",
    "crc_of",
    "decode_record",
    "encode_record",
    "from_ranges",
    "load_json_object",
    "to_ranges",
]

FORMAT_VERSION = 2
PENDING = "PENDING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
_STATUSES = frozenset((PENDING, SUCCEEDED, FAILED))


try:  # the same CRC-32 as zlib's, about three times as fast on short entries
    from zlib_ng.zlib_ng import crc32 as crc_of
except ImportError:  # pragma: no cover - zlib-ng is a dependency; this keeps zlib's
    from zlib import crc32 as crc_of


def to_ranges(seqs: Iterable[int]) -> list[list[int]]:
    """Runs of consecutive numbers, in the given order: ``[3,4,5,9]`` -> ``[[3,5],[9,9]]``."""
    if type(seqs) is range and seqs.step == 1:
        return [[seqs.start, seqs.stop - 1]] if seqs else []
    ranges: list[list[int]] = []
    for seq in seqs:
        if ranges and ranges[-1][1] + 1 == seq:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    return ranges


def from_ranges(ranges: Iterable[Sequence[int]]) -> Iterator[int]:
    for start, end in ranges:
        yield from range(start, end + 1)


@dataclass(slots=True)
class CallRecord:
    """One request of a scope, as the call log knows it."""

    call_id: int
    status: str
    seqs: Sequence[int]  # a tuple, or a range for consecutive entries
    crcs: tuple[int, ...]
    acked: Collection[int] = frozenset()  # a frozenset, or the range of ``seqs``
    rejected: Mapping[int, str] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    started_at: float | None = None  # time.time() when the call was first recorded
    sent_at: float | None = None  # time.time() when it was last sent again, if it was
    _fixed: tuple[list[list[int]], str] | None = None  # seqs and crc, encoded once

    def fixed_fields(self) -> tuple[list[list[int]], str]:
        if self._fixed is None:
            crcs = array("I", self.crcs)  # 32-bit on every platform CPython runs on
            if sys.byteorder == "little":
                crcs.byteswap()
            crc = crcs.tobytes()
            self._fixed = (to_ranges(self.seqs), base64.b64encode(crc).decode())
        return self._fixed


def encode_record(record: CallRecord) -> bytes:
    seqs, crc = record.fixed_fields()
    body: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "call": record.call_id,
        "status": record.status,
        "seqs": seqs,
        "crc": crc,
    }
    if record.status != PENDING:
        everything = len(record.acked) == len(record.seqs)
        body["acked"] = True if everything else to_ranges(sorted(record.acked))
    if record.rejected:
        body["rejected"] = {str(seq): reason for seq, reason in record.rejected.items()}
    if record.result is not None:
        body["result"] = record.result
    if record.error is not None:
        body["error"] = record.error
    # Kept to the millisecond, each rounded the way that widens the window in which the
    # call could have landed: when it was first recorded down, when it was last sent up.
    if record.started_at is not None:
        body["t"] = math.floor(record.started_at * 1000) / 1000
    if record.sent_at is not None:
        body["s"] = math.ceil(record.sent_at * 1000) / 1000
    return orjson.dumps(body)


def load_json_object(data: bytes) -> dict[str, Any]:
    """The JSON object a stored record holds.

    Raises:
        ValueError: the bytes are not JSON, or not a JSON object.
    """
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    return body


def decode_record(data: bytes) -> CallRecord:
    """Decode a stored record (format 1 or 2).

    Raises:
        ValueError: the bytes are not a record this version can read (the message says why).
    """
    body = load_json_object(data)
    version = body.get("v", 1)
    if version not in (1, FORMAT_VERSION):
        raise ValueError(f"unknown format version {version!r}")
    try:
        seqs = tuple(from_ranges(body["seqs"]))
        raw = base64.b64decode(body["crc"], validate=True)
        crcs = struct.unpack(f">{len(raw) // 4}I", raw)
        if len(crcs) != len(seqs) or len(raw) % 4:
            raise ValueError(f"{len(seqs)} entries but {len(raw)} digest bytes")
        status = body.get("status")
        if status is None:  # format 1: the payload says how the call ended
            status = FAILED if "error" in body else SUCCEEDED
            acked = frozenset(seqs) if status == SUCCEEDED else frozenset()
        elif body.get("acked") is True:
            acked = frozenset(seqs)
        else:
            acked = frozenset(from_ranges(body.get("acked", ())))
        if status not in _STATUSES:
            raise ValueError(f"unknown status {status!r}")
        rejected = {int(seq): str(reason) for seq, reason in body.get("rejected", {}).items()}
        return CallRecord(
            call_id=int(body["call"]),
            status=status,
            seqs=seqs,
            crcs=crcs,
            acked=acked,
            rejected=rejected,
            result=body.get("result"),
            error=body.get("error"),
            started_at=float(body["t"]) if "t" in body else None,
            sent_at=float(body["s"]) if "s" in body else None,
        )
    except KeyError as exc:
        raise ValueError(f"missing field {exc.args[0]!r}") from None
    except (TypeError, struct.error, ValueError, base64.binascii.Error) as exc:  # type: ignore[attr-defined]
        raise ValueError(str(exc) or type(exc).__name__) from None
