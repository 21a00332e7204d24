"""From a row to a BatchWriteItem request: the row's JSON under the JSON contract, mapped
to DynamoDB's types (the table is in ``docs/sinks/dynamodb.md``):

=========================  ==============  ============================================
JSON contract              DynamoDB        notes
=========================  ==============  ============================================
string (and timestamp,     ``S``           timestamps and dates keep their text (ISO
date, binary as base64)                    8601 with offset); an empty string is refused
                                           in a key
number (integer, double,   ``N``           the exact text, 38 significant digits at
decimal)                                   most, magnitude 1e-130 to 1e126
true / false               ``BOOL``
null                       ``NULL``        refused in a key
object (struct, map)       ``M``
array                      ``L``
=========================  ==============  ============================================
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..aws.rows import Number, RowJson, field_of, text_of
from .options import DynamoDBOptions

__all__ = ["ItemConverter", "WriteEntry", "attribute", "key_text"]

_MAX_N = decimal.Decimal("1e126")
_MIN_N = decimal.Decimal("1e-130")


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """One put or delete: its key (as text, to compare writes), its request, its JSON."""

    key: str
    request: Mapping[str, Any]
    data: bytes


def attribute(value: Any, path: str) -> dict[str, Any]:
    """The DynamoDB attribute value of a JSON value (see the module docstring).

    Raises:
        ValueError: a number DynamoDB cannot hold, naming the field at ``path``.
    """
    if isinstance(value, Number):
        number = decimal.Decimal(value)
        digits = len(number.normalize().as_tuple().digits)
        if number and (digits > 38 or not _MIN_N <= abs(number) < _MAX_N):
            raise ValueError(f"field {path!r}: {value} is beyond DynamoDB's numbers")
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if value is None:
        return {"NULL": True}
    if isinstance(value, dict):
        return {"M": {k: attribute(v, f"{path}.{k}") for k, v in value.items()}}
    return {"L": [attribute(v, f"{path}[{i}]") for i, v in enumerate(value)]}


def key_text(key: Mapping[str, Any], names: tuple[str, ...]) -> str:
    """A key's attributes as one comparable text."""
    return json.dumps([key.get(name) for name in names], sort_keys=True)


class ItemConverter:
    """Rows to puts and deletes under ``DynamoDBOptions``.

    Raises (from ``__call__``): ``ValueError`` or ``TypeError`` naming the field, for a
    row without its key, with an unknown operation, or a value DynamoDB cannot hold.
    """

    def __init__(self, options: DynamoDBOptions) -> None:
        self._rows = RowJson(options.contract)
        self._keys = options.keys
        self._operation = options.operation_field

    def __call__(self, element: Any) -> WriteEntry:
        data, fields = self._rows(element)
        operation = "put"
        if self._operation is not None:
            given = fields.pop(self._operation, None)
            operation = "put" if given is None else text_of(given).lower()
            if operation not in ("put", "delete"):
                raise ValueError(
                    f"operation field {self._operation!r}: {given!r} is not put or delete"
                )
        key = {}
        for name in self._keys:
            value = field_of(fields, name, "key")
            if not isinstance(value, str) or value == "":
                raise ValueError(f"key field {name!r} must be a non-empty string or a number")
            key[name] = attribute(value, name)
        if operation == "delete":
            request: dict[str, Any] = {"DeleteRequest": {"Key": key}}
        else:
            item = {name: attribute(value, name) for name, value in fields.items()}
            request = {"PutRequest": {"Item": item}}
        return WriteEntry(key_text(key, self._keys), request, data)
