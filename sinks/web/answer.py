"""Reading a 2xx answer's JSON and its per-entry items: the one rule the HTTP and
Elasticsearch sinks share.

A 2xx status alone says a request was taken; only an answer that can be read says what
became of each entry. The rule, in order:

1. **The body.** It is parsed as JSON when it can be. One that cannot be parsed is an
   answer cut short or mangled on the way (a proxy, a reset connection) when its
   ``Content-Type`` says JSON (``application/json``, ``text/json``, ``*/*+json``), when it
   has no ``Content-Type`` but opens like a JSON object, or when the protocol always
   answers JSON (``required``, as ``_bulk`` does): ``RetryableError``, and the same call is
   sent again (an empty body typed as JSON included). Otherwise (``OK`` as text, an
   untyped empty body; the HTTP sink never reads a ``204``'s) it is a plain answer, and
   the status says it all.
2. **The items.** A JSON object with ``items`` (or, with ``required``, any answer) must
   list one item per entry, in request order: a list of exactly as many objects, each
   with an integer HTTP ``status`` from 100 to 599 (directly, or inside a one-key
   wrapper such as Elasticsearch's ``{"index": {...}}``; with ``operation``, inside that
   key). An answer that says ``errors`` but lists no items, or whose items do not match
   the request in any of these ways, is complete JSON from a server that does not speak
   the protocol: sending it again would not help, so it is a ``FatalError``.
3. **What counts.** Each item's status decides its entry's fate (the sink maps statuses
   to delivered, retried and rejected); a top-level ``"errors": false`` is only a hint and
   never outweighs an item that failed.

Nothing an answer holds is trusted before it passed these checks, and no entry of an
answer that failed them is counted delivered.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter
from typing import Any, NamedTuple

import orjson

from asyncsink.errors import FatalError, RetryableError

__all__ = ["Items", "load_answer", "read_items", "says_json"]

_STATUS = itemgetter("status")


class Items(NamedTuple):
    """The items of an answer, checked: ``statuses[i]`` is entry *i*'s HTTP status;
    ``body(i)`` the object that carries it (``error``, ``_index``...)."""

    statuses: list[int]
    raw: list[Any]
    operation: str | None

    def body(self, index: int) -> Mapping[str, Any]:
        """The object holding item ``index``'s status."""
        body = _unwrap(self.raw[index], self.operation)
        assert body is not None  # checked by ``read_items``
        return body


