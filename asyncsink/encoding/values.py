"""Python values to JSON entry bytes, under the same contract as Arrow columns.

Rows read from Spark are encoded a record batch at a time (``arrow``); this encoder
serves what comes as Python objects: the dicts and ``Row`` objects a user writes, and the
rows of a record batch one at a time (an ``ArrowRow`` is encoded as part of its batch, so
its bytes are the batch's).

Python values follow the table in ``contract``: a ``Row``, mapping, dataclass or named
tuple is an object; a list or tuple an array; an aware ``datetime`` a timestamp (UTC, or
the contract's zone), a naive one a TIMESTAMP_NTZ; ``date``, ``time``, ``timedelta``,
``Decimal``, bytes, non-finite floats, Spark's ``VariantVal`` and Arrow's
``MonthDayNano`` as the table says. A run of plain dicts (or of rows of one schema) is
encoded with one ``orjson.dumps`` and kept as ``PackedEntries``.

Map keys that are not strings are written as their JSON text; two keys of one mapping
that become the same text (``{1: "a", "1": "b"}``) are refused, as a value that cannot
be encoded is: ``EntryEncodingError`` names the field that holds it
(``order.lines[2].price``), and the writer makes the element a bad record.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import math
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from ..entries.arrow_rows import ArrowRow, ArrowRows
from ..entries.packed import PackedEntries
from ..entries.rows import fields_of, row_dict
from .arrow import encode_batch
from .errors import EntryEncodingError
from .json_rules import JsonContract
from .text import duration_text, interval_text, time_text, timestamp_text, variant_text

__all__ = ["JsonEntryEncoder"]

_PASS = orjson.OPT_PASSTHROUGH_DATETIME
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_MAX_DEPTH = 254


class JsonEntryEncoder:
    """Encodes one element to compact JSON bytes under ``contract`` (see the module
    docstring).

    Raises:
        EntryEncodingError: from ``__call__`` and ``encode_all``, naming the field whose
            value cannot be encoded.
    """

    def __init__(self, contract: JsonContract | None = None) -> None:
        self.contract = contract or JsonContract()
        self._default = _default_for(self.contract)
        self._batches = _BatchCache(self.contract)

    def __call__(self, element: Any) -> bytes:
        if type(element) is ArrowRow:
            return self._batches.entry(element)
        if type(element) is not dict:
            fields = row_dict(element) if hasattr(element, "asDict") else None
            if fields is not None:
                element = fields  # nested rows reach ``default`` and are converted there
        try:
            data = orjson.dumps(element, default=self._default, option=_PASS)
        except TypeError:
            data = self._prepared(element)
        else:
            if b"null" in data and _has_non_finite(element, 0):
                data = self._prepared(element)
        # orjson hands back its oversized output buffer; buffering thousands of them
        # makes each allocation slow, so keep a right-sized copy instead.
        return memoryview(data).tobytes()

    def _prepared(self, element: Any) -> bytes:
        """Encode an element refused as it is: keys as text, non-finite floats as
        strings, integers beyond 64 bits as exact numbers."""
        try:
            prepared = _Prepare(self._default, self).value(element, "", 0)
            return orjson.dumps(prepared, default=self._default, option=_PASS)
        except EntryEncodingError:
            raise
        except TypeError as exc:
            raise self._explain(element, exc) from exc

    def encode_all(self, elements: Sequence[Any]) -> Sequence[bytes]:
        """Encode a run of elements: the same bytes as calling the encoder on each; the
        rows of an Arrow record batch (``ArrowRows``) a column at a time, and a run of
        plain dicts or of Spark rows of one schema with one ``orjson.dumps``, both kept
        as ``PackedEntries``.

        Raises:
            EntryEncodingError: some element cannot be encoded (call the encoder on each
                to learn which, and why).
        """
        if isinstance(elements, ArrowRows):
            return self._batches.entries(elements)
        first = elements[0] if elements else None
        dicts = _row_dicts(elements) if hasattr(first, "asDict") else None
        if dicts is not None:
            return self._encode_dicts(dicts)
        if list(map(type, elements)).count(dict) == len(elements):
            return self._encode_dicts(elements if type(elements) is list else list(elements))
        return [self(element) for element in elements]

    def _encode_dicts(self, dicts: list[dict[str, Any]]) -> Sequence[bytes]:
        """Dicts encoded by one ``orjson.dumps`` of the whole run, kept as the spans of
        its objects: the same bytes as encoding each alone, at a fraction of the cost.

        The run's JSON is ``[{...},{...}]``: its objects are parted by the ``},{``
        between them, exactly one fewer than the dicts; when a value holds that sequence
        too (a string, a list of objects), there are more, and each dict is encoded
        alone, as it is when one needs a closer look (a key that is not text, a float
        that is not finite).
        """
        try:
            data = orjson.dumps(dicts, default=self._default, option=_PASS)
        except TypeError:
            return [self(row) for row in dicts]
        if _may_hold_null(data) and b"null" in data and _has_non_finite(dicts, 0):
            return [self(row) for row in dicts]
        packed = _objects_of(data, len(dicts))
        if packed is not None:
            return packed
        return [self(row) for row in dicts]

    def _explain(self, element: Any, exc: TypeError) -> EntryEncodingError:
        found = self._find(element, "", 0)
        if found is None:
            return EntryEncodingError("", type(element).__name__, str(exc))
        path, value, reason = found
        return EntryEncodingError(path, type(value).__name__, reason)

    def _find(self, value: Any, path: str, depth: int) -> tuple[str, Any, str] | None:
        """The first value under ``value`` that does not encode, with its path."""
        if depth > _MAX_DEPTH:
            return path, value, "nested too deeply"
        children = _children(value, path)
        if children is None:
            try:
                orjson.dumps(value, default=self._default, option=_PASS)
            except TypeError as exc:
                if isinstance(value, str):  # a lone surrogate: not text UTF-8 can hold
                    return path, value, str(exc)
                try:
                    converted = self._default(value)
                except TypeError as refused:
                    return path, value, str(refused)
                return self._find(converted, path, depth + 1) or (path, value, str(exc))
            return None
        for child_path, child in children:
            found = self._find(child, child_path, depth + 1)
            if found is not None:
                return found
        return None


def _children(value: Any, path: str) -> list[tuple[str, Any]] | None:
    """The values inside a container, with their paths; ``None`` for a leaf."""
    if hasattr(value, "asDict"):
        return [(_join(path, k), v) for k, v in fields_of(value).items()]
    if isinstance(value, Mapping):
        return [(_join(path, str(k)), v) for k, v in value.items()]
    if isinstance(value, list | tuple):
        if hasattr(value, "_asdict"):
            return [(_join(path, k), v) for k, v in value._asdict().items()]
        return [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(_join(path, f.name), getattr(value, f.name)) for f in dataclasses.fields(value)]
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _has_non_finite(value: Any, depth: int) -> bool:
    """Whether a float that is NaN or infinite is anywhere in ``value``."""
    kind = type(value)
    if kind is float:
        return not math.isfinite(value)
    if kind in (str, int, bool) or value is None or depth > _MAX_DEPTH:
        return False
    if isinstance(value, Mapping):
        return any(_has_non_finite(item, depth + 1) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(item, depth + 1) for item in value)
    if hasattr(value, "asDict"):
        return any(_has_non_finite(item, depth + 1) for item in value)
    if isinstance(value, float):
        return not math.isfinite(value)
    return False


class _Prepare:
    """A copy of an element that orjson encodes under the contract: mapping keys as
    their JSON text, non-finite floats as strings, integers beyond 64 bits exact."""

    def __init__(self, default: Callable[[Any], Any], encoder: JsonEntryEncoder) -> None:
        self.default = default
        self.encoder = encoder

    def value(self, value: Any, path: str, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise EntryEncodingError(path, type(value).__name__, "nested too deeply")
        kind = type(value)
        if kind is float:
            return value if math.isfinite(value) else _NON_FINITE.get(value, "NaN")
        if kind is int:
            return orjson.Fragment(str(value).encode()) if abs(value) >= 2**63 else value
        if kind in (str, bool) or value is None:
            return value
        if hasattr(value, "asDict"):
            try:
                value = fields_of(value)
            except TypeError as exc:
                raise EntryEncodingError(path, "Row", str(exc)) from exc
        if isinstance(value, Mapping):
            return self.mapping(value, path, depth)
        if isinstance(value, list | tuple) and not hasattr(value, "_asdict"):
            return [self.value(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
        if isinstance(value, float):
            return self.value(float(value), path, depth)
        try:
            converted = self.default(value)
        except TypeError:
            return value  # orjson encodes it as it is, or says why not
        return converted if converted is value else self.value(converted, path, depth + 1)

    def mapping(self, value: Mapping[Any, Any], path: str, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        keys: dict[str, Any] = {}
        for key, item in value.items():
            text = key if type(key) is str else self.key(key, path)
            if text in keys:
                raise EntryEncodingError(
                    path, type(value).__name__,
                    f"keys {keys[text]!r} and {key!r} both become the JSON key "
                    f"{orjson.dumps(text).decode()}; one of the values would be lost",
                )  # fmt: skip
            keys[text] = key
            result[text] = self.value(item, _join(path, text), depth + 1)
        return result

    def key(self, key: Any, path: str) -> str:
        """A key's JSON text, or a JSON string key's content (a date)."""
        if isinstance(key, Mapping | list) or hasattr(key, "asDict"):
            raise EntryEncodingError(
                f"{path}[<{type(key).__name__} key>]", type(key).__name__,
                "a map key of this type has no JSON form",
            )  # fmt: skip
        try:
            text = self.encoder({"": key})[4:-1]  # {"":<text>}
        except EntryEncodingError:
            raise EntryEncodingError(
                f"{path}[<{type(key).__name__} key>]", type(key).__name__,
                "a map key of this type has no JSON form",
            ) from None  # fmt: skip
        return str(orjson.loads(text)) if text.startswith(b'"') else text.decode()


def _default_for(contract: JsonContract) -> Callable[[Any], Any]:
    zone = None if contract.utc else zoneinfo.ZoneInfo(contract.time_zone)
    as_string = contract.decimal_as == "string"

    def default(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return timestamp_text(value, zone)
        if isinstance(value, dt.date):
            return value.isoformat()
        if isinstance(value, dt.time):
            return time_text(value)
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise TypeError(f"Decimal {value} has no JSON form")
            return str(value) if as_string else orjson.Fragment(str(value).encode("ascii"))
        return _common(value)

    return default


def _row_dicts(rows: Sequence[Any]) -> list[dict[str, Any]] | None:
    """The ``asDict()`` of each row; ``None`` when one is no ``Row``, or two of its fields
    share a name (the rows are then encoded one by one, which names the bad one)."""
    try:
        dicts = [row.asDict() for row in rows]
        if all(len(fields) == len(row) for fields, row in zip(dicts, rows, strict=True)):
            return dicts
    except (AttributeError, TypeError):
        pass
    return None


def _common(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "asDict"):
        return fields_of(value)  # nested rows come back here, each checked
    if isinstance(value, dt.timedelta):
        return duration_text(value)
    if type(value).__name__ == "MonthDayNano":
        return interval_text(value)
    if type(value).__name__ == "VariantVal":
        return orjson.Fragment(variant_text(value))
    if isinstance(value, tuple):
        named = getattr(value, "_asdict", None)
        return named() if named is not None else list(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


class _BatchCache:
    """The entries of the record batch last asked for, encoded whole once: a writer
    takes a batch a slice at a time, and a row at a time when it replays or looks for a
    bad record."""

    def __init__(self, contract: JsonContract) -> None:
        self.contract = contract
        self._source: ArrowRows | None = None
        self._entries: PackedEntries | EntryEncodingError | None = None

    def _encoded(self, source: ArrowRows) -> PackedEntries | EntryEncodingError:
        if source is not self._source or self._entries is None:
            self._source = source
            try:
                self._entries = encode_batch(source.batch, self.contract, list(source.names))
            except EntryEncodingError as exc:
                self._entries = exc
        return self._entries

    def entries(self, rows: ArrowRows) -> Sequence[bytes]:
        encoded = self._encoded(rows.source)
        if isinstance(encoded, EntryEncodingError):
            raise encoded
        return encoded[rows.start : rows.start + len(rows)]

    def entry(self, row: ArrowRow) -> bytes:
        source = row.source
        encoded = self._encoded(source)
        if not isinstance(encoded, EntryEncodingError):
            return encoded[row.index]
        one = source.batch.slice(row.index, 1)  # the batch holds a bad value: is it here?
        return encode_batch(one, self.contract, list(source.names))[0]


_NU, _UL, _LL = (int.from_bytes(pair, "little") for pair in (b"nu", b"ul", b"ll"))
_SIFTED = 4096  # bytes; below, numpy's calls cost more than the search they spare


def _may_hold_null(data: bytes) -> bool:
    """``False`` when ``data`` cannot hold ``null`` (orjson's text for None, NaN and the
    infinities), so the search for it can be skipped.

    ``b"null" in data`` takes about 2.4 instructions a byte, in branches the processor
    mispredicts: 4-10% of the HTTP sink's CPU per entry at 0 ms. A ``null`` at an even
    offset has ``nu`` and ``ll`` at even offsets; at an odd one, ``ul``. numpy compares
    the byte pairs at even offsets in a twentieth of that time, and a run holding none of
    these pairs needs no search.
    """
    if len(data) < _SIFTED:
        return True
    import numpy as np

    pairs = np.frombuffer(data, "<u2", len(data) // 2)
    return bool((pairs == _UL).any() or ((pairs == _NU).any() and (pairs == _LL).any()))


def _objects_of(data: bytes, count: int) -> PackedEntries | None:
    """The ``count`` objects of the JSON array ``data`` (``[{...},{...}]``, as orjson
    writes it) as ``PackedEntries``, or ``None`` when ``},{`` occurs other than between
    them. Found by numpy, a few passes over the bytes with no Python work per object."""
    import numpy as np

    codes = np.frombuffer(data, np.uint8)
    # Each "{" but the first (after "[") that follows "}," opens the next object. Found
    # from the "{" of the run, which are fewer than its ",": numpy lists them faster.
    commas = np.flatnonzero(codes == 123)[1:] - 1
    commas = commas[(codes[commas] == 44) & (codes[commas - 1] == 125)]
    if len(commas) != count - 1:
        return None
    # The byte before each object ("[" or ","), then the closing "]".
    bounds = np.empty(count + 1, np.int64)
    bounds[0], bounds[1:count], bounds[count] = 0, commas, len(data) - 1
    return PackedEntries(data, bounds[:-1] + 1, bounds[1:])
