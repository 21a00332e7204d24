"""Options of the Kinesis sink, and the PutRecords limits the writer's options must respect.

``KinesisOptions`` says where records go (stream, region, endpoint, credentials) and how a
row becomes a record (partition key, explicit hash key, payload). The buffering hints are
the writer's ``SinkOptions``; ``sink_options_for_kinesis`` checks them against the
PutRecords limits and wires the stream's maximum record size into them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from asyncsink.aws.credentials import AwsCredentialOptions, AwsIdentity
from asyncsink.encoding.options import JsonOptions
from asyncsink.errors import OptionError
from asyncsink.options import SinkOptions, option, spark_name
from asyncsink.policies.ordering import KeyOrder, Ordering, key_reader

from ..aws.options import check_endpoint_url, check_region

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "DEFAULT_REQUEST_BYTES",
    "KINESIS_SINK_DEFAULTS",
    "MAX_PARTITION_KEY_LENGTH",
    "MAX_RECORDS_PER_REQUEST",
    "MAX_RECORD_BYTES",
    "MAX_REQUEST_BYTES",
    "KinesisOptions",
    "PartitionKeyMode",
    "sink_options_for_kinesis",
]

MiB = 1024 * 1024

MAX_RECORDS_PER_REQUEST = 500
"""PutRecords takes at most 500 records per request."""
MAX_REQUEST_BYTES = 10 * MiB
"""PutRecords takes at most 10 MiB of data and partition keys per request."""
DEFAULT_REQUEST_BYTES = 5 * MiB
"""Bytes per request by default: the limit of streams and endpoints that predate 10 MiB."""
MAX_RECORD_BYTES = 10 * MiB
"""The largest record a stream can be configured to take."""
DEFAULT_MAX_RECORD_BYTES = 1 * MiB
"""The maximum record size of a stream unless it was raised."""
MAX_PARTITION_KEY_LENGTH = 256
"""Partition keys are 1 to 256 Unicode characters."""

KINESIS_SINK_DEFAULTS: Mapping[str, int] = {
    "max_batch_size": MAX_RECORDS_PER_REQUEST,
    "max_batch_size_in_bytes": DEFAULT_REQUEST_BYTES,
    "max_record_size_in_bytes": DEFAULT_MAX_RECORD_BYTES,
}
"""The ``SinkOptions`` values the Kinesis sink uses unless told otherwise."""

PartitionKeyMode = Literal["auto", "field", "fixed", "random", "hash"]

_STREAM_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}\Z")
_STREAM_ARN = re.compile(
    r"^arn:aws[a-z-]*:kinesis:(?P<region>[a-z0-9-]+):\d{12}:stream/(?P<name>[a-zA-Z0-9_.-]{1,128})\Z"
)


@dataclass(frozen=True, kw_only=True, repr=False)
class KinesisOptions(AwsCredentialOptions, JsonOptions):
    """Where the Kinesis sink delivers and how a row becomes a Kinesis record.

    Built from Python keywords or, with the writer's options, from Spark's string options
    (``create_writer``). Credentials are masked in ``repr`` and never shown in errors.

    Raises:
        OptionError: a value is not allowed, a required option is missing, or two options
            contradict each other; the message names the options involved.
    """

    stream_name: str | None = option(
        None, doc="Name of the Kinesis data stream to write to. Set this or streamArn."
    )
    stream_arn: str | None = option(
        None,
        doc="ARN of the stream (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME). Set this or "
        "streamName; its region is used when region is not set.",
    )
    region: str | None = option(
        None,
        doc="AWS region of the stream, e.g. us-east-1. Defaults to the region of streamArn, "
        "else to the AWS SDK's default (AWS_REGION, AWS_DEFAULT_REGION, the AWS config file).",
    )
    endpoint_url: str | None = option(
        None,
        doc="Endpoint to send to instead of the regional AWS one: a VPC endpoint or a local "
        "emulator, as http(s)://host[:port].",
    )
    partition_key_mode: PartitionKeyMode = option(
        "auto",
        doc="How each record's partition key is chosen: 'field', 'fixed', 'random', 'hash' "
        "or 'auto'. See [Partition keys](#partition-keys).",
    )
    partition_key_field: str | None = option(
        None,
        doc="Field holding the partition key. Several comma-separated fields are joined with "
        "'|' (e.g. 'country,city' gives 'FR|Paris'). A missing or null field makes the row a "
        "bad record.",
    )
    partition_key: str | None = option(
        None, doc="The partition key of every record (all records then go to one shard)."
    )
    partition_key_fn: Callable[[Any], Any] | None = option(
        None,
        kind="object",
        doc="From Python only: a function of the input element (Row or mapping) that returns "
        "its partition key.",
    )
    explicit_hash_key_field: str | None = option(
        None,
        doc="Field holding an explicit hash key, a decimal integer in [0, 2^128), that picks "
        "the shard instead of the hash of the partition key.",
    )
    ordered: bool = option(
        False,
        doc="Deliver the records of one partition key in input order, one at a time per key "
        "(see [Change data capture](../cdc.md)). Needs partitionKeyField, partitionKey or "
        "partitionKeyFn.",
    )
    payload_field: str | None = option(
        None,
        doc="Field whose value is the record's data: bytes as they are, text as UTF-8. By "
        "default the whole row is the data, as a JSON object under the JSON contract "
        "(see 'The JSON contract' in the README).",
    )
    max_record_size_in_bytes: int = option(
        DEFAULT_MAX_RECORD_BYTES,
        kind="size",
        minimum=1,
        doc="The stream's maximum record size (data plus partition key): 1 MiB unless the "
        "stream was raised, up to 10 MiB. A larger record is a bad record.",
    )
    reconcile_by_reading: bool = option(
        True,
        doc="With sinkId: before re-sending a request left without an answer, read the "
        "stream and send only the records it does not hold. 'false' re-sends such "
        "requests as they were. See [Guarantees](../guarantees.md).",
    )
    reconcile_time_budget_ms: int = option(
        30_000,
        kind="duration",
        minimum=1,
        doc="Most time one reconcileByReading scan may take, after its wait; the requests it "
        "has not settled by then are re-sent as they were.",
    )
    reconcile_byte_budget: int = option(
        64 * MiB,
        kind="size",
        minimum=1,
        doc="Most bytes (data plus partition keys) one reconcileByReading scan may read; "
        "reads share each shard's 2 MB/s and 5 calls/s with the stream's consumers. The "
        "requests it has not settled by then are re-sent as they were.",
    )
    reconcile_clock_skew_ms: int = option(
        5_000,
        kind="duration",
        minimum=0,
        doc="How far apart the clocks of the executors and of Kinesis may be. "
        "reconcileByReading waits this much longer and reads this much earlier and later "
        "than the lost request's own times.",
    )

    def __post_init__(self) -> None:
        JsonOptions.__post_init__(self)
        self._check_stream()
        self._check_aws_credentials()
        self._check_partition_key()
        if self.ordered and self.resolved_partition_key_mode in ("random", "hash"):
            raise OptionError(
                "ordered", True, "set with partitionKeyField, partitionKey or partitionKeyFn"
            )
        if self.region is not None:
            check_region(self.region)
        if self.endpoint_url is not None:
            check_endpoint_url(self.endpoint_url)
        if self.max_record_size_in_bytes > MAX_RECORD_BYTES:
            raise OptionError(
                "maxRecordSizeInBytes",
                self.max_record_size_in_bytes,
                f"at most {MAX_RECORD_BYTES} (10 MiB, the largest Kinesis record)",
            )
        for name in ("explicit_hash_key_field", "payload_field"):
            if getattr(self, name) == "":
                raise OptionError(spark_name(name), "", "a field name")

    def _check_stream(self) -> None:
        if bool(self.stream_name) == bool(self.stream_arn):
            given = "both were" if self.stream_name else "neither was"
            raise OptionError(
                "streamName",
                self.stream_name,
                "exactly one of streamName or streamArn",
                message=f"set exactly one of the options 'streamName' or 'streamArn' ({given} set)",
            )
        if self.stream_name is not None and not _STREAM_NAME.match(self.stream_name):
            raise OptionError(
                "streamName", self.stream_name, "1 to 128 characters of a-z, A-Z, 0-9, _ . -"
            )
        if self.stream_arn is not None and not _STREAM_ARN.match(self.stream_arn):
            raise OptionError(
                "streamArn",
                self.stream_arn,
                "an ARN like arn:aws:kinesis:REGION:ACCOUNT:stream/NAME",
            )

    def _check_partition_key(self) -> None:
        mode = self.partition_key_mode
        fn = self.partition_key_fn
        if fn is not None and not callable(fn):
            raise OptionError("partitionKeyFn", fn, "a callable (from Python)")
        given = [
            name
            for name, value in (
                ("partitionKeyField", self.partition_key_field),
                ("partitionKey", self.partition_key),
                ("partitionKeyFn", fn),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise OptionError(
                given[1],
                None,
                "one way to choose partition keys",
                message=f"options {given[0]!r} and {given[1]!r} both choose the partition "
                "key; set one of them",
            )
        needs = {"field": "partitionKeyField", "fixed": "partitionKey"}
        if mode in needs and needs[mode] not in given:
            raise OptionError(
                "partitionKeyMode",
                mode,
                f"{needs[mode]} set along with it",
                message=f"partitionKeyMode {mode!r} needs the option {needs[mode]!r}",
            )
        if mode != "auto" and given and needs.get(mode) != given[0]:
            raise OptionError(
                "partitionKeyMode",
                mode,
                f"'auto' or the mode that uses {given[0]}",
                message=f"partitionKeyMode {mode!r} does not use the option {given[0]!r}; "
                "drop one of them",
            )
        if self.partition_key_field is not None and not self.key_fields:
            raise OptionError("partitionKeyField", self.partition_key_field, "field names")
        key = self.partition_key
        if key is not None and not 1 <= len(key) <= MAX_PARTITION_KEY_LENGTH:
            raise OptionError("partitionKey", key, "1 to 256 characters")

    # ------------------------------------------------------------------ derived values

    @property
    def resolved_partition_key_mode(self) -> Literal["field", "fixed", "random", "hash", "fn"]:
        """The mode in effect once ``auto`` is resolved (``fn``: ``partition_key_fn``)."""
        if self.partition_key_mode != "auto":
            return self.partition_key_mode
        if self.partition_key_field is not None:
            return "field"
        if self.partition_key is not None:
            return "fixed"
        if self.partition_key_fn is not None:
            return "fn"
        return "hash"

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The partition key fields, in order."""
        text = self.partition_key_field or ""
        return tuple(part.strip() for part in text.split(",") if part.strip())

    def core_defaults(self) -> Mapping[str, Any]:
        """The Kinesis defaults of the core options: 500 records and 5 MiB a request
        (raised to hold one record of the stream's maximum size), that record size."""
        limit = self.max_record_size_in_bytes
        return {
            **KINESIS_SINK_DEFAULTS,
            "max_record_size_in_bytes": limit,
            "max_batch_size_in_bytes": max(DEFAULT_REQUEST_BYTES, limit),
        }

    def check_core(self, core: SinkOptions) -> None:
        """Refuse core options above a PutRecords limit (see ``sink_options_for_kinesis``),
        and ``orderingKey`` with ``ordered``, which orders by the partition key."""
        if self.ordered and core.ordering_key:
            raise OptionError(
                "orderingKey", core.ordering_key, "unset: ordered=true orders by the partition key"
            )
        sink_options_for_kinesis(self, core)

    def ordering(self) -> Ordering | None:
        """With ``ordered``: ordering by the partition key, as each record gets it."""
        if not self.ordered:
            return None
        mode = self.resolved_partition_key_mode
        if mode == "field":
            return KeyOrder(key_reader(self.key_fields))
        fn, fixed = self.partition_key_fn, self.partition_key
        if mode == "fn" and fn is not None:
            return KeyOrder(lambda elements: [fn(element) for element in elements])
        return KeyOrder(lambda elements: [fixed] * len(elements))

    @property
    def stream(self) -> str:
        """The stream as the user named it (name or ARN), for messages."""
        return self.stream_arn or self.stream_name or ""

    @property
    def stream_parameters(self) -> dict[str, str]:
        """How PutRecords names the stream."""
        if self.stream_arn:
            return {"StreamARN": self.stream_arn}
        return {"StreamName": self.stream_name or ""}

    @property
    def effective_region(self) -> str | None:
        """``region``, else the region of ``stream_arn``, else ``None`` (the SDK decides)."""
        if self.region:
            return self.region
        match = _STREAM_ARN.match(self.stream_arn or "")
        return match.group("region") if match else None

    secrets = AwsCredentialOptions.aws_secrets  # the credential values, for scrubbing

    @property
    def identity(self) -> AwsIdentity:
        """Whose credentials the writer uses (static keys, the default chain, a role)."""
        return self.aws_identity(self.effective_region)


