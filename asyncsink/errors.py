"""The exceptions asyncsink raises, and the ones a sink raises to it.

::

    AsyncSinkError
    ├── OptionError            an option is unknown or its value is not allowed
    ├── WriterStateError       write/flush on a writer that is not open
    ├── BadRecordError         an entry is too large, cannot be converted, or was rejected
    ├── DeliveryError          entries ran out of retries; raised by ``flush()``
    ├── DestinationError       a request failed; raised by a sink, classified by the writer
    │   ├── RetryableError     try the request again (5xx, timeouts, connection errors)
    │   │   └── ThrottledError the destination pushes back (429, 503, throughput exceeded)
    │   └── FatalError         do not try again (auth, not found, malformed request)
    ├── DeadLetterError        a bad record could not be written to the dead-letter target
    ├── SparkSetupError        Spark is set up so that asyncsink cannot run or name its run
    └── DurableError           the call log cannot be trusted or written
        ├── FencedError        another attempt took over this scope
        ├── CorruptRecordError a stored record cannot be decoded
        └── ReplayMismatchError a completed scope was replayed with different input

A sink translates its vendor errors (httpx, botocore, HTTP status codes, bulk items) into
``RetryableError``, ``ThrottledError`` or ``FatalError`` with ``raise ... from exc`` so the
cause stays attached. Any other exception escaping ``submit_request_entries`` is treated
as fatal unless the writer's ``classify_error`` says otherwise.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from .masking import mask_url

__all__ = [
    "AsyncSinkError",
    "BadRecordError",
    "CorruptRecordError",
    "DeadLetterError",
    "DeliveryError",
    "DestinationError",
    "DurableError",
    "FatalError",
    "FencedError",
    "OptionError",
    "ReplayMismatchError",
    "RetryableError",
    "SparkSetupError",
    "ThrottledError",
    "WriterStateError",
]


def describe(error: BaseException) -> str:
    """``"TypeName: message"`` for messages and records, even for an exception whose
    ``str()`` itself fails."""
    try:
        text = str(error)
    except Exception:  # a sink's exception may be broken; the report must not be
        text = "<its message cannot be read>"
    return f"{type(error).__name__}: {text}"


class AsyncSinkError(Exception):
    """Base class of every error asyncsink raises."""


class OptionError(AsyncSinkError, ValueError):
    """An option is unknown, or its value is not allowed.

    The message names the option, the value given and what is allowed. A value that
    looks like a URL (it holds ``://`` or ``@``) is shown through ``mask_url``, whatever
    option it was given to.
    """

    def __init__(self, name: str, value: object, allowed: str, *, message: str = "") -> None:
        self.option = name
        self.allowed = allowed
        if isinstance(value, str) and ("://" in value or "@" in value):
            value = mask_url(value)
        shown = repr(value)
        if len(shown) > 1000:
            shown = f"{shown[:1000]}... ({len(shown)} characters)"
        super().__init__(message or f"option {name!r}: got {shown}, expected {allowed}")

    @classmethod
    def unknown(cls, name: str, known: list[str], *, where: str = "") -> OptionError:
        """An option nobody claimed, with the closest known name if one is close (matched
        case-insensitively, since Spark's data sources hand over option names
        lowercased), and every known option (of ``where``, when given). Its value is not
        shown: it may be a mistyped secret."""
        allowed = ", ".join(known)
        by_lower = {option.lower(): option for option in known}
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
        of = f" of {where}" if where else ""
        message = f"unknown option {name!r}{hint}; known options{of}: {allowed}"
        return cls(name, None, allowed, message=message)


class WriterStateError(AsyncSinkError, RuntimeError):
    """A writer was used outside its open lifetime (before ``open`` or after ``close``)."""


class BadRecordError(AsyncSinkError):
    """An entry cannot be delivered: too large, not convertible, or rejected as malformed.

    ``position`` is the entry's sequence number in the writer (0-based, in write order),
    in ``scope`` (a durable writer's scope, such as a Spark task's partition) when given.
    ``unwritten``: the elements ``write_all`` had taken from an iterator past the bad
    one, which it did not write (write them first to go on).
    """

    def __init__(self, position: int, reason: str, scope: str | None = None) -> None:
        self.position = position
        self.reason = reason
        self.scope = scope
        self.unwritten: tuple[object, ...] = ()
        where = f" of scope {scope}" if scope else ""
        super().__init__(f"bad record at position {position}{where}: {reason}")


class DeliveryError(AsyncSinkError):
    """Entries ran out of retries; nothing was dropped silently.

    ``failed`` counts the undelivered entries, ``delivered`` those acknowledged,
    ``positions`` are the input positions of the first failed ones (up to ten), and
    ``__cause__`` is one of the errors that made the entries fail.
    """

    def __init__(
        self,
        failed: int,
        delivered: int,
        sample: BaseException | None,
        positions: Sequence[int] = (),
    ) -> None:
        self.failed = failed
        self.delivered = delivered
        self.sample = sample
        self.positions = tuple(positions)
        where = ""
        if self.positions:
            more = ", ..." if failed > len(self.positions) else ""
            where = f"; at positions {', '.join(map(str, self.positions))}{more}"
        detail = f": last cause: {describe(sample)}" if sample else ""
        super().__init__(
            f"{failed} entries could not be delivered after all retries "
            f"({delivered} delivered{where}){detail}"
        )


class DestinationError(AsyncSinkError):
    """A request to the destination failed. Sinks raise a subclass of this.

    ``retry_after`` (seconds) is the destination's hint of when to try again, if it gave one.
    ``status`` is the protocol status (an HTTP status code, an AWS error code) when known.
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, status: object = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class RetryableError(DestinationError):
    """The request failed but may succeed if sent again."""


class ThrottledError(RetryableError):
    """The destination is overloaded or over quota; the writer slows down and retries."""


class FatalError(DestinationError):
    """The request can never succeed as configured; the task should fail now."""


class DeadLetterError(AsyncSinkError):
    """Writing a bad record to the dead-letter target failed; the record is not settled,
    so the task fails and its retry meets the record again."""


class SparkSetupError(AsyncSinkError, RuntimeError):
    """asyncsink cannot run as Spark is set up: Spark's Python workers run an interpreter
    that cannot import it, or a stream's durable run cannot be named (a ``sinkId`` under
    Spark Connect without the query's checkpoint). The message says what to set. Raised
    on the driver, before anything is sent."""


class DurableError(AsyncSinkError):
    """The durable call log cannot be read or written."""


class FencedError(DurableError):
    """Another attempt of the same scope took it over; this attempt must stop sending."""

    def __init__(self, scope: object, epoch: int, current: int | None = None) -> None:
        self.scope = scope
        self.epoch = epoch
        self.current = current
        now = f", the store holds epoch {current}" if current is not None else ""
        super().__init__(f"scope {scope} was taken over: this attempt holds epoch {epoch}{now}")


class CorruptRecordError(DurableError):
    """A stored call record cannot be decoded."""

    def __init__(self, scope: object, key: str, reason: str) -> None:
        self.scope = scope
        self.key = key
        self.reason = reason
        super().__init__(f"scope {scope}: record {key!r} cannot be decoded: {reason}")


class ReplayMismatchError(DurableError):
    """A scope that Spark already committed was replayed with other input than it held.

    The records of a completed scope keep its entry count and a digest of its entries; a
    replay (a re-run with the same ``batchId``, a batch Spark runs again) whose input
    differs cannot be delivered under the old identity without mixing two inputs. A
    replay that brings a partition its completed batch did not have is refused too
    (``expected`` is then ``None`` and ``partitions`` says how many the batch had), and so
    is, on the driver, a replay that ran another number of partitions (``ran``)."""

    def __init__(
        self,
        scope: object,
        expected: tuple[int, str] | None,
        got: tuple[int, str] | None,
        *,
        partitions: int | None = None,
        ran: int | None = None,
    ) -> None:
        self.scope = scope
        self.expected = expected
        self.got = got
        self.partitions = partitions
        self.ran = ran
        sink, *_ = str(scope).split("/")
        if expected is not None and got is not None:
            what = (
                f"was completed with {expected[0]} entries (digest {expected[1]}) but is "
                f"replayed with {got[0]} entries (digest {got[1]})"
            )
        elif ran is not None:
            what = (
                f"is partition 0 of a batch that was completed with {partitions} "
                f"partition{'s' if partitions != 1 else ''}, replayed with {ran}"
            )
        else:
            what = (
                f"is new to a batch that was completed with {partitions} "
                f"partition{'s' if partitions != 1 else ''}: the replay comes in more "
                "partitions"
            )
        super().__init__(
            f"scope {scope} (sink id {sink!r}) {what}: "
            "the input of a committed run changed. Nothing was sent. To deliver the new "
            "input, give it a new run (another batchId, or none for a fresh run id) or a new "
            f"sinkId, or purge the old records (asyncsink records purge STORE_URL {sink})"
        )
