"""Which node a request goes to: round-robin, skipping nodes that cannot be connected to.

A node whose connection attempt failed sits out for a while (1 s, doubling with each
failure after it was back, up to 60 s); a request that reaches it again ends that. When every node
sits out, they are still tried, the one due back first leading, so the writer never stops
trying on its own: its retry policy decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

__all__ = ["HostPool"]


class HostPool:
    """The nodes' base URLs, in the order the next request should try them.

    Args:
        hosts: base URLs, at least one.
        initial_s, max_s: how long a node that failed sits out at first and at most.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        hosts: Sequence[str],
        *,
        initial_s: float = 1.0,
        max_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not hosts:
            raise ValueError("a host pool needs at least one host")
        self.hosts = tuple(hosts)
        self._initial = initial_s
        self._max = max_s
        self._clock = clock
        self._next = 0
        self._failures: dict[str, int] = {}
        self._back_at: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self.hosts)

    def order(self) -> list[str]:
        """Every node, in the order to try them for one request: the next in turn first,
        the nodes sitting out last (the one due back first leading)."""
        hosts = self.hosts
        if len(hosts) == 1:
            return [hosts[0]]
        start = self._next
        self._next = (start + 1) % len(hosts)
        rotated = hosts[start:] + hosts[:start]
        if not self._back_at:
            return list(rotated)
        now = self._clock()
        back_at = self._back_at
        ready = [host for host in rotated if back_at.get(host, 0.0) <= now]
        waiting = sorted((host for host in rotated if back_at.get(host, 0.0) > now),
                         key=back_at.__getitem__)  # fmt: skip
        return ready + waiting

    def failed(self, host: str) -> float:
        """``host`` could not be connected to; returns how long it sits out (seconds).

        A failure while it already sits out (a burst of requests that tried it at once,
        or while every node sat out) is the same outage: the pause is not doubled."""
        now = self._clock()
        back_at = self._back_at.get(host, 0.0)
        if back_at > now:
            return back_at - now
        failures = self._failures.get(host, 0) + 1
        self._failures[host] = failures
        pause: float = min(self._max, self._initial * 2.0 ** min(failures - 1, 30))
        self._back_at[host] = now + pause
        return pause

    def succeeded(self, host: str) -> None:
        """A request reached ``host``: it is in the rotation again."""
        if host in self._failures:
            del self._failures[host]
            self._back_at.pop(host, None)

    def is_sitting_out(self, host: str) -> bool:
        """Whether ``host`` is skipped for now."""
        return self._back_at.get(host, 0.0) > self._clock()
