"""The built-in sinks (HTTP, Kinesis, Elasticsearch) and the registry that names them.

Each sink module exposes ``create_writer(options, **kwargs)``, which builds its writer
from one mapping of Spark string options (the writer's own and the core
``SinkOptions``). ``register_sink`` adds a sink of your own under a name (see
``registry``); ``sink_factory`` and ``sink_options`` look one up, importing it only
then, so a missing optional package matters only to those who use that sink.
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
    """The ``create_writer`` of sink ``name``.

    Raises:
        ValueError: no sink has that name.
        ImportError: the sink needs a package that is not installed (with an install hint).
    """
    return sink_entry(name).load_factory()


def sink_options(name: str) -> type | None:
    """The options class of sink ``name`` (its own options, beside ``SinkOptions``)."""
    return sink_entry(name).load_options()
