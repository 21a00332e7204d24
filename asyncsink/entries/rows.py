"""Spark rows as dicts of their fields, without losing one.

A ``Row`` may hold two fields of one name (``Row("a", "a")(1, 2)``); its ``asDict`` then
keeps one of the values. The sinks refuse such a row, as they refuse a value that has no
JSON form: the writer makes it a bad record with its position.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fields_of", "row_dict"]


def row_dict(row: Any) -> dict[str, Any] | None:
    """``row.asDict()`` (nested rows stay rows), or ``None`` when two fields of ``row``
    share a name: ``asDict`` then holds fewer fields than the row has values."""
    fields: dict[str, Any] = row.asDict()
    try:
        values = len(row)
    except TypeError:
        return fields  # a row-like object without a length: nothing to compare
    return fields if len(fields) == values else None


def fields_of(row: Any) -> dict[str, Any]:
    """``row.asDict()`` (nested rows stay rows), refusing a row with two fields of one name.

    Raises:
        TypeError: two fields share a name (the message names it).
    """
    fields = row_dict(row)
    if fields is None:
        raise TypeError(f"two fields named {_twice(row)!r}: one of the values would be lost")
    return fields


def _twice(row: Any) -> str:
    # PySpark has no public way to read a Row's field names when two of them are the same
    # (``asDict`` keeps one): this message is the one place that reads ``Row.__fields__``.
    names = list(getattr(row, "__fields__", ()))
    return next((name for name in names if names.count(name) > 1), "?")
