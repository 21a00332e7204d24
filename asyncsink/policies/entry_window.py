"""AIMD rate limiting on in-flight entries.

The window is how many entries may be in flight at once. It starts at its ceiling
(``max_batch_size * max_in_flight_requests``), grows by a tenth of a batch for each request
that succeeds in full (additive increase) and halves when the destination throttles: a
whole request refused with a throttling error, or entries refused as throttled
(multiplicative decrease). Entries that failed for other reasons are retried without
shrinking the window: a scattered bad item is no sign of congestion. Throttled requests
that were already in flight when the window last shrank do not shrink it again: one
congestion event, one halving, as TCP does per round trip.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["AIMDWindow", "EntryWindow"]


class EntryWindow(Protocol):
    """How many entries may be in flight, as congestion control asks it; ``AIMDWindow``
    is the default."""

    @property
    def size(self) -> int: ...

    def on_success(self) -> None:
        """A request succeeded in full."""

    def on_congestion(self, request_started: float, now: float) -> None:
        """The destination throttled a request that started at ``request_started``."""


class AIMDWindow:
    """The in-flight entry window. ``enabled=False`` pins it at its ceiling."""

    DECREASE_FACTOR = 0.5

    def __init__(self, *, ceiling: int, increase: int, enabled: bool = True) -> None:
        self.ceiling = ceiling
        self.increase = max(1, increase)
        self.enabled = enabled
        self.size = ceiling
        self._last_decrease = float("-inf")

    def on_success(self) -> None:
        if self.enabled and self.size < self.ceiling:
            self.size = min(self.ceiling, self.size + self.increase)

    def on_congestion(self, request_started: float, now: float) -> None:
        """Shrink, unless this request was already in flight at the last shrink."""
        if not self.enabled or request_started < self._last_decrease:
            return
        self.size = max(1, int(self.size * self.DECREASE_FACTOR))
        self._last_decrease = now
