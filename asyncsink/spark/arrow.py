"""Partitions read through Arrow: rows reach the Python worker as Arrow record batches.

``df.rdd`` turns every row into Java objects and pickles them one by one in the JVM, which
costs more than everything the writer does with the row. ``df.mapInArrow`` hands the
Python worker columnar record batches instead; the rows are rebuilt here as the same
``Row`` objects, with the same field names and values, several times faster; or, for a
writer that takes a dict of a row's fields as it takes the row (``SinkSpec.reads_mappings``),
handed over as ``ArrowRows``: a sequence of those dicts, built only if the writer asks for
them one by one, which can convert the batch's columns at once instead.

Only columns whose Python values come out identical either way take this path: strings,
booleans, integers, floating point numbers, decimals and dates. A DataFrame with any other
column (timestamps, binary, arrays, maps, structs...) is read through ``df.rdd``, as is
every DataFrame when pyarrow is not installed.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..arrow_rows import ArrowRows

__all__ = ["arrow_readable", "batch_chunks", "map_partitions_in_arrow"]


def check_columns(schema: Any) -> None:
    """Refuse a schema in which two fields of one struct (the columns, or a struct
    column's fields) share a name: rows are sent by field name, so one of the values
    would be lost.

    Raises:
        ValueError: two fields share a name (the message names it and where).
    """
    from pyspark.sql import types

    def visit(data_type: Any, where: str) -> None:
        if isinstance(data_type, types.StructType):
            seen: set[str] = set()
            for f in data_type.fields:
                if f.name in seen:
                    raise ValueError(
                        f"the DataFrame has two {where} named {f.name!r}: rows are sent by "
                        "field name, so one of the values would be lost; rename one (with "
                        "toDF() or an alias) before writing"
                    )
                seen.add(f.name)
                visit(f.dataType, f"fields of {f.name!r}")
        elif isinstance(data_type, types.ArrayType):
            visit(data_type.elementType, where)
        elif isinstance(data_type, types.MapType):
            visit(data_type.valueType, where)

    visit(schema, "columns")


def arrow_readable(schema: Any) -> bool:
    """Whether a DataFrame of ``schema`` can be read through Arrow with unchanged rows."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    from pyspark.sql import types

    same = (
        types.StringType,
        types.BooleanType,
        types.ByteType,
        types.ShortType,
        types.IntegerType,
        types.LongType,
        types.FloatType,
        types.DoubleType,
        types.DecimalType,
        types.DateType,
    )
    return bool(schema.fields) and all(isinstance(f.dataType, same) for f in schema.fields)


def map_partitions_in_arrow(
    df: Any,
    task: Callable[[Iterable[Any]], Any],
    *,
    as_dicts: bool = False,
    chunked: bool = False,
) -> list[Any]:
    """Run ``task`` on the rows of each partition of ``df`` (``arrow_readable``), read
    through Arrow, as ``Row`` objects or (``as_dicts``) as dicts of their fields; the list
    of what each partition's ``task`` returned. With ``chunked``, ``task`` gets the rows
    in sequences, one per record batch (see ``batch_chunks``)."""
    names = list(df.schema.names)
    # Read under names of its own: mapInArrow refuses two columns of one name, and
    # cannot resolve a name with a dot in it; the rows get the real names back.
    df = df.toDF(*(f"_{i}" for i in range(len(names))))
    out = df.mapInArrow(_Task(task, names, as_dicts, chunked), "result binary").collect()
    return [pickle.loads(row.result) for row in out]


def batch_chunks(
    batches: Iterable[Any], names: list[str], *, as_dicts: bool
) -> Iterator[Sequence[Any]]:
    """The rows of Arrow record batches, one sequence per batch: ``ArrowRows`` (dicts of
    their fields, built when asked for), or lists of ``Row`` objects sharing one list of
    field names (as Spark builds them)."""
    if as_dicts:
        for batch in batches:
            yield ArrowRows(batch, names)
        return
    from pyspark.sql import Row

    new = tuple.__new__
    for batch in batches:
        columns = [column.to_pylist() for column in batch.columns]
        rows = []
        for values in zip(*columns, strict=True):
            row = new(Row, values)
            row.__fields__ = names
            rows.append(row)
        yield rows


class _Task:
    """What each Python worker runs: ``task`` over the partition's rows, its result
    pickled into a one-row batch."""

    def __init__(
        self, task: Callable[[Iterable[Any]], Any], names: list[str], as_dicts: bool, chunked: bool
    ) -> None:
        self.task = task
        self.names = names
        self.as_dicts = as_dicts
        self.chunked = chunked

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        chunks = batch_chunks(batches, self.names, as_dicts=self.as_dicts)
        result = self.task(chunks if self.chunked else _flat(chunks))
        column = pa.array([pickle.dumps(result)], pa.binary())
        yield pa.RecordBatch.from_arrays([column], names=["result"])


def _flat(chunks: Iterator[Sequence[Any]]) -> Iterator[Any]:
    for chunk in chunks:
        yield from chunk
