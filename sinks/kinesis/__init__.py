"""Amazon Kinesis Data Streams sink (aiobotocore).

``KinesisWriter`` delivers rows to a stream with PutRecords; ``KinesisOptions`` says which
stream and how a row becomes a record; ``create_writer`` builds both groups of options
from one mapping of Spark options. Clients are shared per process and event loop
(``close_clients`` closes the running loop's).

Needs the ``kinesis`` extra: ``pip install asyncsink[kinesis]``.
"""

from .clients import close_clients
from .errors import translate_error
from .options import KinesisOptions, sink_options_for_kinesis
from .records import KinesisEntry
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
