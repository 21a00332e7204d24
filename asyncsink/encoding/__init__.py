"""One JSON contract for every sink and every path (see ``json_rules`` for the table).

``encode_batch`` encodes the rows of an Arrow record batch a column at a time;
``JsonEntryEncoder`` encodes Python values (dicts, ``Row`` objects) under the same rules.
"""

from .arrow import encode_batch, encode_column
from .errors import EntryEncodingError
from .json_rules import JsonContract
from .values import JsonEntryEncoder

__all__ = [
    "EntryEncodingError",
    "JsonContract",
    "JsonEntryEncoder",
    "encode_batch",
    "encode_column",
]
