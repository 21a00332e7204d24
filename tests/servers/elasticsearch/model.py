"""What the Elasticsearch test endpoint is told to do wrong, and what it counts.

Both cross the process boundary as JSON, so each has ``to_json`` / ``from_json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["EsFaults", "EsStats"]

_RATES = (
    "item_throttle_rate",
    "item_unavailable_rate",
    "request_throttle_rate",
    "request_unavailable_rate",
    "timeout_rate",
    "reset_after_apply_rate",
)


@dataclass(frozen=True, kw_only=True, repr=False)
class EsFaults:
    """Faults the Elasticsearch test endpoint injects; the default injects none.

    Every non-control request first waits ``latency_ms``, plus a random share of
    ``latency_jitter_ms`` (uniform, drawn per request), so that requests sent together
    are applied and answered out of order; then it must carry the
    ``Authorization`` header ``require_auth`` (e.g. ``"ApiKey abc"``) if that is set, or gets
    401. The other faults touch only the data endpoints, ``_bulk`` and ``_mget``, in this
    order:

    * ``fail_statuses``: the next requests are answered with these statuses, one each, in
      order, with an ES-style error body (401 and 403 ``security_exception``, 404
      ``index_not_found_exception``, 429 ``es_rejected_execution_exception``, ...), and
      nothing is applied. The queue restarts whenever faults are set or the server is reset.
    * ``timeout_rate``: the request is never answered and not applied; the connection is
      dropped after ``hang_s`` seconds.
    * ``request_throttle_rate`` / ``request_unavailable_rate``: the whole request gets 429 /
      503 and is not applied.
    * ``item_throttle_rate`` / ``item_unavailable_rate``: in a ``_bulk``, each item alone gets
      429 ``es_rejected_execution_exception`` / 503 ``unavailable_shards_exception`` and is not
      applied; the other items are.
    * ``reset_after_apply_rate``: the request is applied, then the connection is reset
      without a response: the client cannot know its items landed (how duplicates happen).

    Rates are probabilities in [0, 1], drawn from one generator seeded by ``seed`` (``None``:
    a fresh random seed), so a sequential test sees the same faults on every run.

    Raises:
        ValueError: a rate outside [0, 1], a negative latency, a non-positive ``hang_s`` or a
            status outside 100-599.
    """

    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    item_throttle_rate: float = 0.0
    item_unavailable_rate: float = 0.0
    request_throttle_rate: float = 0.0
    request_unavailable_rate: float = 0.0
    timeout_rate: float = 0.0
    hang_s: float = 10.0
    reset_after_apply_rate: float = 0.0
    fail_statuses: tuple[int, ...] = ()
    require_auth: str | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in _RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"EsFaults.{name} must be within [0, 1], got {value!r}")
        for name in ("latency_ms", "latency_jitter_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"EsFaults.{name} must be >= 0, got {value!r}")
        if not (math.isfinite(self.hang_s) and self.hang_s > 0):
            raise ValueError(f"EsFaults.hang_s must be > 0, got {self.hang_s!r}")
        statuses = tuple(int(status) for status in self.fail_statuses)
        for status in statuses:
            if not 100 <= status <= 599:
                raise ValueError(f"EsFaults.fail_statuses must be HTTP statuses, got {status!r}")
        object.__setattr__(self, "fail_statuses", statuses)

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                shown.append(f"{f.name}={'***' if f.name == 'require_auth' else repr(value)}")
        return f"EsFaults({', '.join(shown)})"

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["fail_statuses"] = list(self.fail_statuses)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EsFaults:
        """Build from :meth:`to_json` output; unknown keys raise ``TypeError``."""
        values = dict(data)
        if "fail_statuses" in values:
            values["fail_statuses"] = tuple(values["fail_statuses"])
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class EsStats:
    """A snapshot of what the Elasticsearch test endpoint saw since start or ``reset()``.

    Control requests (``/_control/...``) are not counted anywhere.

    * ``requests``: every other request received, whatever became of it.
    * ``bulk_requests`` / ``mget_requests``: the ``_bulk`` / ``_mget`` share of those.
    * ``responses_by_status``: answered requests by HTTP status (hung and reset ones are not
      answered).
    * ``items_by_status``: ``_bulk`` items by the status in their result, including items of
      a request whose connection was then reset.
    * ``docs_by_index``: documents each index holds now.
    * ``duplicate_applications``: ``index`` operations applied to an ``_id`` that already held
      a document (result ``updated``), whether or not the source changed. With ids derived
      from the data, each is a write the destination received twice. ``create`` on an
      existing id is a 409 and ``update`` is not counted.
    * ``duplicate_sources``: among the documents an index holds now whose ``_id`` the server
      generated, how many have the same source (byte for byte, as sent) as another such
      document that came before them: ``n`` copies count ``n - 1``. With generated ids a
      re-sent item becomes a second document; this counts them (identical rows in the input
      count too).
    * ``dropped_connections``: requests applied and then reset (``reset_after_apply_rate``).
    * ``hung_requests``: requests never answered (``timeout_rate``).
    * ``max_in_flight``: the most ``_bulk``/``_mget`` requests handled at the same time.
    * ``internal_errors``: requests the server failed on (answered 500); a bug if not 0.
    * ``cpu_seconds``: CPU time of the serving thread since start or ``reset()``.
    """

    requests: int = 0
    bulk_requests: int = 0
    mget_requests: int = 0
    responses_by_status: Mapping[int, int] = field(default_factory=dict)
    items_by_status: Mapping[int, int] = field(default_factory=dict)
    docs_by_index: Mapping[str, int] = field(default_factory=dict)
    duplicate_applications: int = 0
    duplicate_sources: int = 0
    dropped_connections: int = 0
    hung_requests: int = 0
    max_in_flight: int = 0
    internal_errors: int = 0
    cpu_seconds: float = 0.0

    @property
    def items(self) -> int:
        """All ``_bulk`` items answered, whatever their status."""
        return sum(self.items_by_status.values())

    @property
    def docs(self) -> int:
        """All documents held, over every index."""
        return sum(self.docs_by_index.values())

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (status keys become strings)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("responses_by_status", "items_by_status"):
            data[name] = {str(k): v for k, v in data[name].items()}
        data["docs_by_index"] = dict(self.docs_by_index)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EsStats:
        """Build from :meth:`to_json` output."""
        values = dict(data)
        for name in ("responses_by_status", "items_by_status"):
            values[name] = {int(k): v for k, v in values[name].items()}
        return cls(**values)
