"""Dead-letter targets: where bad records go when the task should not fail for them.

A bad record is an entry larger than ``maxRecordSizeInBytes``, an element the converter
could not turn into an entry, or an entry the destination rejected as malformed (an
Elasticsearch mapping error, an HTTP 400 item). Without a dead-letter target the writer
fails with a ``BadRecordError`` naming the record's position and reason; with one, the
record is handed over and counted in the statistics. Nothing is dropped silently.

A target is a callable taking a ``DeadLetter``: a JSON-lines file (``deadLetter`` as a
plain path), a directory of files on a shared file system (``deadLetter`` as a URL; see
``dead_letter_files``), or the user's own. A target may have a ``flush()`` (a plain or an
async method): the writer's barrier calls it, and a letter counts as settled once it
returned.

``DeadLetters`` is the writer's side: it hands a bad record to the target, or raises.
"""

from __future__ import annotations

import base64
import decimal
import inspect
import os
import re
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


_HTTP_STATUS = re.compile(r"^HTTP (\d{3})\b")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A bad record: its position in write order, why it is bad, and its content.

    ``cause`` is one of ``bad_record`` (too large, or not convertible), ``rejected`` (the
    destination refused it), ``retries_exhausted`` (``onRetriesExhausted=deadLetter``) or
    ``ordering`` (an earlier entry of its ``orderingKey`` is a dead letter);
    ``error_type`` names the error (an exception's class, or the cause's own name);
    ``status`` is the destination's status for the entry, when known (a rejected
    entry's, when the destination's reason names it).
    """

    position: int
    reason: str
    record: bytes
    scope: str | None = None
    cause: str = "bad_record"
    error_type: str = "BadRecord"
    status: int | None = None

    def to_json(self) -> bytes:
        try:
            text: dict[str, str] = {"record": self.record.decode()}
        except UnicodeDecodeError:
            text = {"record_base64": base64.b64encode(self.record).decode()}
        line = {
            "position": self.position,
            "reason": self.reason,
            "cause": self.cause,
            "error_type": self.error_type,
            "status": self.status,
            "scope": self.scope,
            "time": time.time(),
            **text,
        }
        return orjson.dumps(line)


def status_in(reason: str) -> int | None:
    """The HTTP status a destination's reason starts with (``HTTP 400: mapping error``,
    as the HTTP and Elasticsearch sinks word them), else ``None``."""
    found = _HTTP_STATUS.match(reason)
    return int(found.group(1)) if found else None


SPENT = "out of retries"  # how the reason of an entry out of retries starts


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
    """The target the ``deadLetter`` option names: a directory URL, a file path, a
    callable, or none."""
    if option is None or option == "":
        return None
    if isinstance(option, str):
        from .dead_letter_files import DeadLetterFiles, directory_scheme

        if directory_scheme(option) is not None:
            return DeadLetterFiles(option)
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
        max_bytes: int | None = None,
    ) -> None:
        self.target = dead_letter_target(option)
        self.limit = limit  # ``maxDeadLetters``: most records handed over, ``None``: no cap
        self.max_bytes = max_bytes  # ``maxDeadLetterBytes``: most bytes of records
        self.by_cause: dict[str, int] = {}  # records handed over, by cause
        self._serialize = serialize
        self._handed_over = handed_over  # told each record's seq once it is settled
        self.scope = ""
        self.persistent = False
        self.count = 0  # records handed over
        self.bytes = 0  # bytes of the records handed over

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
        error_type: str | None = None,
        status: int | None = None,
    ) -> None:
        """Hand over the record at ``seq``: a converted ``entry``, or an ``element`` the
        converter refused; ``cause`` sorts it in ``by_cause`` (``bad_record``,
        ``rejected``, ``retries_exhausted``, ``ordering``); ``error_type`` names the
        error (by default, from the cause); ``status`` is the destination's for it.

        Raises:
            BadRecordError: there is no target.
            DeadLetterError: the target failed, or ``maxDeadLetters`` records or
                ``maxDeadLetterBytes`` went there already; the record is not settled.
        """
        if self.target is None:
            raise BadRecordError(seq, reason, self.scope if self.persistent else None)
        if self.limit is not None and self.count >= self.limit:
            self._refuse(seq, reason, f"the most maxDeadLetters ({self.limit}) allows")
        if element is not None:
            record = element_bytes(element)
        else:
            try:
                record = self._serialize(entry)
            except Exception:
                record = repr(entry).encode()
        if self.max_bytes is not None and self.bytes + len(record) > self.max_bytes:
            what = f"{self.bytes} bytes of records, and this one of {len(record)} bytes"
            self._refuse(seq, reason, f"{what} would pass maxDeadLetterBytes ({self.max_bytes})")
        error_type = error_type or _ERROR_TYPES.get(cause, "BadRecord")
        letter = DeadLetter(seq, reason, record, self.scope, cause, error_type, status)
        try:
            self.target(letter)
        except Exception as exc:
            raise DeadLetterError(
                f"{self.scope}: writing bad record {seq} to the dead-letter target "
                f"{self.target!r} failed: {type(exc).__name__}: {exc}; the record "
                "is not settled, so the task fails and its retry handles it again"
            ) from exc
        self.count += 1
        self.bytes += len(record)
        self.by_cause[cause] = self.by_cause.get(cause, 0) + 1
        self._handed_over(seq)

    def recorded(self, seq: int, entry: Any, reason: str) -> None:
        """Hand over again the entry at ``seq`` that an earlier attempt's call record
        keeps as a dead letter, with the destination's ``reason``: out of retries (the
        reason starts so) or rejected.

        Raises:
            BadRecordError, DeadLetterError: as ``bad_record``.
        """
        if reason.startswith(SPENT):
            self.bad_record(seq, reason, entry=entry, cause="retries_exhausted")
            return
        given = f"rejected by the destination: {reason}"
        self.bad_record(seq, given, entry=entry, cause="rejected", status=status_in(reason))

    def _refuse(self, seq: int, reason: str, limit: str) -> None:
        """Raise the error of a record past a cap: how many went where, and why.

        Raises:
            DeadLetterError: always.
        """
        causes = ", ".join(f"{n} {c}" for c, n in sorted(self.by_cause.items()))
        raise DeadLetterError(
            f"{self.scope}: {self.count} records went to the dead-letter target "
            f"{self.target!r} ({causes or 'none'}), {limit}: record {seq} ({reason}) "
            "fails the task instead"
        )

    async def flush(self) -> None:
        """Settle the letters handed over: the target's ``flush``, if it has one.

        Raises:
            DeadLetterError: the target's flush failed; the task fails, and its retry
                hands the records over again.
        """
        flush = getattr(self.target, "flush", None)
        if flush is None or not self.count:
            return
        try:
            done = flush()
            if inspect.isawaitable(done):
                await done
        except Exception as exc:
            raise DeadLetterError(
                f"{self.scope}: writing the dead letters to {self.target!r} failed: "
                f"{type(exc).__name__}: {exc}; the task fails, and its "
                "retry writes them again"
            ) from exc


# The error type of a dead letter, by cause, when no exception names it.
_ERROR_TYPES = {
    "bad_record": "BadRecord",
    "rejected": "Rejected",
    "retries_exhausted": "RetriesExhausted",
    "ordering": "KeyBlocked",
}
