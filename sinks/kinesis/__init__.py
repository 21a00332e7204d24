"""Amazon Kinesis Data Streams sink (aiobotocore).

``KinesisWriter`` delivers rows to a stream with PutRecords; ``KinesisOptions`` says which
stream and how a row becomes a record; ``create_writer`` builds both groups of options
from one mapping of Spark options. Clients are shared per process and event loop
(``close_clients`` closes the running loop's).

Each row is stored once with ``sinkId``, although PutRecords takes no idempotency key: a
retried task skips what the lost attempt saw acknowledged, and settles the requests it
left without an answer by reading the shards their records map to, sending only the
records the stream does not hold (``reconcileByReading``, on by default; see
``asyncsink.sinks.kinesis.reconcile``). A scan that runs out of its budget
(``reconcileTimeBudgetMs``, ``reconcileByteBudget``) re-sends its requests as they were,
at least once, and the
writer's statistics count them (``resent_calls``, against ``reconciled``). Within one
attempt, a request that timed out may have been stored and is re-sent: at least once.

The one assumption: a record with the same partition key and data that reached the same
shard, from another producer or from a duplicate row of the job's input, between the lost
request's start and the time it could last have landed, is indistinguishable from the lost
record and is taken for it (the row is then not sent again). If rows can repeat, make
them unique: put an id or an event time in the data, or use such a field as
``partitionKeyField``.

Needs the ``kinesis`` extra: ``pip install asyncsink[kinesis]``.
"""

from .clients import close_clients
from .converter import KinesisEntry
from .errors import translate_error
from .options import KinesisOptions, sink_options_for_kinesis
from .writer import KinesisWriter, create_writer

__all__ = [
    "KinesisEntry",
    "KinesisOptions",
    "KinesisWriter",
    "close_clients",
    "create_writer",
    "sink_options_for_kinesis",
    "translate_error",
]
