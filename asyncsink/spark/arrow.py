"""Partitions read through Arrow: rows reach the Python worker as Arrow record batches.

Every DataFrame is read this way, whatever its types: ``df.mapInArrow`` for
``foreach_partition`` and ``foreach_batch``, Spark's Arrow writers for the data sources.
``df.rdd`` would turn every row into Java objects and pickle them one by one in the JVM,
which costs more than everything the writer does with the row, and does not exist under
Spark Connect.

A writer gets each record batch as one chunk (see ``batch_chunks``):

- a writer that takes a dict of a row's fields (``SinkSpec.reads_mappings``, as the
  built-in sinks do) gets ``ArrowRows``, which the JSON sinks encode a column at a time
  with no dict built (``asyncsink.encoding``);
- any other writer gets ``Row`` objects with the values ``df.collect()`` gives, built
  from the batch by PySpark's own Arrow conversion.

For a sink whose entries are the rows' JSON, nested columns are read as JSON text that
Spark makes, where its text is the contract's (see ``json_columns``).

The only type PySpark cannot read through Arrow is ``INTERVAL YEAR TO MONTH``:
``check_columns`` refuses it on the driver, naming the column and the cast to use.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..encoding import JsonContract
from ..entries.arrow_rows import ArrowRows
from .json_columns import JsonPlan, json_plan, mark_json_fields

__all__ = ["batch_chunks", "check_columns", "map_partitions_in_arrow"]


def check_columns(schema: Any) -> None:
    """Refuse, on the driver, a schema whose rows cannot all be sent: two fields of one
    struct (the columns, or a struct column's fields) that share a name (rows are sent by
    field name), a year-month interval (PySpark reads none through Arrow), a map whose
    keys are structs, arrays or maps (JSON keys are text).

    Raises:
        ValueError: the message names the column and what to do.
    """
    for field in schema.fields:
        _check(field.dataType, field.name, field.name)
    _check_names(schema, "columns")


def _check_names(struct: Any, where: str) -> None:
    seen: set[str] = set()
    for f in struct.fields:
        if f.name in seen:
            raise ValueError(
                f"the DataFrame has two {where} named {f.name!r}: rows are sent by "
                "field name, so one of the values would be lost; rename one (with "
                "toDF() or an alias) before writing"
            )
        seen.add(f.name)


def _check(data_type: Any, column: str, path: str) -> None:
    from pyspark.sql import types

    if isinstance(data_type, types.StructType):
        _check_names(data_type, f"fields of {path!r}")
        for f in data_type.fields:
            _check(f.dataType, column, f"{path}.{f.name}")
    elif isinstance(data_type, types.ArrayType):
        _check(data_type.elementType, column, f"{path}[]")
    elif isinstance(data_type, types.MapType):
        if isinstance(data_type.keyType, types.StructType | types.ArrayType | types.MapType):
            raise ValueError(
                f"column {column!r}: the map at {path!r} has keys of type "
                f"{data_type.keyType.simpleString()}, and a JSON key is text; write them as "
                f"text first, e.g. transform_keys({column}, (k, v) -> to_json(k))"
            )
        _check(data_type.keyType, column, f"{path}{{key}}")
        _check(data_type.valueType, column, f"{path}{{value}}")
    elif isinstance(data_type, types.YearMonthIntervalType):
        raise ValueError(
            f"column {column!r}: {path!r} is an INTERVAL YEAR TO MONTH, which PySpark "
            f"cannot read through Arrow; cast it first, e.g. cast({column} as string) or "
            f"the months as a number: cast({column} as int)"
        )


def map_partitions_in_arrow(
    df: Any,
    task: Callable[[Iterable[Any]], Any],
    *,
    as_dicts: bool = False,
    chunked: bool = False,
    json_contract: JsonContract | None = None,
    plain_columns: Sequence[str] = (),
) -> list[Any]:
    """Run ``task`` on the rows of each partition of ``df``, read through Arrow, as
    ``Row`` objects or (``as_dicts``) as dicts of their fields; the list of what each
    partition's ``task`` returned. With ``chunked``, ``task`` gets the rows in sequences,
    one per record batch (see ``batch_chunks``). With ``json_contract`` and ``as_dicts``,
    runs of columns that Spark writes as that contract does come as JSON text (see
    ``json_columns``), but for ``plain_columns`` (read by column, as ordering keys are)."""
    schema = df.schema
    # Read under names of its own: mapInArrow refuses two columns of one name, and
    # cannot resolve a name with a dot in it; the rows get the real names back.
    names = [f"_{i}" for i in range(len(schema.fields))]
    df = df.toDF(*names)
    plan = None
    if json_contract is not None and as_dicts:
        plan = json_plan(schema, json_contract, plain=frozenset(plain_columns))
    if plan is not None and plan.any:
        df = df.selectExpr(*plan.projection(names))
    else:
        plan = None
    run = _Task(task, schema, as_dicts, chunked, plan)
    out = df.mapInArrow(run, "result binary").collect()
    return [pickle.loads(row.result) for row in out]


def batch_chunks(
    batches: Iterable[Any], schema: Any, *, as_dicts: bool, plan: JsonPlan | None = None
) -> Iterator[Sequence[Any]]:
    """The rows of Arrow record batches, one sequence per batch: ``ArrowRows`` (dicts of
    their fields, built when asked for), or lists of ``Row`` objects of ``schema`` (the
    Spark ``StructType`` of the rows), with the values ``df.collect()`` gives. Batches
    read under ``plan`` hold JSON text, marked as such (see ``json_columns``)."""
    names = list(schema.names)
    if as_dicts:
        for batch in batches:
            if plan is not None:
                yield ArrowRows(mark_json_fields(batch, plan))
            else:
                yield ArrowRows(batch, names)
        return
    import pyarrow as pa

    # PySpark has no public way to turn Arrow data into Rows in a worker (without a session):
    # this is the one place that uses its conversion module, the one ``collect()`` uses.
    from pyspark.sql.conversion import ArrowTableToRowsConversion

    for batch in batches:
        table = pa.Table.from_batches([batch])
        yield ArrowTableToRowsConversion.convert(table, schema)


class _Task:
    """What each Python worker runs: ``task`` over the partition's rows, its result
    pickled into a one-row batch."""

    def __init__(
        self,
        task: Callable[[Iterable[Any]], Any],
        schema: Any,
        as_dicts: bool,
        chunked: bool,
        plan: JsonPlan | None = None,
    ) -> None:
        self.task = task
        self.schema = schema
        self.as_dicts = as_dicts
        self.chunked = chunked
        self.plan = plan

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        chunks = batch_chunks(batches, self.schema, as_dicts=self.as_dicts, plan=self.plan)
        result = self.task(chunks if self.chunked else _flat(chunks))
        column = pa.array([pickle.dumps(result)], pa.binary())
        yield pa.RecordBatch.from_arrays([column], names=["result"])


def _flat(chunks: Iterator[Sequence[Any]]) -> Iterator[Any]:
    for chunk in chunks:
        yield from chunk
