"""Failed connections: telling them from other request failures, and which destinations
this process has delivered to.

A sink translates its client's errors with ``raise ... from exc``, so the operating
system's error stays in the chain of causes whatever the client (aiohttp, httpx,
botocore): ``connection_failure`` finds it there. The writer logs a writer's first failed
connection, and fails at once on a refused one when nothing was ever delivered to that
destination from this process (``failFastOnConnectionRefused``): a wrong port, or a
destination that is not running, rather than one restarting under a running job.

It also sets how long the pooled connections of the sinks and of the DynamoDB record store
may sit idle and still be reused (``IDLE_CONNECTION_S``).
"""

from __future__ import annotations

import enum
import errno
import socket
import threading

__all__ = [
    "IDLE_CONNECTION_S",
    "ConnectionFailure",
    "connection_failure",
    "ever_reached",
    "mark_reached",
    "never_opened",
]

IDLE_CONNECTION_S = 4.0
"""How long a pooled connection may sit idle and still carry the next request.

A server closes a keep-alive connection that stayed idle for a timeout of its own: 5 s by
default for Node.js, uvicorn and Apache httpd. A request sent on a connection the server is
closing at that moment is reset, and the writer must send it again after a backoff. A busy
server closes late, which makes that race likely: a Spark task that starts about 5 s after
the worker's previous one finds its connections in that state. Under those timeouts, a
connection the server may be closing is never reused; a new one is opened instead."""

_UNREACHABLE = frozenset(
    {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.ETIMEDOUT}
)
_reached: set[str] = set()
_lock = threading.Lock()


class ConnectionFailure(enum.Enum):
    """Why a request got no connection."""

    REFUSED = "refused"  # the host answered: nothing listens at that port
    UNREACHABLE = "unreachable"  # no answer, no route, or the name does not resolve


def connection_failure(error: BaseException) -> ConnectionFailure | None:
    """Whether ``error`` (or an error in its chain of causes) is a failed connection, and
    which kind; ``None`` for any other failure (an HTTP status, a reset connection, a
    timeout waiting for an answer...)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return ConnectionFailure.REFUSED
        if isinstance(current, OSError):
            if current.errno == errno.ECONNREFUSED:
                return ConnectionFailure.REFUSED
            if isinstance(current, socket.gaierror) or current.errno in _UNREACHABLE:
                return ConnectionFailure.UNREACHABLE
        current = current.__cause__ or current.__context__
    return None


def never_opened(error: BaseException) -> bool:
    """Whether ``error`` says no connection was ever opened, so that a request cannot
    have left: refused, or a host name that does not resolve. (A timeout or an
    unreachable host may also end a connection that was open: not these.)"""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError | socket.gaierror) or (
            isinstance(current, OSError) and current.errno == errno.ECONNREFUSED
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def mark_reached(destination: str) -> None:
    """A writer of this process delivered to ``destination``."""
    with _lock:
        _reached.add(destination)


def ever_reached(destination: str) -> bool:
    """Whether a writer of this process ever delivered to ``destination``."""
    with _lock:
        return destination in _reached
