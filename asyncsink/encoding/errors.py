"""The error of a value that has no form under the JSON contract."""

from __future__ import annotations

__all__ = ["EntryEncodingError"]


class EntryEncodingError(TypeError):
    """An element holds a value the encoder cannot turn into JSON.

    ``field`` is the path of that value inside the element (``""`` for the element itself,
    ``order.lines[2].price`` inside it), ``value_type`` the name of its type.
    """

    def __init__(self, field: str, value_type: str, reason: str) -> None:
        self.field = field
        self.value_type = value_type
        where = f"field {field!r}" if field else "the element"
        super().__init__(f"{where}: cannot encode a value of type {value_type} as JSON ({reason})")
