"""``FirehoseWriter``: delivers rows to an Amazon Data Firehose stream with PutRecordBatch.

Firehose does not deduplicate: it has no idempotency key, and the sink invents none. A
request whose answer was lost, or a call a retried task left without an answer, is sent
again, so delivery is at least once. The call records still skip every record Firehose
acknowledged, so a retried task or a replayed batch re-sends only what was in doubt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from asyncsink.encoding import JsonEntryEncoder
from asyncsink.request import SubmitResult

from ..aws.answers import EntryFailure, result_of
from ..aws.errors import THROTTLING_CODES
from ..aws.rows import RowJson, field_of, text_of
from ..aws.writer import AwsWriter
from ..registry import SinkEntry
from .options import FirehoseOptions

__all__ = ["FirehoseWriter", "create_writer", "read_answer"]

_THROTTLING = THROTTLING_CODES | {"ServiceUnavailableException"}
"""Firehose says ``ServiceUnavailableException`` when a stream's throughput is exceeded."""


class FirehoseWriter(AwsWriter[bytes]):
    """Writes Spark ``Row`` objects, dicts or other mappings to a Firehose stream.

    Each element becomes one record (see ``FirehoseOptions``); requests hold at most 500
    records and 4 MiB. Records that fail inside a request (their ``ErrorCode``) are
    retried on their own, and a throttle shrinks the in-flight window.

    Args:
        firehose: the stream and how rows become records.
        options: buffering hints and retry policy; the Firehose defaults if omitted.
        call_log: durable call records for this writer's scope.
        client: an aiobotocore Firehose client to use instead of the shared one.
    """

    sink_name = "firehose"
    service = "firehose"
    kind = "Firehose stream"
    hints = {
        "ResourceNotFoundException": "the Firehose stream does not exist in this account "
        "and region; check deliveryStreamName and region",
        "AccessDeniedException": "the credentials may not call firehose:PutRecordBatch on "
        "this stream",
        "InvalidArgumentException": "the request is malformed (a record beyond its limits?)",
        "InvalidKMSResourceException": "the stream's KMS key cannot be used",
    }

    def __init__(self, firehose: FirehoseOptions, **kwargs: Any) -> None:
        super().__init__(firehose, **kwargs)
        self.firehose = firehose
        self._json = JsonEntryEncoder(firehose.contract)
        self._rows = RowJson(firehose.contract)
        self._end = b"\n" if firehose.append_newline else b""

    def destination_name(self) -> str:
        """The stream's name."""
        return self.firehose.delivery_stream_name

    def convert(self, element: Any) -> bytes:
        """The record for a ``Row``, dict or mapping (see ``FirehoseOptions``)."""
        field = self.firehose.payload_field
        if field is None:
            return self._json(element) + self._end
        _, fields = self._rows(element)
        return text_of(field_of(fields, field, "payload")).encode() + self._end

    def entry_size(self, entry: bytes) -> int:
        """The record's data in bytes, as Firehose counts it against its limits."""
        return len(entry)

    def entry_sizes(self, entries: list[bytes]) -> list[int]:
        return list(map(len, entries))

    async def submit_request_entries(self, entries: list[bytes]) -> SubmitResult:
        """One PutRecordBatch request; records that failed in it are returned by index.

        Raises:
            ThrottledError, RetryableError, FatalError: the whole request failed.
        """
        answer = await self._call(
            "put_record_batch",
            DeliveryStreamName=self.firehose.delivery_stream_name,
            Records=[{"Data": entry} for entry in entries],
        )
        return read_answer(answer, len(entries))


def read_answer(answer: Mapping[str, Any], count: int) -> SubmitResult:
    """Which records of a request of ``count`` to retry: those with an ``ErrorCode``; all
    of them when the answer has not one result per record (it cannot say which were
    stored)."""
    results = answer.get("RequestResponses")
    if not isinstance(results, list) or len(results) != count:
        return result_of((), range(count))
    failures = [
        EntryFailure(index, str(item["ErrorCode"]), str(item.get("ErrorMessage") or ""))
        for index, item in enumerate(results)
        if isinstance(item, Mapping) and item.get("ErrorCode")
    ]
    return result_of(failures, throttling=_THROTTLING)


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> FirehoseWriter:
    """A ``FirehoseWriter`` from one mapping of Spark options (its own and ``SinkOptions``).

    Raises:
        OptionError: an unknown option, an invalid value, or a value above a limit.
    """
    entry = SinkEntry("firehose", FirehoseWriter, FirehoseOptions)
    return cast(FirehoseWriter, entry.build(options, **kwargs))
