"""A rate cap for the whole job: ``maxRequestsPerSecond``, ``maxEntriesPerSecond`` and
``maxBytesPerSecond``.

A SaaS quota holds for the whole account, not per task. The driver splits each cap among
the tasks that can run at once (``rateCapShares``: the cluster's cores, see
``asyncsink.spark``), and each writer keeps its share with token buckets, one
per cap given. A request may start when the request bucket holds a whole token and the
entry and byte buckets are not in debt; starting it takes one request token and as many
entry and byte tokens as it carries (a bucket may go into debt by one request's worth,
which the next request waits out). Buckets fill at their share per second, up to one
request's token and nothing more of entries or bytes. The request bucket starts full
and the others one request in debt: a writer never bursts, so that in any one-second
window a task sends at most its share and one request more.

The cap only ever delays the start of a request: the adaptive limit on requests in flight
works below it, a ``Retry-After`` still holds a retry back for as long as it says, and a
throttle still slows the writer down.

This is a small class of its own rather than an async limiter library (``aiolimiter``
and the like, which a request would ``await``): a writer decides what starts in one
synchronous pass and wakes its timer when the next request may, so it asks how long to
wait instead of waiting.
"""

from __future__ import annotations

from ..options import SinkOptions

__all__ = ["RateCap", "rate_cap_for"]


class _Bucket:
    __slots__ = ("level", "rate", "top")

    def __init__(self, rate: float, top: float) -> None:
        self.rate = rate  # tokens a second
        self.top = top  # the most it holds
        self.level = top  # full: a new writer's first request leaves at once

    def fill(self, seconds: float) -> None:
        self.level = min(self.top, self.level + seconds * self.rate)

    def wait(self, need: float) -> float:
        """Seconds until the bucket holds ``need``."""
        short = need - self.level
        return short / self.rate if short > 1e-9 else 0.0  # a rounding error is no wait


class RateCap:
    """One writer's share of the job's rate caps (see the module).

    Args:
        requests, entries, bytes_: this writer's share of each cap, a second (0: none).
        batch, batch_bytes: the most entries and bytes of one request, the debt the
            entry and byte buckets start with.
    """

    def __init__(
        self,
        requests: float = 0.0,
        entries: float = 0.0,
        bytes_: float = 0.0,
        *,
        batch: int = 0,
        batch_bytes: int = 0,
    ) -> None:
        self._requests = _Bucket(requests, 1.0) if requests > 0 else None
        self._entries = _Bucket(entries, 0.0) if entries > 0 else None
        self._bytes = _Bucket(bytes_, 0.0) if bytes_ > 0 else None
        # The entry and byte buckets start one request in debt (at most a second's worth):
        # a writer that starts as another ends then takes over its debt, not adds to it.
        if self._entries is not None:
            self._entries.level = -min(float(batch), entries)
        if self._bytes is not None:
            self._bytes.level = -min(float(batch_bytes), bytes_)
        self._buckets = [b for b in (self._requests, self._entries, self._bytes) if b]
        self._last: float | None = None
        self._blocked_since: float | None = None
        self.waited = 0.0  # seconds requests were held back by the cap, in all
        self.until = 0.0  # when the request held back last may start

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until a request may start (0: now)."""
        self._fill(now)
        wait = 0.0
        for bucket in self._buckets:
            wait = max(wait, bucket.wait(1.0 if bucket is self._requests else 0.0))
        if wait > 0:
            self.until = now + wait
            if self._blocked_since is None:
                self._blocked_since = now
        return wait

    @property
    def waited_ms(self) -> int:
        """``waited``, in whole milliseconds."""
        return int(self.waited * 1000)

    def took(self, entries: int, size: int, now: float) -> None:
        """A request of ``entries`` entries and ``size`` bytes started at ``now``."""
        self._fill(now)
        if self._requests is not None:
            self._requests.level -= 1.0
        if self._entries is not None:
            self._entries.level -= entries
        if self._bytes is not None:
            self._bytes.level -= size
        if self._blocked_since is not None:
            self.waited += max(0.0, now - self._blocked_since)
            self._blocked_since = None

    def _fill(self, now: float) -> None:
        last, self._last = self._last, now
        if last is None or now <= last:
            return
        for bucket in self._buckets:
            bucket.fill(now - last)

    def __repr__(self) -> str:
        rates = [(n, b.rate) for n, b in (("requests", self._requests),
                 ("entries", self._entries), ("bytes", self._bytes)) if b]  # fmt: skip
        return "RateCap(" + ", ".join(f"{n}={r:g}/s" for n, r in rates) + ")"


def rate_cap_for(options: SinkOptions) -> RateCap:
    """This writer's share of the caps the options set (``rateCapShares`` of them); one
    that never holds a request back when none is set."""
    caps = (
        options.max_requests_per_second,
        options.max_entries_per_second,
        options.max_bytes_per_second,
    )
    if not any(caps):
        return RateCap()
    shares = max(1, options.rate_cap_shares)
    requests, entries, bytes_ = (cap / shares for cap in caps)
    return RateCap(
        requests,
        entries,
        bytes_,
        batch=options.max_batch_size,
        batch_bytes=options.max_batch_size_in_bytes,
    )
