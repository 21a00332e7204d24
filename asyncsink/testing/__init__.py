"""Test doubles asyncsink's tests, benchmarks and demo deliver to.

``FaultServer`` runs a fault-injecting HTTP endpoint (see ``asyncsink.testing.fault_server``
for its protocol); ``Faults`` says what it does wrong; ``FaultServerStats`` is what it
counted. Emulators of third-party systems (Elasticsearch) live with the tests, in the
repository's ``tests/servers``, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncsink.testing.accounting import FaultServerStats
from asyncsink.testing.faults import Faults

if TYPE_CHECKING:
    from asyncsink.testing.fault_server import FaultServer

__all__ = ["FaultServer", "FaultServerStats", "Faults"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``python -m asyncsink.testing.fault_server`` does not
    # find its own module already imported by this package.
    if name == "FaultServer":
        from asyncsink.testing.fault_server import FaultServer

        return FaultServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
