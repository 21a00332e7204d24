"""What the fault-injecting endpoint does wrong, and how often: the ``Faults`` settings.

Request-level faults are drawn once per ingest request from one random number, in this
order of bands: error, throttle, timeout, reset (all before the entries are applied), then
timeout-after-apply and reset-after-apply (after). Their rates therefore add up and must
not exceed 1. ``fail_statuses`` takes precedence over all of them while it lasts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Faults"]

_RATE_FIELDS = (
    "error_rate",
    "throttle_rate",
    "timeout_rate",
    "reset_rate",
    "timeout_after_apply_rate",
    "reset_after_apply_rate",
)


_NUMBERS = (*_RATE_FIELDS, "partial_failure_rate", "latency_ms", "latency_jitter_ms",
            "retry_after_s", "hang_s")  # fmt: skip
# The types each setting takes, and their name in messages (fail_statuses: any sequence
# of statuses, kept as a tuple)
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    **dict.fromkeys(_NUMBERS, ((int, float), "a number")),
    "capacity": ((int,), "an integer"),
    "partial_response_status": ((int,), "an integer"),
    "bad_record_field": ((str, type(None)), "a field name or None"),
    "seed": ((int, type(None)), "an integer or None"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Faults:
    """The faults the endpoint injects. All are off by default.

    Attributes:
        latency_ms: delay added before every ingest response (and every dropped one).
        latency_jitter_ms: a uniform random ``[0, jitter)`` added to ``latency_ms``.
        capacity: when above 0, at most this many ingest requests are served at once;
            the others wait in line for a free slot (first come, first served) before
            their latency starts. A queueing model: up to ``capacity`` requests in flight
            each take ``latency_ms``, beyond it latency grows with every request added.
        error_rate: fraction of requests answered 500, 502 or 504 (picked at random);
            nothing is applied.
        throttle_rate: fraction answered 429 or 503 with ``Retry-After: retry_after_s``;
            nothing is applied.
        retry_after_s: the ``Retry-After`` value in seconds; fractions are sent as such
            (``0.05``).
        timeout_rate: fraction never answered and not applied: the connection is held
            until the client closes it, or for ``hang_s`` at most, then closed.
        timeout_after_apply_rate: like ``timeout_rate``, but the entries are applied (and
            the idempotency key stored) first: the late success a timed-out client misses.
        hang_s: the longest a timed-out connection is held.
        reset_rate: fraction where the body is read, nothing is applied and the connection
            is reset (TCP RST) without a response.
        reset_after_apply_rate: like ``reset_rate``, but the entries are applied (and the
            idempotency key stored) first, which is how duplicates happen.
        partial_failure_rate: fraction of *entries* rejected in requests that are applied;
            rejected entries get item status 429, 500 or 503 and are not stored.
        partial_response_status: the response status when some item failed: 200 or 207.
        bad_record_field: when set, an entry whose field of this name is truthy is rejected
            with item status 400 ``mapping error``, like an Elasticsearch mapping error.
        fail_statuses: a deterministic script: the next ``len(fail_statuses)`` ingest
            requests are answered with these statuses in order, nothing applied (e.g.
            ``(401,)`` to test a fatal path, ``(503, 503)`` for two throttles).
        seed: seeds the random draws, making a sequential run reproducible.
    """

    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    capacity: int = 0
    error_rate: float = 0.0
    throttle_rate: float = 0.0
    retry_after_s: float = 1.0
    timeout_rate: float = 0.0
    timeout_after_apply_rate: float = 0.0
    hang_s: float = 30.0
    reset_rate: float = 0.0
    reset_after_apply_rate: float = 0.0
    partial_failure_rate: float = 0.0
    partial_response_status: int = 200
    bad_record_field: str | None = None
    fail_statuses: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        self._check_types()
        for name in ("latency_ms", "latency_jitter_ms", "retry_after_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Faults.{name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(self.capacity, int) and self.capacity >= 0):
            raise ValueError(f"Faults.capacity must be an integer >= 0, got {self.capacity!r}")
        if not (math.isfinite(self.hang_s) and self.hang_s > 0):
            raise ValueError(f"Faults.hang_s must be a finite number > 0, got {self.hang_s!r}")
        for name in (*_RATE_FIELDS, "partial_failure_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"Faults.{name} must be within [0, 1], got {value!r}")
        total = sum(getattr(self, name) for name in _RATE_FIELDS)
        if total > 1.0 + 1e-9:
            raise ValueError(f"the request-level fault rates add up to {total:g}, more than 1")
        if self.partial_response_status not in (200, 207):
            raise ValueError(
                f"Faults.partial_response_status must be 200 or 207, "
                f"got {self.partial_response_status!r}"
            )
        for status in self.fail_statuses:
            if not (isinstance(status, int) and 200 <= status <= 599):
                raise ValueError(f"Faults.fail_statuses holds {status!r}, not a status 200-599")

    def _check_types(self) -> None:
        """Refuse a value of the wrong type, naming the setting (``"0.5"`` for a rate)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "fail_statuses":
                if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                    raise ValueError(
                        f"Faults.fail_statuses must be a sequence of statuses, got {value!r}"
                    )
                object.__setattr__(self, "fail_statuses", tuple(value))
                continue
            kinds, words = _KINDS[f.name]
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"Faults.{f.name} must be {words}, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (what ``POST /_control/faults`` takes)."""
        data = dataclasses.asdict(self)
        data["fail_statuses"] = list(self.fail_statuses)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Faults:
        """Settings from a dict as ``to_json`` makes it; missing keys take their defaults.

        Raises:
            ValueError: an unknown key or a value out of range.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fault settings: {', '.join(unknown)}")
        return cls(**data)
