"""Rows to JSON entry bytes, and entry bytes to request bodies.

Each written element is encoded once, when the writer accepts it: a request body is then
only the entries joined (``[e1,e2,...]`` for JSON, ``e1\\ne2\\n...`` for NDJSON), and the
entry's size is the length of its bytes. A run of dicts or rows is encoded as one JSON
array and kept that way (``PackedEntries``): a JSON body of some of its entries is then
one slice of it. Encoding is orjson's (about 5 times faster than
the standard ``json`` module on typical rows).

How values are encoded:

- Spark ``Row`` (anything with ``asDict``), mappings, dataclasses and named tuples become
  JSON objects, nested ones included; lists and tuples become arrays; map keys that are
  not strings (integers, dates...) become strings.
- ``datetime``, ``date`` and ``time`` in ISO 8601; a naive ``datetime`` stays without an
  offset (PySpark gives a ``TimestampType`` value as one, in the Python worker's local
  time zone, not the session's); ``timedelta`` as an ISO 8601 duration of seconds, exact
  to the microsecond (``PT90.5S``).
- ``Decimal`` as a string (``"12.50"``), or as an exact JSON number with
  ``decimalAs=number``.
- ``bytes``, ``bytearray`` and ``memoryview`` in base64.
- Floats NaN and infinities as ``null`` (JSON has no such numbers).

Map keys that would become the same JSON key (``{1: "a", "1": "b"}``) are refused, as a
value that cannot be encoded is: one of the two values would be lost (see
``asyncsink.sinks.json_keys``).

A value that cannot be encoded raises ``EntryEncodingError`` naming the field that holds it
(``order.lines[2].price``); the writer turns that into a bad record with its position.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import orjson

from asyncsink.arrow_rows import ArrowRows
from asyncsink.packed import PackedEntries
from asyncsink.rows import fields_of, unique_fields
from asyncsink.sinks.json_keys import key_collision

from .arrow_json import ArrowJsonEntries

__all__ = ["EntryEncodingError", "JsonEntryEncoder", "frame_json", "frame_ndjson"]

_OPTIONS = orjson.OPT_NON_STR_KEYS
"""For elements with keys that are not text; the others are encoded without options."""


class EntryEncodingError(TypeError):
    """An element holds a value the encoder cannot turn into JSON.

    ``field`` is the path of that value inside the element (``""`` for the element itself),
    ``value_type`` the name of its type.
    """

    def __init__(self, field: str, value_type: str, reason: str) -> None:
        self.field = field
        self.value_type = value_type
        where = f"field {field!r}" if field else "the element"
        super().__init__(f"{where}: cannot encode a value of type {value_type} as JSON ({reason})")


def _duration(value: dt.timedelta) -> str:
    """``PT<seconds>S``, exact to the microsecond (a float of the seconds is not, beyond
    about 270 years)."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    decimals = f".{fraction:06d}".rstrip("0") if fraction else ""
    return f"{sign}PT{seconds}{decimals}S"


