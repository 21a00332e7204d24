"""Options of the SQS sink, and the SendMessageBatch limits the writer's options respect."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from asyncsink.errors import OptionError
from asyncsink.options import SinkOptions, option, spark_name

from ..aws.options import AwsSinkOptions

__all__ = ["MAX_ENTRIES", "MAX_REQUEST_BYTES", "SqsOptions"]

MiB = 1024 * 1024
MAX_ENTRIES = 10
"""SendMessageBatch takes at most 10 messages per request."""
MAX_REQUEST_BYTES = 1 * MiB
"""... and at most 1 MiB of messages (bodies and attributes), as for one message."""
MAX_ATTRIBUTES = 10
"""A message has at most 10 attributes."""

_QUEUE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,80}(\.fifo)?\Z")


@dataclass(frozen=True, kw_only=True, repr=False)
class SqsOptions(AwsSinkOptions):
    """Where the SQS sink sends and how a row becomes a message.

    Raises:
        OptionError: a value is not allowed, a required option is missing, or two options
            contradict each other; the message names the options involved.
    """

    queue_url: str | None = option(
        None,
        doc="URL of the queue (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME). "
        "Set this or queueName.",
    )
    queue_name: str | None = option(
        None,
        doc="Name of the queue, looked up once per writer (sqs:GetQueueUrl). Set "
        "this or queueUrl. A name ending in .fifo is a FIFO queue.",
    )
    message_group_id_field: str | None = option(
        None,
        doc="Field holding each message's group id. Required for a FIFO queue; on a "
        "standard queue it makes a fair queue's tenant.",
    )
    message_attributes_fields: str | None = option(
        None,
        doc="Comma-separated fields sent as message attributes besides the body (at "
        "most 10): text as String, numbers as Number, the rest as its JSON text.",
    )
    body_field: str | None = option(
        None,
        doc="Field whose value is the message body (text as it is, anything else as "
        "its JSON). By default the whole row is the body, as a JSON object.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.queue_url) == bool(self.queue_name):
            given = "both were" if self.queue_url else "neither was"
            raise OptionError(
                "queueUrl",
                self.queue_url,
                "exactly one of queueUrl or queueName",
                message=f"set exactly one of the options 'queueUrl' or 'queueName' ({given} set)",
            )
        if self.queue_name is not None and not _QUEUE_NAME.match(self.queue_name):
            raise OptionError(
                "queueName",
                self.queue_name,
                "1 to 80 characters of a-z, A-Z, 0-9, _ -, and .fifo for FIFO",
            )
        if self.queue_url is not None:
            parts = urlsplit(self.queue_url)
            if parts.scheme not in ("http", "https") or parts.path.count("/") < 2:
                raise OptionError(
                    "queueUrl",
                    self.queue_url,
                    "a queue URL like https://sqs.REGION.amazonaws.com/ACCOUNT/NAME",
                )
        if self.fifo and not self.message_group_id_field:
            raise OptionError(
                "messageGroupIdField",
                None,
                "a field name for a FIFO queue",
                message=f"the FIFO queue {self.queue!r} needs the option 'messageGroupIdField'",
            )
        if len(self.attribute_fields) > MAX_ATTRIBUTES:
            raise OptionError(
                "messageAttributesFields",
                self.message_attributes_fields,
                f"at most {MAX_ATTRIBUTES} fields",
            )
        for name in ("message_group_id_field", "body_field", "message_attributes_fields"):
            if getattr(self, name) == "":
                raise OptionError(spark_name(name), "", "a field name")

    @property
    def queue(self) -> str:
        """The queue's name."""
        return self.queue_name or urlsplit(self.queue_url or "").path.rstrip("/").rsplit("/")[-1]

    @property
    def fifo(self) -> bool:
        """Whether the queue is a FIFO queue (its name ends in .fifo)."""
        return self.queue.endswith(".fifo")

    @property
    def attribute_fields(self) -> tuple[str, ...]:
        """The fields sent as message attributes."""
        text = self.message_attributes_fields or ""
        return tuple(part.strip() for part in text.split(",") if part.strip())

    def core_defaults(self) -> Mapping[str, Any]:
        """10 messages and 1 MiB a request; a message of at most 1 MiB."""
        return {
            "max_batch_size": MAX_ENTRIES,
            "max_batch_size_in_bytes": MAX_REQUEST_BYTES,
            "max_record_size_in_bytes": MAX_REQUEST_BYTES,
        }

    def check_core(self, core: SinkOptions) -> None:
        """Refuse core options above a SendMessageBatch limit."""
        limits = {
            "maxBatchSize": (core.max_batch_size, MAX_ENTRIES),
            "maxBatchSizeInBytes": (core.max_batch_size_in_bytes, MAX_REQUEST_BYTES),
            "maxRecordSizeInBytes": (core.max_record_size_in_bytes, MAX_REQUEST_BYTES),
        }
        for name, (value, limit) in limits.items():
            if value > limit:
                raise OptionError(name, value, f"at most {limit} (SendMessageBatch's limit)")
