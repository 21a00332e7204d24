"""Dead-letter targets: where bad records go when the task should not fail for them.

A bad record is an entry larger than ``maxRecordSizeInBytes``, an element the converter
could not turn into an entry, or an entry the destination rejected as malformed (an
Elasticsearch mapping error, an HTTP 400 item). Without a dead-letter target the writer
fails with a ``BadRecordError`` naming the record's position and reason; with one, the
record is handed over and counted in the statistics. Nothing is dropped silently.

``DeadLetters`` is the writer's side: it hands a bad record to the target, or raises.
"""

from __future__ import annotations

import base64
import decimal
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ..entries.rows import fields_of
from ..errors import BadRecordError, DeadLetterError

__all__ = [
    "DeadLetter",
    "DeadLetterTarget",
    "DeadLetters",
    "JsonLinesDeadLetter",
    "dead_letter_target",
    "element_bytes",
]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A bad record: its position in write order, why it is bad, and its content."""

    position: int
    reason: str
    record: bytes
    scope: str | None = None

    def to_json(self) -> bytes:
        try:
            text: dict[str, str] = {"record": self.record.decode()}
        except UnicodeDecodeError:
            text = {"record_base64": base64.b64encode(self.record).decode()}
        line = {
            "position": self.position,
            "reason": self.reason,
            "scope": self.scope,
            "time": time.time(),
            **text,
        }
        return orjson.dumps(line)


DeadLetterTarget = Callable[[DeadLetter], Any]


class JsonLinesDeadLetter:
    """Appends each dead letter as one JSON line to ``path`` (created with its folders).

    Each line is written with a single ``write`` on a file opened in append mode, so the
    Python worker processes of one machine can share the file, and is on disk (``fsync``)
    before the call returns: only then does the record count as settled.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, letter: DeadLetter) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        with self._lock, open(self.path, "ab") as out:
            out.write(letter.to_json() + b"\n")
            out.flush()
            os.fsync(out.fileno())

    def __repr__(self) -> str:
        return f"JsonLinesDeadLetter({self.path!r})"


def _as_text(value: Any) -> str:
    """A value JSON has no form for, as text: a ``Decimal`` as the sinks write it
    (``"12.50"``), anything else by its ``repr``."""
    return str(value) if isinstance(value, decimal.Decimal) else repr(value)


def element_bytes(element: Any) -> bytes:
    """An input element as dead-letter content: JSON when it is a mapping (or a Spark
    ``Row``, by its ``asDict``), else its ``repr`` (a row holding a ``Row`` with two
    fields of one name too: its dict would not keep both)."""
    if isinstance(element, bytes):
        return element
    try:
        value = fields_of(element) if hasattr(element, "asDict") else element
        if isinstance(value, dict):
            return orjson.dumps(value, default=_as_json, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        pass
    return repr(element).encode()


def _as_json(value: Any) -> Any:
    """A nested ``Row`` as the dict of its fields; another value JSON has no form for as
    text (``_as_text``).

    Raises:
        TypeError: a ``Row`` with two fields of one name.
    """
    return fields_of(value) if hasattr(value, "asDict") else _as_text(value)


def dead_letter_target(option: str | DeadLetterTarget | None) -> DeadLetterTarget | None:
    """The target the ``deadLetter`` option names: a file path, a callable, or none."""
    if option is None or option == "":
        return None
    if isinstance(option, str):
        return JsonLinesDeadLetter(option)
    return option


class DeadLetters:
    """Where a writer's bad records go: the ``deadLetter`` target, or a failure.

    ``serialize`` gives an entry's bytes (the sink's ``serialize_entry``), and
    ``handed_over`` is told each record's sequence number once it is settled; ``scope``
    names the writer's scope in letters and errors, ``persistent`` whether errors name it.
    """

    def __init__(
        self,
        option: str | DeadLetterTarget | None,
        serialize: Callable[[Any], bytes],
        handed_over: Callable[[int], None] = lambda seq: None,
        *,
        limit: int | None = None,
    ) -> None:
        self.target = dead_letter_target(option)
        self.limit = limit  # ``maxDeadLetters``: most records handed over, ``None``: no cap
        self.by_cause: dict[str, int] = {}  # records handed over, by cause
        self._serialize = serialize
        self._handed_over = handed_over  # told each record's seq once it is settled
        self.scope = ""
        self.persistent = False
        self.count = 0  # records handed over

    @property
    def diverted(self) -> int:
        """Records handed over out of retries (``onRetriesExhausted=deadLetter``)."""
        return self.by_cause.get("retries_exhausted", 0)

    def bad_record(
        self,
        seq: int,
        reason: str,
        *,
        entry: Any = None,
        element: Any = None,
        cause: str = "bad_record",
    ) -> None:
        """Hand over the record at ``seq``: a converted ``entry``, or an ``element`` the
        converter refused; ``cause`` sorts it in ``by_cause`` (``bad_record``,
        ``rejected``, ``retries_exhausted``, ``ordering``).

        Raises:
            BadRecordError: there is no target.
            DeadLetterError: the target failed, or ``maxDeadLetters`` records went there
                already; the record is not settled.
        """
        if self.target is None:
            raise BadRecordError(seq, reason, self.scope if self.persistent else None)
        if self.limit is not None and self.count >= self.limit:
            causes = ", ".join(f"{n} {c}" for c, n in sorted(self.by_cause.items()))
            raise DeadLetterError(
                f"{self.scope}: {self.count} records went to the dead-letter target "
                f"{self.target!r} ({causes}), the most maxDeadLetters ({self.limit}) allows: "
                f"record {seq} ({reason}) fails the task instead"
            )
        if element is not None:
            record = element_bytes(element)
        else:
            try:
                record = self._serialize(entry)
            except Exception:
                record = repr(entry).encode()
        try:
            self.target(DeadLetter(seq, reason, record, self.scope))
        except Exception as exc:
            raise DeadLetterError(
                f"{self.scope}: writing bad record {seq} to the dead-letter target "
                f"{self.target!r} failed: {type(exc).__name__}: {exc}; the record "
                "is not settled, so the task fails and its retry handles it again"
            ) from exc
        self.count += 1
        self.by_cause[cause] = self.by_cause.get(cause, 0) + 1
        self._handed_over(seq)
