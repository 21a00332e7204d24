"""Spark rows as dicts of their fields, without losing one.

A ``Row`` may hold two fields of one name (``Row("a", "a")(1, 2)``); its ``asDict`` then
keeps one of the values. The sinks refuse such a row, as they refuse a value that has no
JSON form: the writer makes it a bad record with its position.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fields_of", "unique_fields"]


def unique_fields(row: Any) -> bool:
    """Whether no two fields of ``row`` (a Spark ``Row``, or anything with
    ``__fields__``) share a name."""
    fields = getattr(row, "__fields__", None)
    return fields is None or len(set(fields)) == len(fields)


def fields_of(row: Any) -> dict[str, Any]:
    """``row.asDict()`` (nested rows stay rows), refusing a row with two fields of one name.

    Raises:
        TypeError: two fields share a name (the message names it).
    """
    if not unique_fields(row):
        twice = next(name for name in row.__fields__ if row.__fields__.count(name) > 1)
        raise TypeError(f"two fields named {twice!r}: one of the values would be lost")
    fields: dict[str, Any] = row.asDict()
    return fields
