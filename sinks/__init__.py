"""The built-in sinks (HTTP, Kinesis, Elasticsearch) and the registry that names them.

Each sink is a writer class and the options class of its own options. ``register_sink``
adds a sink of your own under a name (see ``registry``); ``sink_factory`` gives a
``create_writer(options, **kwargs)`` that builds a sink's writer from one mapping of
Spark string options (its own and the core ``SinkOptions``, split by the registry), and
``sink_options`` its options class. Both import the sink only then, so a missing
optional package matters only to those who use that sink.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import SinkEntry, register_sink, sink_entry, sink_names

__all__ = [
    "SinkEntry",
    "register_sink",
    "sink_entry",
    "sink_factory",
    "sink_names",
    "sink_options",
]


def sink_factory(name: str) -> Callable[..., Any]:
    """A ``create_writer(options, **kwargs)`` for sink ``name``.

    Raises:
        ValueError: no sink has that name.
        ImportError: the sink needs a package that is not installed (with an install hint).
    """
    return sink_entry(name).factory()


def sink_options(name: str) -> type | None:
    """The options class of sink ``name`` (its own options, beside ``SinkOptions``)."""
    return sink_entry(name).load_options()
