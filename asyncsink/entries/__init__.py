"""Entry representations: how rows and entries are held on their way to a destination.

``PackedEntries`` (entries end to end in one buffer), ``ArrowRows`` (the rows of an Arrow
record batch as dicts built when asked) and ``fields_of`` (a Spark row as a dict of its
fields, without losing one).
"""

from .arrow_rows import ArrowRows
from .packed import PackedEntries
from .rows import fields_of

__all__ = ["ArrowRows", "PackedEntries", "fields_of"]
