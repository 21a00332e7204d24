"""The rows of an Arrow record batch, as a sequence of dicts that are built only when asked.

A partition read through Arrow (``asyncsink.spark.arrow``) reaches a writer that takes
dicts (``takes_mappings``) as one ``ArrowRows`` per record batch. Taken row by row, it
gives the very dicts ``batch.to_pylist()`` gives, building them once; a writer that can
convert columns at once reads ``batch`` and ``names`` instead and builds no dict at all
(the HTTP sink encodes JSON entries that way).

A column may hold the JSON text of several adjacent fields, made by Spark
(``asyncsink.spark.json_columns``): its field's metadata says so (``JSON_TEXT``) and
names those fields (``JSON_FIELDS``). ``names`` lists every field, and a row's dict
holds, for those fields, the values their text reads back as (the contract's JSON
values: a timestamp as its text); ``field_values`` reads one field of every row.

Slicing is cheap and copies nothing: a slice is an ``ArrowRows`` over the same batch,
which knows the batch it was cut from (``source``) and where (``start``), so a sink can
convert the whole batch once and hand each slice its share.

pyarrow is imported by whoever builds the batch; this module needs none of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JSON_FIELDS", "JSON_TEXT", "ArrowRow", "ArrowRows", "field_names", "json_text_marker"]

JSON_TEXT = b"asyncsink.json"
"""The key, in an Arrow field's metadata, that marks a string column as JSON text: each
value is a JSON object, the JSON contract's text of several fields of the row (in
order, none missing), made under the contract that the key's value names
(``json_text_marker``). The encoder splices the object's fields into the row as they
are."""
JSON_FIELDS = b"asyncsink.fields"
"""The key, beside ``JSON_TEXT``, whose value is the JSON list of the fields' names."""


def json_text_marker(utc: bool, decimal_as: str) -> bytes:
    """The value of ``JSON_TEXT`` for text made under a contract: the contract's choices
    that nested text depends on (timestamps in UTC or not, decimals as numbers or
    strings)."""
    return f"{'utc' if utc else 'zoned'};{decimal_as}".encode()


class ArrowRow(dict[str, Any]):
    """One row of ``ArrowRows``: the dict of its fields, which also knows the rows of the
    whole batch it came from (``source``) and its place there (``index``), so that an
    encoder can convert it as part of its batch."""

    __slots__ = ("index", "source")

    source: ArrowRows
    index: int


