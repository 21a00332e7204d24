"""Rows as the AWS sinks read them: the row's JSON under the JSON contract, and that JSON
parsed back with every number kept as its exact text (``Number``), so that a sink can
take fields out of it (a group id, a message attribute, a DynamoDB item) without a
decimal or a 64-bit integer passing through a float."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from asyncsink.encoding import JsonEntryEncoder
from asyncsink.encoding.json_rules import JsonContract

__all__ = ["Number", "RowJson", "field_of", "text_of"]


class Number(str):
    """A JSON number, as its exact text."""

    __slots__ = ()


class RowJson:
    """A row (``Row``, dict or mapping) as its JSON bytes and its parsed fields.

    Raises (from ``__call__``):
        EntryEncodingError: a value the contract cannot encode (naming its field).
        TypeError: the element is not a row or a mapping.
    """

    def __init__(self, contract: JsonContract) -> None:
        self._encode = JsonEntryEncoder(contract)

    def __call__(self, element: Any) -> tuple[bytes, dict[str, Any]]:
        data = self._encode(element)
        fields = json.loads(data, parse_float=Number, parse_int=Number)
        if not isinstance(fields, dict):
            raise TypeError(f"expected a Row, a dict or a mapping, got {type(element).__name__}")
        return data, fields


def field_of(fields: Mapping[str, Any], name: str, role: str) -> Any:
    """The value of field ``name``, not null.

    Raises:
        ValueError: the field is missing or null, naming it, its ``role`` and the row's
            fields.
    """
    value = fields.get(name)
    if value is None:
        names = ", ".join(list(fields)[:20]) or "none"
        state = "null" if name in fields else "missing"
        raise ValueError(f"{role} field {name!r} is {state} (the row's fields: {names})")
    return value


def text_of(value: Any) -> str:
    """A field's value as text: a string as it is, a number as its JSON text, a boolean as
    ``true``/``false``, an object or array as its compact JSON."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
