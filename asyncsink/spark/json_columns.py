"""Nested columns as JSON text made by Spark, for sinks whose entries are the rows' JSON.

Spark writes the columns of an event row (a struct, an array, a map...) into Arrow at
5.5-6 µs a row; ``to_json`` of the row and one string column cost 4.3-4.5 µs, and the
text then needs no work in Python but being spliced into the row's JSON.
``foreach_partition`` and ``foreach_batch`` take that path for a sink whose entries are
the rows' JSON (``SinkEntry.json_rows``). ``json_plan`` finds the runs of adjacent
columns whose every value Spark writes exactly as the contract does, around at least one
struct, array or map (flat columns alone are cheaper through Arrow); each run is read as
``to_json(struct(...), TO_JSON_OPTIONS)``, one string column, and marked in the record
batch the sink gets as the JSON text of those fields (``mark_json_fields``). The encoder
splices the fields' text into the row as it is.

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
from dataclasses import dataclass
from typing import Any

import orjson

from ..encoding import JsonContract
from ..entries.arrow_rows import JSON_FIELDS, JSON_TEXT, json_text_marker

__all__ = ["TO_JSON_OPTIONS", "JsonPlan", "contract_text", "json_plan", "mark_json_fields"]

TO_JSON_OPTIONS = (
    "map('timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\", "
    "'timestampNTZFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\", 'dateFormat', 'yyyy-MM-dd', "
    "'timeZone', 'UTC', 'ignoreNullFields', 'false')"
)
"""The options of ``to_json`` that make the contract's text (see the module docstring)."""

_CAPITAL_ESCAPE = re.compile(rb"\\u00[01][A-F]")
_ESCAPE = re.compile(rb"\\(?:u00[0-9A-F]{2}|.)", re.DOTALL)


@dataclass(frozen=True)
class JsonPlan:
    """How a partition's columns are read: ``segments`` are the columns of the record
    batches, each a tuple of the indexes of the DataFrame's columns it holds; those of
    ``runs`` are the JSON text of their columns' fields, made under ``contract``."""

    contract: JsonContract
    names: tuple[str, ...]
    segments: tuple[tuple[int, ...], ...]
    runs: frozenset[int]

    @property
    def any(self) -> bool:
        """Whether some columns are read as JSON text."""
        return bool(self.runs)

    def projection(self, columns: Sequence[str]) -> list[str]:
        """``selectExpr`` expressions of the batches' columns, from the DataFrame's
        ``columns`` (plain identifiers); a run is named as its first column."""
        out = []
        for index, segment in enumerate(self.segments):
            first = columns[segment[0]]
            if index not in self.runs:
                out.append(first)
                continue
            fields = ", ".join(f"{columns[i]} AS {_quoted(self.names[i])}" for i in segment)
            out.append(f"to_json(struct({fields}), {TO_JSON_OPTIONS}) AS {first}")
        return out


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def json_plan(schema: Any, contract: JsonContract, plain: frozenset[str] = frozenset()) -> JsonPlan:
    """The plan for the columns of ``schema`` (a Spark ``StructType``): maximal runs of
    adjacent columns Spark's ``to_json`` writes as ``contract`` does, each holding a
    struct, array or map, become JSON text; every other column stays as it is, and so
    do the columns named in ``plain`` (an ordering key, read by column)."""
    from pyspark.sql import types

    nested = (types.StructType, types.ArrayType, types.MapType)
    segments: list[tuple[int, ...]] = []
    runs: set[int] = set()
    run: list[int] = []

    def close() -> None:
        if any(isinstance(schema.fields[i].dataType, nested) for i in run):
            runs.add(len(segments))
            segments.append(tuple(run))
        else:
            segments.extend((i,) for i in run)
        run.clear()

    for index, field in enumerate(schema.fields):
        if field.name not in plain and _exact(field.dataType, contract):
            run.append(index)
            continue
        close()
        segments.append((index,))
    close()
    return JsonPlan(contract, tuple(schema.names), tuple(segments), frozenset(runs))


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
    if isinstance(data_type, types.StringType) and data_type.collation != "UTF8_BINARY":
        return False  # Spark 4's collated strings: to_json's text was not checked
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


def mark_json_fields(batch: Any, plan: JsonPlan) -> Any:
    """A record batch read under ``plan``, its columns named after the fields; a run's
    text made the contract's (``contract_text``) and marked as the JSON text of its
    fields (``JSON_TEXT``, ``JSON_FIELDS``)."""
    import pyarrow as pa

    arrays = list(batch.columns)
    fields = []
    marker = json_text_marker(plan.contract.utc, plan.contract.decimal_as)
    for index, (segment, array) in enumerate(zip(plan.segments, batch.columns, strict=True)):
        name = plan.names[segment[0]]
        if index not in plan.runs:
            fields.append(batch.schema.field(index).with_name(name))
            continue
        arrays[index] = contract_text(array)
        names = orjson.dumps([plan.names[i] for i in segment])
        metadata = {JSON_TEXT: marker, JSON_FIELDS: names}
        fields.append(pa.field(name, arrays[index].type, False, metadata))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def contract_text(column: Any) -> Any:
    """Spark's JSON text (a string array) with the contract's escapes: Jackson's
    ``\\u001F`` becomes ``\\u001f``. Rare: only values that hold a ``\\u`` escape are
    rewritten, each read escape by escape so that an escaped backslash followed by
    ``u001F`` stays as it is."""
    import numpy as np
    import pyarrow as pa

    if not pa.types.is_string(column.type):
        column = column.cast(pa.string())
    _validity, offsets, data = column.buffers()
    if data is None or len(column) == 0:
        return column
    bounds = np.frombuffer(offsets, np.int32, 2, column.offset * 4)
    start = int(bounds[0])
    end = int(np.frombuffer(offsets, np.int32, 1, (column.offset + len(column)) * 4)[0])
    text = np.frombuffer(data, np.uint8, end - start, start)
    slashes = np.flatnonzero(text[:-1] == 0x5C)  # found in a pass: escapes are rare
    if not len(slashes) or not (text[slashes + 1] == 0x75).any():  # no "\\u"
        return column
    values = [
        value if value is None or not _CAPITAL_ESCAPE.search(value) else _small_hex(value)
        for value in column.cast(pa.binary()).to_pylist()
    ]
    return pa.array(values, pa.binary()).cast(pa.string())


def _small_hex(text: bytes) -> bytes:
    return _ESCAPE.sub(lambda found: found[0].lower() if found[0][1:2] == b"u" else found[0], text)