class ArrowRows(Sequence[dict[str, Any]]):
    """A read-only sequence of the rows of one Arrow record batch, each a dict of its
    fields (``names`` -> value), equal to the rows of ``batch.to_pylist()`` with maps as
    dicts (an ``ArrowRow``).

    Args:
        batch: the ``pyarrow.RecordBatch`` holding the rows.
        names: the field names (the batch's own when omitted: one per column, and those
            a column of JSON text holds); a batch whose columns are named otherwise is
            given these names.
    """

    __slots__ = ("_batch", "_rows", "_source", "_stop", "names", "start")

    names: tuple[str, ...]
    """The field names, in order (the keys of each row's dict)."""
    start: int
    """Where this sequence's first row is in ``source``."""

    def __init__(self, batch: pa.RecordBatch, names: Sequence[str] | None = None) -> None:
        own = field_names(batch.schema)
        if names is not None and list(names) != own:
            if len(own) != batch.num_columns:
                raise ValueError(f"the batch holds the fields {own}, not {list(names)}")
            batch = batch.rename_columns(list(names))  # keeps the fields' metadata
            own = list(names)
        self._batch: pa.RecordBatch | None = batch
        self._rows: list[dict[str, Any]] | None = None
        self.names = tuple(own)
        self._source: ArrowRows | None = None  # not itself: no cycle keeps a batch alive
        self.start = 0
        self._stop: int = batch.num_rows

    @classmethod
    def _slice(cls, source: ArrowRows, start: int, stop: int) -> ArrowRows:
        rows = cls.__new__(cls)
        rows._batch = None  # sliced from the source's batch when asked for
        rows._rows = None
        rows.names = source.names
        rows._source = source
        rows.start = start
        rows._stop = stop
        return rows

    @property
    def source(self) -> ArrowRows:
        """The rows of the whole batch this one was sliced from (itself, when not a
        slice)."""
        return self if self._source is None else self._source

    @property
    def batch(self) -> pa.RecordBatch:
        """The record batch of these rows (a zero-copy slice of the source's batch)."""
        if self._batch is None:
            self._batch = self.source.batch.slice(self.start, self._stop - self.start)
        return self._batch

    def __len__(self) -> int:
        return self._stop - self.start

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> ArrowRows: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | ArrowRows:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return ArrowRows(self.batch.take(list(range(start, stop, step))), self.names)
            begin = self.start + start
            return ArrowRows._slice(self.source, begin, max(begin, self.start + stop))
        return self.rows()[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows())

    def rows(self) -> list[dict[str, Any]]:
        """The rows as a list of dicts, built on the first call and kept (the dicts are
        shared with later calls: do not change them)."""
        if self._rows is None:
            whole = self._source._rows if self._source is not None else None
            if whole is not None:  # the source's rows were built: share its dicts
                self._rows = whole[self.start : self._stop]
            else:
                self._rows = self._build()
        return self._rows

    def _build(self) -> list[dict[str, Any]]:
        source, start = self.source, self.start
        try:
            values = self.batch.to_pylist(maps_as_pydicts="strict")
        except ValueError:  # text that is not UTF-8 (UnicodeDecodeError) among them
            values = [self._row_by_values(index) for index in range(len(self))]
        if len(self.names) != self.batch.num_columns:
            values = [self._fields_of(row) for row in values]
        rows: list[dict[str, Any]] = []
        for offset, fields in enumerate(values):
            row = ArrowRow(fields)
            row.source, row.index = source, start + offset
            rows.append(row)
        return rows

    def _fields_of(self, columns: dict[str, Any]) -> dict[str, Any]:
        """A row's fields from its columns' values, the JSON text of several read back."""
        import orjson

        fields: dict[str, Any] = {}
        for field in self.batch.schema:
            value = columns[field.name]
            if field.metadata and JSON_TEXT in field.metadata:
                fields.update(orjson.loads(value))
            else:
                fields[field.name] = value
        return fields

    def field_values(self, name: str) -> list[Any]:
        """The value of field ``name`` in each row, as the rows' dicts hold it.

        Raises:
            KeyError: no field has that name.
        """
        schema = self.batch.schema
        index = schema.get_field_index(name)
        if index >= 0 and not (schema.field(index).metadata or {}).get(JSON_TEXT):
            return list(self.batch.column(index).to_pylist(maps_as_pydicts="strict"))
        if name not in self.names:
            raise KeyError(name)
        return [row[name] for row in self.rows()]

    def _row_by_values(self, index: int) -> dict[str, Any]:
        """Row ``index`` value by value: a string that is not UTF-8 keeps its bytes, so
        that the row can still be reported (a bad record, a dead letter) as it is."""
        import pyarrow as pa

        fields: dict[str, Any] = {}
        for name, column in zip(self.batch.schema.names, self.batch.columns, strict=True):
            try:
                fields[name] = column[index].as_py(maps_as_pydicts="strict")
            except ValueError:
                fields[name] = column.view(pa.binary())[index].as_py()
        return fields

    def __repr__(self) -> str:
        return f"ArrowRows({len(self)} rows, names={list(self.names)!r})"


def field_names(schema: pa.Schema) -> list[str]:
    """The fields of the rows of a batch of ``schema``: a column's name, or the names a
    column of JSON text holds (``JSON_FIELDS``)."""
    import orjson

    names: list[str] = []
    for field in schema:
        held = field.metadata.get(JSON_FIELDS) if field.metadata else None
        names.extend(orjson.loads(held) if held is not None else [field.name])
    return names
