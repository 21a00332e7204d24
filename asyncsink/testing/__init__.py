"""Test doubles asyncsink's tests, benchmarks and demo deliver to.

``FaultServer`` runs a fault-injecting HTTP endpoint (see ``asyncsink.testing.fault_server``
for its protocol); ``Faults`` says what it does wrong; ``FaultServerStats`` is what it
counted. ``ElasticsearchServer`` runs an Elasticsearch-compatible ``_bulk`` / ``_mget``
endpoint (see ``asyncsink.testing.es_server``), with ``EsFaults`` and ``EsStats``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncsink.testing.accounting import FaultServerStats
from asyncsink.testing.es_model import EsFaults, EsStats
from asyncsink.testing.faults import Faults

if TYPE_CHECKING:
    from asyncsink.testing.es_server import ElasticsearchServer
    from asyncsink.testing.fault_server import FaultServer

__all__ = [
    "ElasticsearchServer",
    "EsFaults",
    "EsStats",
    "FaultServer",
    "FaultServerStats",
    "Faults",
]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``python -m asyncsink.testing.fault_server`` (or
    # ``es_server``) does not find its own module already imported by this package.
    if name == "FaultServer":
        from asyncsink.testing.fault_server import FaultServer

        return FaultServer
    if name == "ElasticsearchServer":
        from asyncsink.testing.es_server import ElasticsearchServer

        return ElasticsearchServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