def says_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` names a JSON document (a parameter such as ``charset``
    aside)."""
    if not content_type:
        return False
    media = content_type.partition(";")[0].strip().lower()
    return media in ("application/json", "text/json") or media.endswith("+json")


def load_answer(
    content: bytes, *, content_type: str | None, what: str, required: bool = False
) -> Any:
    """The JSON value of a 2xx answer, or ``None`` for a plain answer (text, empty).

    ``what`` names the answer in messages (``"the _bulk answer"``); with ``required`` the
    protocol always answers JSON, so a body that is not JSON is never a plain answer.

    Raises:
        RetryableError: the body should be JSON (see the module docstring) and is not.
    """
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        problem = str(exc)
    stripped = content.lstrip()
    typed = says_json(content_type)
    if not required and not stripped and not typed:
        return None
    if required or typed or (content_type is None and stripped[:1] == b"{"):
        size = "empty" if not content else f"{len(content)} bytes: {problem}"
        raise RetryableError(f"{what} is not valid JSON ({size}); cut short on the way?")
    return None


def read_items(
    payload: Any,
    count: int,
    *,
    what: str,
    unit: str = "entries",
    required: bool = False,
    operation: str | None = None,
) -> Items | None:
    """The items of a parsed 2xx answer to a request of ``count`` ``unit``, one per entry
    in request order; ``None`` when the answer lists no items and need not (``required``
    off, no ``errors`` claimed): then the status says every entry was taken.

    Raises:
        FatalError: the answer lists no items though it must, or they do not match the
            request; the message says how, never what the entries hold.
    """
    cannot_tell = f"cannot tell which {unit} were stored"
    if not isinstance(payload, Mapping):
        if required:
            raise FatalError(f"{what} is {_kind(payload)}, not an object: {cannot_tell}")
        return None
    items = payload.get("items")
    if items is None:
        errors = payload.get("errors")
        claimed = errors is not None and errors is not False
        if required or claimed:
            says = f" says some {unit} failed but" if claimed else ""
            raise FatalError(f"{what}{says} lists no items: {cannot_tell}")
        return None
    if not isinstance(items, list):
        raise FatalError(f"{what}'s items are {_kind(items)}, not an array: {cannot_tell}")
    if len(items) != count:
        raise FatalError(
            f"{what} lists {len(items)} items for a request of {count} {unit}: {cannot_tell}"
        )
    fast = _plain_statuses(items) if operation is None else None
    if fast is not None:
        return Items(fast, items, operation)
    statuses: list[int] = []
    append = statuses.append
    for item in items:  # the common shapes at once; the rest, and the faults, below
        body = item if operation is None else item.get(operation) if type(item) is dict else None
        status = body.get("status") if type(body) is dict else None
        if type(status) is int and 100 <= status <= 599:
            append(status)
        else:
            append(_status(item, len(statuses), operation, what, cannot_tell))
    return Items(statuses, items, operation)


def _plain_statuses(items: list[Any]) -> list[int] | None:
    """The statuses of items that are all objects with an integer ``status`` from 100 to
    599, read in C-speed steps; ``None`` when any is not (the item-by-item reading then
    finds which, and why)."""
    try:
        statuses = list(map(_STATUS, items))
    except (KeyError, TypeError, IndexError):
        return None
    first = statuses[0] if statuses else None
    if type(first) is int and 100 <= first <= 599 and statuses.count(first) == len(statuses):
        # The common answer: one status for all. (A float equal to it, 201.0 for 201, is
        # the same number.)
        return statuses
    distinct = set(statuses)  # an answer holds a few different statuses at most
    for status in distinct:
        if type(status) is not int or not 100 <= status <= 599:
            return None
    # A float equal to an int (201.0) hides behind it in the set; it would make the sum a
    # float. A bool cannot hide: True and False equal 1 and 0, never a status.
    if type(sum(statuses)) is not int:
        return None
    return statuses


def _status(item: Any, index: int, operation: str | None, what: str, cannot_tell: str) -> int:
    """The status of an item of a less common shape (a wrapper, a ``Mapping``).

    Raises:
        FatalError: the item holds no readable status.
    """
    if not isinstance(item, Mapping):
        problem = f"is {_kind(item)}, not an object"
    else:
        body = _unwrap(item, operation)
        if body is None:
            problem = f"has no {operation!r} result" if operation else "has no status"
        else:
            status = body.get("status")
            if type(status) is int and 100 <= status <= 599:
                return status
            if status is None:
                problem = "has no status"
            elif type(status) is int:
                problem = f"has status {status}, not an HTTP status"
            elif type(status) is float:
                problem = f"has status {status!r}, not an integer"
            else:
                problem = f"has {_kind(status)} for status, not a number"
    raise FatalError(f"{what}'s item {index} {problem}: {cannot_tell}")


def _unwrap(item: Mapping[str, Any], operation: str | None) -> Mapping[str, Any] | None:
    """The object of an item that holds its status: the item itself, or the one value of
    a one-key wrapper (with ``operation``, the value under that key)."""
    if operation is not None:
        inner = item.get(operation)
        return inner if isinstance(inner, Mapping) else None
    if "status" in item:
        return item
    if len(item) == 1:
        inner = next(iter(item.values()))
        if isinstance(inner, Mapping) and "status" in inner:
            return inner
    return None


_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
          int: "a number", float: "a number", type(None): "null"}  # fmt: skip


def _kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words."""
    return _KINDS.get(type(value), type(value).__name__)