def _common(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "asDict"):
        return fields_of(value)  # nested rows come back here, each checked
    if isinstance(value, tuple):
        named = getattr(value, "_asdict", None)
        return named() if named is not None else list(value)
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _default_decimal_string(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    return _common(value)


def _default_decimal_number(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise TypeError(f"Decimal {value} has no JSON number form")
        return orjson.Fragment(str(value).encode("ascii"))
    return _common(value)


class JsonEntryEncoder:
    """Encodes one element to compact JSON bytes (see the module docstring for the rules).

    Raises:
        EntryEncodingError: from ``__call__``, naming the field whose value cannot be
            encoded.
    """

    def __init__(self, *, decimal_as: Literal["string", "number"] = "string") -> None:
        self.decimal_as = decimal_as
        self._default: Callable[[Any], Any] = (
            _default_decimal_number if decimal_as == "number" else _default_decimal_string
        )
        self._arrow = ArrowJsonEntries(decimal_as=decimal_as, default=self._default)

    def __call__(self, element: Any) -> bytes:
        if type(element) is not dict:
            as_dict = getattr(element, "asDict", None)
            if as_dict is not None and unique_fields(element):
                element = as_dict()  # nested rows reach ``default`` and are converted there
        try:
            data = orjson.dumps(element, default=self._default)
        except TypeError:
            data = self._encode_other_keys(element)
        # orjson hands back its oversized output buffer; buffering thousands of them
        # makes each allocation slow, so keep a right-sized copy instead.
        return memoryview(data).tobytes()

    def _encode_other_keys(self, element: Any) -> bytes:
        """Encode an element refused for holding a key that is not text, or a value
        with no JSON form: keys as text, unless two of a mapping become one."""
        try:
            data = orjson.dumps(element, default=self._default, option=_OPTIONS)
        except TypeError as exc:
            raise self._explain(element, exc) from exc
        clash = key_collision(element, self._default)
        if clash is not None:
            raise EntryEncodingError(clash.path, "dict", clash.reason)
        return data

    def encode_all(self, elements: Sequence[Any]) -> Sequence[bytes]:
        """Encode a run of elements: the same bytes as calling the encoder on each, in
        one JSON array kept as ``PackedEntries`` when they are all plain dicts or all
        Spark rows of one schema, and a column at a time, with no dict built, for the
        rows of an Arrow record batch (``ArrowRows``; see ``arrow_json``).

        Raises:
            EntryEncodingError: some element cannot be encoded (call the encoder on each
                to learn which, and why).
        """
        if isinstance(elements, ArrowRows):
            entries = self._arrow(elements)
            if entries is not None:
                return entries
            elements = elements.rows()
        first = elements[0] if elements else None
        fields = getattr(first, "__fields__", None) if hasattr(first, "asDict") else None
        try:
            if (
                fields is not None
                and unique_fields(first)
                and all(getattr(element, "__fields__", None) is fields for element in elements)
            ):
                # What Row.asDict() does, for rows that share their field names.
                return self._encode_dicts(
                    [dict(zip(fields, row, strict=False)) for row in elements]
                )
            if list(map(type, elements)).count(dict) == len(elements):
                return self._encode_dicts(elements if type(elements) is list else list(elements))
        except TypeError:
            pass  # a key that is not text, or a value with no JSON form: one at a time
        return [self(element) for element in elements]

    def _encode_dicts(self, dicts: list[dict[str, Any]]) -> Sequence[bytes]:
        """Dicts encoded by one ``orjson.dumps`` of the whole run, kept as the spans of
        its objects: the same bytes as encoding each alone, at a fraction of the cost.

        The run's JSON is ``[{...},{...}]``: its objects are parted by the ``},{``
        between them, exactly one fewer than the dicts; when a value holds that sequence
        too (a string, a list of objects), there are more, and each dict is encoded
        alone.

        Raises:
            TypeError: a key that is not text, or a value with no JSON form.
        """
        dumps, default = orjson.dumps, self._default
        data = dumps(dicts, default=default)
        packed = _objects_of(data, len(dicts))
        if packed is not None:
            return packed
        return [memoryview(dumps(row, default=default)).tobytes() for row in dicts]

    def _explain(self, element: Any, exc: TypeError) -> EntryEncodingError:
        found = self._find(element, "", 0)
        if found is None:
            return EntryEncodingError("", type(element).__name__, str(exc))
        path, value, reason = found
        return EntryEncodingError(path, type(value).__name__, reason)

    def _find(self, value: Any, path: str, depth: int) -> tuple[str, Any, str] | None:
        """The first value under ``value`` that does not encode, with its path."""
        if depth > 254:
            return path, value, "nested too deeply"
        children: list[tuple[str, Any]]
        if isinstance(value, Mapping):
            children = [(_join(path, str(k)), v) for k, v in value.items()]
        elif isinstance(value, list | tuple) and not hasattr(value, "asDict"):
            if hasattr(value, "_asdict"):
                children = [(_join(path, k), v) for k, v in value._asdict().items()]
            else:
                children = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            children = [(_join(path, f.name), getattr(value, f.name))
                        for f in dataclasses.fields(value)]  # fmt: skip
        else:
            try:
                orjson.dumps(value, default=self._default, option=_OPTIONS)
            except TypeError as exc:
                if isinstance(value, int):
                    return path, value, "an integer beyond the 64-bit range"
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
        if isinstance(value, Mapping):
            for key in value:
                if not _is_native({key: 0}):
                    where = f"{path}[<{type(key).__name__} key>]"
                    return where, key, "a map key of this type has no JSON form"
        return None


def _is_native(value: Any) -> bool:
    try:
        orjson.dumps(value, option=_OPTIONS)
    except TypeError:
        return False
    return True


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


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


def frame_json(entries: Sequence[bytes]) -> bytes:
    """A JSON array of the entries: ``[e1,e2,...]``."""
    if type(entries) is PackedEntries and entries.separator == b",":
        return entries.joined(b"[", b"]")
    return b"[" + b",".join(entries) + b"]"


def frame_ndjson(entries: Sequence[bytes]) -> bytes:
    """Newline-delimited JSON: every entry on its own line, each line ending in ``\\n``."""
    if type(entries) is PackedEntries and entries.separator == b"\n":
        return entries.joined(suffix=b"\n")
    return b"\n".join(entries) + b"\n"
