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
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from .instruments import INSTRUMENTS, Kind

__all__ = ["Instruments", "Levels", "active_instruments"]

_API = "opentelemetry.metrics"
_SCOPE = "asyncsink"

_lock = threading.Lock()
_cache: tuple[Any, Instruments] | None = None  # (meter provider, its instruments)


class Levels(Protocol):
    """A running writer, as the observable up-down counters read it."""

    @property
    def attributes(self) -> Mapping[str, str]:
        """The attributes its levels are observed with."""

    def levels(self) -> tuple[int, ...]:
        """Its levels, in the order of the observable instruments of ``INSTRUMENTS``."""


class Running:
    """The writers running in this process, read when the SDK collects: their levels
    summed per attribute set, one observation each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: weakref.WeakSet[Levels] = weakref.WeakSet()

    def add(self, writer: Levels) -> None:
        with self._lock:
            self._writers.add(writer)

    def discard(self, writer: Levels) -> None:
        with self._lock:
            self._writers.discard(writer)

    def observe(self, index: int, options: Any = None) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        with self._lock:
            writers = list(self._writers)
        sums: dict[tuple[tuple[str, str], ...], int] = {}
        for writer in writers:
            key = tuple(sorted(writer.attributes.items()))
            sums[key] = sums.get(key, 0) + writer.levels()[index]
        for key, value in sums.items():
            yield Observation(value, dict(key))


@dataclass(frozen=True, slots=True)
class Instruments:
    """The instruments of ``INSTRUMENTS``, created on one meter, by name, and the
    writers whose levels the observable ones read."""

    by_name: dict[str, Any]
    running: Running = field(default_factory=Running)

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
    running = Running()
    made: dict[str, Any] = {}
    observed = 0
    for spec in INSTRUMENTS:
        common = {"name": spec.name, "unit": spec.unit, "description": spec.description}
        if spec.kind is Kind.COUNTER:
            made[spec.name] = meter.create_counter(**common)
        elif spec.kind is Kind.OBSERVABLE_UP_DOWN_COUNTER:
            callback = partial(running.observe, observed)
            made[spec.name] = meter.create_observable_up_down_counter(
                callbacks=[callback], **common
            )
            observed += 1
        else:
            made[spec.name] = meter.create_histogram(
                **common, explicit_bucket_boundaries_advisory=list(spec.buckets)
            )
    return Instruments(made, running)
