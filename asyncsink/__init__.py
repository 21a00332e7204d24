"""asyncsink: a generic async sink framework for Apache Spark.

Subclass ``AsyncSinkWriter`` for a destination, or use a built-in sink (HTTP, Kinesis,
Elasticsearch; ``register_sink`` adds yours); run it from ``foreachBatch``,
``foreachPartition`` or a Spark Python data source with ``asyncsink.spark``.
"""

from .durable import CallLog, DurableContext, current_key
from .encoding import EntryEncodingError, JsonContract, JsonEntryEncoder
from .entries.arrow_rows import ArrowRows
from .entries.packed import PackedEntries
from .errors import (
    AsyncSinkError,
    BadRecordError,
    CorruptRecordError,
    DeadLetterError,
    DeliveryError,
    DestinationError,
    DurableError,
    FatalError,
    FencedError,
    OptionError,
    ReplayMismatchError,
    RetryableError,
    SparkSetupError,
    ThrottledError,
    WriterStateError,
)
from .options import SinkOptions
from .policies.dead_letter import DeadLetter, JsonLinesDeadLetter
from .policies.retry import ErrorKind
from .request import CallInfo, SubmitResult, current_call, idempotency_key
from .stats import LatencyHistogram, RequestSizes, WriterStatistics
from .stores.base import RecordStore, Scope
from .writer import AsyncSinkWriter
from .writer.sink_contract import Reconcile

__version__ = "0.1.0"

__all__ = [
    "ArrowRows",
    "AsyncSinkError",
    "AsyncSinkWriter",
    "BadRecordError",
    "CallInfo",
    "CallLog",
    "CorruptRecordError",
    "DeadLetter",
    "DeadLetterError",
    "DeliveryError",
    "DurableContext",
    "DestinationError",
    "DurableError",
    "EntryEncodingError",
    "ErrorKind",
    "FatalError",
    "FencedError",
    "JsonContract",
    "JsonEntryEncoder",
    "JsonLinesDeadLetter",
    "LatencyHistogram",
    "OptionError",
    "PackedEntries",
    "Reconcile",
    "RecordStore",
    "ReplayMismatchError",
    "RequestSizes",
    "RetryableError",
    "Scope",
    "SinkOptions",
    "SparkSetupError",
    "SubmitResult",
    "ThrottledError",
    "WriterStatistics",
    "WriterStateError",
    "current_call",
    "current_key",
    "idempotency_key",
]
