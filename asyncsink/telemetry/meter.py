"""Whether the application configured an OpenTelemetry SDK, and the instruments on it.

The OpenTelemetry API is a no-op until an application sets a meter provider. asyncsink
checks that when a writer opens (and when the driver records a committed batch), so
that without an SDK nothing is created and nothing is recorded: the writer keeps its
null object. The API is only imported when the application imported it already; the SDK
never is (except by ``configure_from_environment``, in processes Spark starts).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

from .instruments import INSTRUMENTS, Kind

__all__ = ["Instruments", "active_instruments"]

_API = "opentelemetry.metrics"
_SCOPE = "asyncsink"

_lock = threading.Lock()
_cache: tuple[Any, Instruments] | None = None  # (meter provider, its instruments)


@dataclass(frozen=True, slots=True)
class Instruments:
    """The instruments of ``INSTRUMENTS``, created on one meter, by name."""

    by_name: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.by_name[name]


def active_instruments() -> Instruments | None:
    """asyncsink's instruments on the configured meter provider, or ``None`` when no SDK
    is configured (the API's own proxy or no-op provider is in place, or the API was
    never imported)."""
    global _cache
    if _API not in sys.modules:
        return None
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    if type(provider).__module__.startswith(_API):
        return None
    with _lock:
        if _cache is None or _cache[0] is not provider:
            _cache = (provider, _create(provider))
        return _cache[1]


def _create(provider: Any) -> Instruments:
    from asyncsink import __version__

    meter = provider.get_meter(_SCOPE, __version__)
    made: dict[str, Any] = {}
    for spec in INSTRUMENTS:
        common = {"name": spec.name, "unit": spec.unit, "description": spec.description}
        if spec.kind is Kind.COUNTER:
            made[spec.name] = meter.create_counter(**common)
        elif spec.kind is Kind.UP_DOWN_COUNTER:
            made[spec.name] = meter.create_up_down_counter(**common)
        else:
            made[spec.name] = meter.create_histogram(
                **common, explicit_bucket_boundaries_advisory=list(spec.buckets)
            )
    return Instruments(made)
