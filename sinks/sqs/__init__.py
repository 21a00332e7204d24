"""Amazon SQS sink (aiobotocore): standard and FIFO queues, with SendMessageBatch.

``SqsWriter`` sends rows as messages; ``SqsOptions`` names the queue and how a row becomes
a message. On a FIFO queue, each message's deduplication id comes from its scope, its
position and its content, as idempotency keys do, so a re-sent message is stored once
within SQS's 5-minute deduplication window; a standard queue is at least once.

Needs the ``aws`` extra: ``pip install asyncsink[aws]``.
"""

from .options import SqsOptions
from .writer import SqsEntry, SqsWriter, create_writer

__all__ = ["SqsEntry", "SqsOptions", "SqsWriter", "create_writer"]
