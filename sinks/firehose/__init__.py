"""Amazon Data Firehose sink (aiobotocore), with PutRecordBatch.

``FirehoseWriter`` sends rows as records; ``FirehoseOptions`` names the stream and how a
row becomes a record. Firehose does not deduplicate, so delivery is at least once: the
call records skip what was acknowledged, and what was in doubt is sent again.

Needs the ``aws`` extra: ``pip install asyncsink[aws]``.
"""

from .options import FirehoseOptions
from .writer import FirehoseWriter, create_writer, read_answer

__all__ = ["FirehoseOptions", "FirehoseWriter", "create_writer", "read_answer"]
