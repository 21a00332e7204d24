"""``SqsWriter``: delivers rows to an Amazon SQS queue with SendMessageBatch.

On a FIFO queue each message's ``MessageDeduplicationId`` is derived, as the requests'
idempotency keys are, from the scope, the message's position in it (its entry sequence
number) and its content: a message sent again (a timeout, a retried failed entry, a
retried task settling a call left without an answer, a replayed batch) carries the same
id, whichever request carries it, and SQS drops what it already took within its 5-minute
deduplication window. After that window, a re-sent message is stored again. A standard
queue has no deduplication: at least once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from asyncsink.request import SubmitResult, current_call

from ..aws.answers import EntryFailure, result_of
from ..aws.rows import Number, RowJson, field_of, text_of
from ..aws.writer import AwsWriter
from ..registry import SinkEntry
from .options import SqsOptions

__all__ = ["SqsEntry", "SqsWriter", "create_writer"]


@dataclass(frozen=True, slots=True)
class SqsEntry:
    """One message: its body, its group id (FIFO) and its attributes."""

    body: str
    group_id: str | None = None
    attributes: Mapping[str, Mapping[str, str]] | None = None

    @property
    def size(self) -> int:
        """Body and attributes (names, types and values) in bytes, as SQS counts them."""
        size = len(self.body.encode())
        for name, value in (self.attributes or {}).items():
            size += len(name.encode()) + len(value["DataType"]) + len(value["StringValue"].encode())
        return size

    def to_request(self, index: int, dedup_id: str | None) -> dict[str, Any]:
        """The message as a SendMessageBatch ``Entries`` member."""
        request: dict[str, Any] = {"Id": str(index), "MessageBody": self.body}
        if self.group_id is not None:
            request["MessageGroupId"] = self.group_id
        if dedup_id is not None:
            request["MessageDeduplicationId"] = dedup_id
        if self.attributes:
            request["MessageAttributes"] = self.attributes
        return request


class SqsWriter(AwsWriter[SqsEntry]):
    """Writes Spark ``Row`` objects, dicts or other mappings to an SQS queue.

    Each element becomes one message (see ``SqsOptions``); requests hold at most 10
    messages and 1 MiB. Messages that fail inside a request are retried on their own;
    those SQS blames on the sender (``SenderFault``) are bad records.

    Args:
        sqs: the queue and how rows become messages.
        options: buffering hints and retry policy; the SQS defaults if omitted.
        call_log: durable call records for this writer's scope.
        client: an aiobotocore SQS client to use instead of the shared one.
    """

    sink_name = "sqs"
    service = "sqs"
    kind = "SQS queue"
    hints = {
        "AWS.SimpleQueueService.NonExistentQueue": "the queue does not exist in this account "
        "and region; check queueUrl/queueName and region",
        "QueueDoesNotExist": "the queue does not exist; check queueUrl/queueName and region",
        "AccessDenied": "the credentials may not call sqs:SendMessage on this queue",
        "AccessDeniedException": "the credentials may not call sqs:SendMessage on this queue",
        "KmsAccessDenied": "the credentials may not use the queue's KMS key",
        "InvalidParameterValue": "a message is malformed",
    }

    def __init__(self, sqs: SqsOptions, **kwargs: Any) -> None:
        super().__init__(sqs, **kwargs)
        self.sqs = sqs
        self._rows = RowJson(sqs.contract)
        self._queue_url = sqs.queue_url

    def destination_name(self) -> str:
        """The queue's name."""
        return self.sqs.queue

    def convert(self, element: Any) -> SqsEntry:
        """The message for a ``Row``, dict or mapping (see ``SqsOptions``)."""
        data, fields = self._rows(element)
        sqs = self.sqs
        body = data.decode()
        if sqs.body_field:
            body = text_of(field_of(fields, sqs.body_field, "body"))
        group = None
        if sqs.message_group_id_field:
            group = text_of(field_of(fields, sqs.message_group_id_field, "message group id"))
        attributes = {}
        for name in sqs.attribute_fields:
            value = fields.get(name)
            if value is not None:
                kind = "Number" if isinstance(value, Number) else "String"
                attributes[name] = {"DataType": kind, "StringValue": text_of(value)}
        return SqsEntry(body, group, attributes or None)

    def entry_size(self, entry: SqsEntry) -> int:
        """Body and attributes in bytes, as SQS counts a message against its limits."""
        return entry.size

    def serialize_entry(self, entry: Any) -> bytes:
        """The message's body (for content digests and dead letters)."""
        if isinstance(entry, SqsEntry):
            return entry.body.encode()
        return super().serialize_entry(entry)

    async def submit_request_entries(self, entries: list[SqsEntry]) -> SubmitResult:
        """One SendMessageBatch request; messages that failed in it are returned by index.

        Raises:
            ThrottledError, RetryableError, FatalError: the whole request failed.
        """
        call = current_call()
        fifo = self.sqs.fifo
        batch = [
            entry.to_request(index, dedup_id(call.scope, seq, entry) if fifo else None)
            for index, (seq, entry) in enumerate(zip(call.seqs, entries, strict=True))
        ]
        url = await self._url()
        answer = await self._call("send_message_batch", QueueUrl=url, Entries=batch)
        return read_answer(answer, len(entries))

    async def _url(self) -> str:
        if self._queue_url is None:
            found = await self._call("get_queue_url", QueueName=self.sqs.queue_name)
            self._queue_url = cast(str, found["QueueUrl"])
        return self._queue_url


def dedup_id(scope: str, seq: int, entry: SqsEntry) -> str:
    """A FIFO message's deduplication id: the same for every send of the message in its
    scope, whichever request carries it; different for other content at that position
    (a replay whose input changed), as an idempotency key is."""
    digest = hashlib.blake2b(f"{scope}#{seq}#{entry.group_id}#".encode(), digest_size=20)
    digest.update(entry.body.encode())
    return digest.hexdigest()


def read_answer(answer: Mapping[str, Any], count: int) -> SubmitResult:
    """Which messages of a request of ``count`` to retry or to reject as bad records: those
    ``Failed`` lists, and those the answer names nowhere (it cannot say they were stored)."""
    named = {str(item.get("Id")) for item in answer.get("Successful") or ()}
    failures = []
    for item in answer.get("Failed") or ():
        index = str(item.get("Id"))
        if index.isdigit() and int(index) < count:
            named.add(index)
            code, message = str(item.get("Code")), str(item.get("Message") or "")
            failures.append(EntryFailure(int(index), code, message, bool(item.get("SenderFault"))))
    return result_of(failures, [i for i in range(count) if str(i) not in named])


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> SqsWriter:
    """An ``SqsWriter`` from one mapping of Spark options (its own and ``SinkOptions``).

    Raises:
        OptionError: an unknown option, an invalid value, or a value above a limit.
    """
    return cast(SqsWriter, SinkEntry("sqs", SqsWriter, SqsOptions).build(options, **kwargs))
