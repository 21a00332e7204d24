"""The test endpoint's stand-in for index mappings, and index name rules.

Per index, the first non-null value seen for a field path (``a.b`` inside objects; array
elements count as the field itself) fixes its JSON kind: string, number (integers and
floats mix), boolean or object. A later document giving the field another kind is a
mapping error, as a dynamically mapped Elasticsearch index would report it.

Besides the kinds, an index keeps ``accept``: for each top-level scalar field, the Python
types its values may have. A flat document whose every value passes ``accept`` needs no
further check, which keeps the common case to one dict lookup per field.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["MARKER_FIELD", "index_name_problem", "mapping_problem"]

MARKER_FIELD = "_bad"

_KIND: dict[type, str] = {
    str: "text",
    int: "long",
    float: "float",
    bool: "boolean",
    dict: "object",
}
_FAMILY = {"text": "string", "long": "number", "float": "number", "boolean": "bool", "object": "o"}
_NONE = type(None)
_ACCEPT: dict[str, frozenset[type]] = {
    "text": frozenset({str, _NONE}),
    "long": frozenset({int, float, _NONE}),
    "float": frozenset({int, float, _NONE}),
    "boolean": frozenset({bool, _NONE}),
}
_BAD_INDEX_CHARS = frozenset('\\/*?"<>| ,#:')


def mapping_problem(
    fields: dict[str, str],
    accept: dict[str, frozenset[type]],
    source: dict[str, Any],
    doc_id: str,
) -> str | None:
    """Why ``source`` does not fit ``fields``, or None after recording its new fields."""
    new: dict[str, str] = {}
    conflict = _walk(fields, new, source, "")
    if conflict is None:
        if new:
            fields.update(new)
            for key in source:
                types = _ACCEPT.get(fields.get(key, ""))
                if types is not None and key != MARKER_FIELD:
                    accept[key] = types
        return None
    path, existing, value = conflict
    if existing == "object":
        return (
            f"object mapping for [{path}] tried to parse field [{path}] as object, "
            "but found a concrete value"
        )
    preview = orjson.dumps(value).decode()[:40]
    return (
        f"failed to parse field [{path}] of type [{existing}] in document with id "
        f"'{doc_id}'. Preview of field's value: '{preview}'"
    )


def _walk(
    fields: dict[str, str], new: dict[str, str], obj: dict[str, Any], prefix: str
) -> tuple[str, str, Any] | None:
    for key, value in obj.items():
        kind = _KIND.get(type(value))
        if kind is None:
            if type(value) is list:
                for element in value:
                    conflict = _walk(fields, new, {key: element}, prefix)
                    if conflict is not None:
                        return conflict
            continue
        path = prefix + key
        existing = fields.get(path) or new.get(path)
        if existing is None:
            new[path] = kind
        elif existing is not kind and _FAMILY[existing] != _FAMILY[kind]:
            return path, existing, value
        if kind == "object":
            conflict = _walk(fields, new, value, path + ".")
            if conflict is not None:
                return conflict
    return None


def index_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid index name, or None."""
    if name in ("", ".", ".."):
        return f"Invalid index name [{name}], must not be empty, '.' or '..'"
    if name != name.lower():
        return f"Invalid index name [{name}], must be lowercase"
    if name[0] in "_-+":
        return f"Invalid index name [{name}], must not start with '_', '-', or '+'"
    if not _BAD_INDEX_CHARS.isdisjoint(name):
        shown = ", ".join(repr(c) for c in sorted(_BAD_INDEX_CHARS))
        return f"Invalid index name [{name}], must not contain any of [{shown}]"
    if len(name.encode()) > 255:
        return f"Invalid index name [{name}], index name is too long"
    return None
