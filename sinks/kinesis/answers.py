"""Reading a PutRecords answer: a record counts as stored only when its result says so.

Kinesis answers a PutRecords request with ``Records``, one result per record sent, in
order, and ``FailedRecordCount``. A result holds a ``SequenceNumber`` and a ``ShardId``
(stored) or an ``ErrorCode`` with an ``ErrorMessage`` (failed, to be sent again). Nothing
else is taken on trust: an answer without ``Records``, with more or fewer results than
records, with a result that has neither (or both), with fields of the wrong type, or with
a ``FailedRecordCount`` that disagrees with its results cannot say which records were
stored. That is a ``RetryableError``: the request is sent again (PutRecords has no
idempotency key, so a record an unreadable answer hid may be stored twice: the at least
once of the writer's docstring), and its message names the call and what was wrong,
never what the records hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from asyncsink.errors import RetryableError
from asyncsink.request import SubmitResult

from .errors import THROTTLING_CODES

__all__ = ["PutRecordsAnswer", "read_put_records"]

_EXPECTED_RECORD_CODES = THROTTLING_CODES | {"InternalFailure"}


class PutRecordsAnswer(NamedTuple):
    """What a PutRecords answer says: ``result`` is ``None`` when every record was
    stored; ``unexpected`` holds ``code: message`` of up to three records that failed
    with a code Kinesis does not document for records (they are retried too)."""

    result: SubmitResult | None
    unexpected: list[str]


def read_put_records(response: Any, sent: int, stream: str) -> PutRecordsAnswer:
    """The records of a request of ``sent`` records to ``stream`` to retry, from its
    answer.

    Raises:
        RetryableError: the answer does not say, record by record, which were stored.
    """
    records = response.get("Records") if isinstance(response, Mapping) else None
    if records is None:
        raise _untrusted(stream, sent, "Records is missing")
    if type(records) is not list:
        raise _untrusted(stream, sent, f"Records is of type {type(records).__name__}, not a list")
    if len(records) != sent:
        raise _untrusted(stream, sent, f"Records holds {len(records)} results")
    failed: list[int] = []
    for index, result in enumerate(records):
        if type(result) is dict and "ErrorCode" not in result:
            sequence = result.get("SequenceNumber")
            shard = result.get("ShardId")
            if type(sequence) is str and sequence and type(shard) is str and shard:
                continue
        problem = _result_problem(result)
        if problem:
            raise _untrusted(stream, sent, f"result {index} {problem}")
        if result.get("ErrorCode") is not None:
            failed.append(index)
    count = response.get("FailedRecordCount")
    if type(count) is not int:
        kind = "missing" if count is None else f"of type {type(count).__name__}, not a number"
        raise _untrusted(stream, sent, f"FailedRecordCount is {kind}")
    if count != len(failed):
        carry = f"{len(failed)} results carry an ErrorCode"
        raise _untrusted(stream, sent, f"FailedRecordCount is {count} but {carry}")
    if not failed:
        return PutRecordsAnswer(None, [])
    return _partial_failure(records, failed)


def _result_problem(result: Any) -> str:
    """What is wrong with a result; ``""`` when it says plainly that its record was
    stored or that it failed."""
    if not isinstance(result, Mapping):
        return f"is of type {type(result).__name__}, not an object"
    code = result.get("ErrorCode")
    sequence = result.get("SequenceNumber")
    shard = result.get("ShardId")
    if code is not None:
        if sequence is not None:
            return "has both a SequenceNumber and an ErrorCode"
        return _text_problem("ErrorCode", code)
    if sequence is None:
        if shard is None:
            return "has neither a SequenceNumber nor an ErrorCode"
        return "has a ShardId without a SequenceNumber"
    if shard is None:
        return "has a SequenceNumber without a ShardId"
    return _text_problem("SequenceNumber", sequence) or _text_problem("ShardId", shard)


def _text_problem(name: str, value: Any) -> str:
    if type(value) is not str:
        return f"has {name} of type {type(value).__name__}, not text"
    return "" if value else f"has an empty {name}"


def _partial_failure(records: list[Mapping[str, Any]], failed: list[int]) -> PutRecordsAnswer:
    codes: dict[str, int] = {}
    throttled = False
    unexpected: list[str] = []
    for index in failed:
        result = records[index]
        code = result["ErrorCode"]
        codes[code] = codes.get(code, 0) + 1
        if code in THROTTLING_CODES:
            throttled = True
        elif code not in _EXPECTED_RECORD_CODES and len(unexpected) < 3:
            unexpected.append(f"{code}: {result.get('ErrorMessage', '')}")
    reason = ", ".join(f"{code} ({count})" for code, count in codes.items())
    retry = SubmitResult(
        retry=failed, throttled=throttled, detail={"errorCodes": codes}, reason=reason
    )
    return PutRecordsAnswer(retry, unexpected)


def _untrusted(stream: str, sent: int, problem: str) -> RetryableError:
    return RetryableError(
        f"Kinesis stream {stream!r}: PutRecords answered for {sent} records, but {problem}; "
        "cannot tell which records were stored"
    )
