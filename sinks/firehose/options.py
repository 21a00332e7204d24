"""Options of the Firehose sink, and the PutRecordBatch limits the writer's options respect."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from asyncsink.errors import OptionError
from asyncsink.options import SinkOptions, option

from ..aws.options import AwsSinkOptions

__all__ = ["MAX_RECORDS", "MAX_RECORD_BYTES", "MAX_REQUEST_BYTES", "FirehoseOptions"]

MAX_RECORDS = 500
"""PutRecordBatch takes at most 500 records per request..."""
MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""... and at most 4 MiB of data."""
MAX_RECORD_BYTES = 1000 * 1024
"""A record holds at most 1,000 KiB of data."""

_STREAM_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}\Z")


@dataclass(frozen=True, kw_only=True, repr=False)
class FirehoseOptions(AwsSinkOptions):
    """Where the Firehose sink delivers and how a row becomes a record.

    Raises:
        OptionError: a value is not allowed or a required option is missing.
    """

    delivery_stream_name: str = option(
        kind="str", doc="Name of the Firehose stream (delivery stream) to write to."
    )
    payload_field: str | None = option(
        None,
        doc="Field whose value is the record's data (text as UTF-8, anything else as its "
        "JSON). By default the whole row is the data, as a JSON object.",
    )
    append_newline: bool = option(
        True,
        doc="End each record with a newline. Firehose joins the records of a stream into "
        "its S3 objects as they are; a newline makes them JSON lines.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _STREAM_NAME.match(self.delivery_stream_name):
            raise OptionError(
                "deliveryStreamName",
                self.delivery_stream_name,
                "1 to 64 characters of a-z, A-Z, 0-9, _ . -",
            )
        if self.payload_field == "":
            raise OptionError("payloadField", "", "a field name")

    def core_defaults(self) -> Mapping[str, Any]:
        """500 records and 4 MiB a request; a record of at most 1,000 KiB."""
        return {
            "max_batch_size": MAX_RECORDS,
            "max_batch_size_in_bytes": MAX_REQUEST_BYTES,
            "max_record_size_in_bytes": MAX_RECORD_BYTES,
        }

    def check_core(self, core: SinkOptions) -> None:
        """Refuse core options above a PutRecordBatch limit."""
        limits = {
            "maxBatchSize": (core.max_batch_size, MAX_RECORDS),
            "maxBatchSizeInBytes": (core.max_batch_size_in_bytes, MAX_REQUEST_BYTES),
            "maxRecordSizeInBytes": (core.max_record_size_in_bytes, MAX_RECORD_BYTES),
        }
        for name, (value, limit) in limits.items():
            if value > limit:
                raise OptionError(name, value, f"at most {limit} (PutRecordBatch's limit)")
