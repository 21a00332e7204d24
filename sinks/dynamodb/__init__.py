"""Amazon DynamoDB sink (aiobotocore): puts and deletes items with BatchWriteItem.

``DynamoDBWriter`` writes each row as an item (or deletes its key, with
``operationField``); ``DynamoDBOptions`` names the table and its key. Writes of one key
go one at a time, in input order, so each key ends with its last write, however often a
write is sent again: "once per key".

Needs the ``aws`` extra: ``pip install asyncsink[aws]``.
"""

from .items import WriteEntry
from .options import DynamoDBOptions
from .writer import DynamoDBWriter, create_writer

__all__ = ["DynamoDBOptions", "DynamoDBWriter", "WriteEntry", "create_writer"]