def sink_options_for_kinesis(
    kinesis: KinesisOptions, sink: SinkOptions | None = None
) -> SinkOptions:
    """The writer options the Kinesis sink runs with.

    Without ``sink``, the Kinesis defaults (500 records and 5 MiB per request, raised to
    hold one record of the stream's maximum size). The stream's maximum record size from
    ``kinesis`` becomes the writer's ``max_record_size_in_bytes``.

    Raises:
        OptionError: a value above a PutRecords limit (500 records, 10 MiB per request),
            or a record size set differently in both groups.
    """
    limit = kinesis.max_record_size_in_bytes
    if sink is None:
        sink = SinkOptions(
            max_batch_size=KINESIS_SINK_DEFAULTS["max_batch_size"],
            max_batch_size_in_bytes=max(KINESIS_SINK_DEFAULTS["max_batch_size_in_bytes"], limit),
            max_record_size_in_bytes=limit,
        )
    elif sink.max_record_size_in_bytes != limit:
        if (
            limit != DEFAULT_MAX_RECORD_BYTES
            and sink.max_record_size_in_bytes != DEFAULT_MAX_RECORD_BYTES
        ):
            raise OptionError(
                "maxRecordSizeInBytes",
                sink.max_record_size_in_bytes,
                f"the stream's maximum record size given to KinesisOptions ({limit})",
                message=f"maxRecordSizeInBytes is set both in SinkOptions "
                f"({sink.max_record_size_in_bytes}) and in KinesisOptions ({limit}); "
                "set it in KinesisOptions",
            )
        if limit != DEFAULT_MAX_RECORD_BYTES:
            sink = dataclasses.replace(sink, max_record_size_in_bytes=limit)
    if sink.max_batch_size > MAX_RECORDS_PER_REQUEST:
        raise OptionError(
            "maxBatchSize",
            sink.max_batch_size,
            f"at most {MAX_RECORDS_PER_REQUEST} (records per PutRecords request)",
        )
    if sink.max_batch_size_in_bytes > MAX_REQUEST_BYTES:
        raise OptionError(
            "maxBatchSizeInBytes",
            sink.max_batch_size_in_bytes,
            f"at most {MAX_REQUEST_BYTES} (10 MiB, bytes per PutRecords request)",
        )
    if sink.max_record_size_in_bytes > MAX_RECORD_BYTES:
        raise OptionError(
            "maxRecordSizeInBytes",
            sink.max_record_size_in_bytes,
            f"at most {MAX_RECORD_BYTES} (10 MiB, the largest Kinesis record)",
        )
    return sink
