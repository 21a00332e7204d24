"""Mapping keys that would become one JSON key.

JSON object keys are text. The sinks write other keys as text too (orjson's
``OPT_NON_STR_KEYS``: ``1`` as ``"1"``, ``True`` as ``"true"``, ``None`` as ``"null"``, a
date in ISO 8601), and orjson does not look for duplicates: ``{1: "a", "1": "b"}`` would
be written as ``{"1":"a","1":"b"}``, and a reader keeps only one of the two values. Such
an element is a bad record, with the mapping's path and the two keys as the reason.

Looking costs a walk over the element, so the sinks only look when there is something to
find: they first encode without ``OPT_NON_STR_KEYS``, which refuses any key that is not
text (and is faster), and only when that fails encode again with it and call
``key_collision``.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

__all__ = ["KeyCollision", "key_collision"]

_LEAVES = frozenset(
    {str, int, float, bool, type(None), datetime.date, datetime.datetime, datetime.time, uuid.UUID}
)
"""Types that hold no mapping (other values are looked into, or passed to ``default``)."""
_MAX_DEPTH = 255  # orjson refuses deeper nesting
_DISTINCT_TEXT = frozenset({str, int})
"""Key types whose distinct values are always written as distinct text: keys all of one
of these types cannot collide. Not floats: NaN and both infinities are all written
``"null"``."""


class KeyCollision(NamedTuple):
    """Two keys of the mapping at ``path`` (``""`` for the element itself) that become the
    same JSON key; ``reason`` says so in words."""

    path: str
    first: Any
    second: Any
    json_key: str

    @property
    def reason(self) -> str:
        shown = orjson.dumps(self.json_key).decode()
        return (
            f"keys {_show(self.first)} and {_show(self.second)} both become the JSON key "
            f"{shown}; one of the values would be lost"
        )


def key_collision(value: Any, default: Callable[[Any], Any]) -> KeyCollision | None:
    """The first pair of keys in ``value`` (nested mappings, lists and tuples included,
    and what ``default``, the encoder's fallback, turns other values into) that become
    one JSON key; ``None`` if there is none. ``value`` is one orjson has just encoded
    with ``default``."""
    found = _walk(value, default, 0)
    if found is None:
        return None
    steps, first, second, text = found
    path = "".join(reversed(steps))
    return KeyCollision(path[1:] if path.startswith(".") else path, first, second, text)


_Found = tuple[list[str], Any, Any, str]
"""A collision found by ``_walk``: the steps of its path from the inside out (``.name``,
``[index]``), the two keys and their JSON text."""


def _walk(value: Any, default: Callable[[Any], Any], depth: int) -> _Found | None:
    if depth > _MAX_DEPTH or type(value) in _LEAVES:
        return None
    children: Any
    if isinstance(value, dict):
        kinds = {type(key) for key in value}
        if len(kinds) > 1 or not kinds <= _DISTINCT_TEXT:
            found = _collision(value)
            if found is not None:
                return found
        children = value.items()
    elif isinstance(value, list | tuple):
        children = enumerate(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    else:
        try:
            converted = default(value)
        except TypeError:
            return None  # encoded as it is (an enum, a Fragment...)
        return None if converted is value else _walk(converted, default, depth + 1)
    for name, child in children:
        if type(child) in _LEAVES:
            continue
        found = _walk(child, default, depth + 1)
        if found is not None:
            found[0].append(f"[{name}]" if isinstance(value, list | tuple) else f".{name}")
            return found
    return None


def _collision(mapping: dict[Any, Any]) -> _Found | None:
    seen: dict[str, Any] = {}
    for key in mapping:
        text = key if type(key) is str else _json_key(key)
        if text in seen:
            return [], seen[text], key, text
        seen[text] = key
    return None


def _json_key(key: Any) -> str:
    """The text orjson writes for a key that is not text."""
    if type(key) is int:
        return str(key)
    if key is None or type(key) is bool:
        return "null" if key is None else "true" if key else "false"
    written: dict[str, Any] = orjson.loads(orjson.dumps({key: 0}, option=orjson.OPT_NON_STR_KEYS))
    return next(iter(written))


def _show(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."
