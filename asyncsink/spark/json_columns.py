"""Nested columns as JSON text made by Spark, for sinks whose entries are the rows' JSON.

Spark writes a struct, array or map column into Arrow at 5.5-6 µs a row; its ``to_json``
and one string column cost less, and the text then needs no work in Python but being
spliced into the row's JSON. ``foreach_partition`` and ``foreach_batch`` take that path
for a sink whose entries are the rows' JSON (``SinkEntry.json_rows``): each nested column
whose every value Spark's text gives exactly as the contract does (``jvm_columns``) is
read as ``to_json(column, TO_JSON_OPTIONS)``, and marked as JSON text in the record batch
the sink gets (``mark_json_columns``), which the encoder copies as it is.

Where Spark's text and the contract's agree (checked value for value by
``tests/spark/test_nested_json.py``):

- integers, booleans, strings, binary (standard base64), dates, NULL at any depth
  (``ignoreNullFields`` off), map keys that are strings, integers or booleans;
- decimals under ``decimalAs=number``: Java's ``BigDecimal.toString`` and the contract
  (pyarrow's and Python's text of a decimal) follow the same rule (``12.50``, ``1E-7``);
- timestamps under ``timeZone=UTC``: ``yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX`` in UTC ends in
  ``Z``; TIMESTAMP_NTZ with six decimals and no offset;
- string escapes, but for one difference: Jackson writes a control character's
  ``\\u00XX`` escape with capital hex digits, the contract with small ones (as orjson
  and Python's ``json`` do); ``contract_text`` turns the former into the latter.

Where they do not, the column keeps the Python path: floats and doubles (Java's text is
``1.0E16``, and Java 17's ``Double.toString`` is not always the shortest), timestamps in
another zone than UTC (``XXX`` writes ``Z`` for a zero offset, the contract ``+00:00``;
zones whose offset has seconds), decimals as strings, map keys of other types (Spark
writes a date key as its day count), times, intervals and variants.

The data sources cannot take this path: Spark hands a Python data source's writer the
DataFrame as the user wrote it, and the Data Source API has no hook to change the plan
that feeds it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..encoding import JsonContract
from ..entries.arrow_rows import JSON_TEXT, json_text_marker

__all__ = [
    "TO_JSON_OPTIONS",
    "contract_text",
    "json_projection",
    "jvm_columns",
    "mark_json_columns",
]

TO_JSON_OPTIONS = (
    "map('timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\", "
    "'timestampNTZFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\", 'dateFormat', 'yyyy-MM-dd', "
    "'timeZone', 'UTC', 'ignoreNullFields', 'false')"
)
"""The options of ``to_json`` that make the contract's text (see the module docstring)."""

_CAPITAL_ESCAPE = re.compile(rb"\\u00[01][A-F]")
_ESCAPE = re.compile(rb"\\(?:u00[0-9A-F]{2}|.)", re.DOTALL)


def jvm_columns(schema: Any, contract: JsonContract) -> list[int]:
    """The indexes of the columns of ``schema`` (a Spark ``StructType``) that are structs,
    arrays or maps whose every value Spark's ``to_json`` writes as ``contract`` does."""
    from pyspark.sql import types

    nested = (types.StructType, types.ArrayType, types.MapType)
    return [
        index
        for index, field in enumerate(schema.fields)
        if isinstance(field.dataType, nested) and _exact(field.dataType, contract)
    ]


def _exact(data_type: Any, contract: JsonContract) -> bool:
    from pyspark.sql import types

    if isinstance(data_type, types.StructType):
        return all(_exact(field.dataType, contract) for field in data_type.fields)
    if isinstance(data_type, types.ArrayType):
        return _exact(data_type.elementType, contract)
    if isinstance(data_type, types.MapType):
        keys = (types.StringType, types.BooleanType, types.IntegralType)
        return isinstance(data_type.keyType, keys) and _exact(data_type.valueType, contract)
    if isinstance(data_type, types.DecimalType):
        return contract.decimal_as == "number"
    if isinstance(data_type, types.TimestampType):
        return contract.utc
    leaves = (
        types.BooleanType,
        types.IntegralType,
        types.StringType,
        types.BinaryType,
        types.DateType,
        types.TimestampNTZType,
        types.NullType,
    )
    return isinstance(data_type, leaves)


def json_projection(names: Sequence[str], columns: Sequence[int]) -> list[str]:
    """``selectExpr`` expressions of the columns ``names``, those at ``columns`` as their
    JSON text (the names must be plain identifiers)."""
    wanted = set(columns)
    return [
        f"to_json({name}, {TO_JSON_OPTIONS}) AS {name}" if index in wanted else name
        for index, name in enumerate(names)
    ]


def mark_json_columns(batch: Any, columns: Sequence[int], contract: JsonContract) -> Any:
    """``batch`` with the columns at ``columns`` (Spark's ``to_json`` text) made the
    contract's text and marked as JSON text (``JSON_TEXT``) made under ``contract``."""
    import pyarrow as pa

    arrays = list(batch.columns)
    fields = list(batch.schema)
    marker = {JSON_TEXT: json_text_marker(contract.utc, contract.decimal_as)}
    for index in columns:
        text = contract_text(arrays[index])
        arrays[index] = text
        fields[index] = pa.field(fields[index].name, text.type, True, marker)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def contract_text(column: Any) -> Any:
    """Spark's JSON text (a string array) with the contract's escapes: Jackson's
    ``\\u001F`` becomes ``\\u001f``. Rare: only values that hold such an escape are
    rewritten, each read escape by escape so that an escaped backslash followed by
    ``u001F`` stays as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_large_string(column.type) or pa.types.is_string_view(column.type):
        column = column.cast(pa.string())
    if not pc.any(pc.match_substring(column, "\\u00")).as_py():
        return column
    values = [
        value if value is None or not _CAPITAL_ESCAPE.search(value) else _small_hex(value)
        for value in column.cast(pa.binary()).to_pylist()
    ]
    return pa.array(values, pa.binary()).cast(pa.string())


def _small_hex(text: bytes) -> bytes:
    return _ESCAPE.sub(lambda found: found[0].lower() if found[0][1:2] == b"u" else found[0], text)
