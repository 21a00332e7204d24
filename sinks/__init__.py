"""Destination shims, looked up by name.

Each shim module exposes ``create_writer(options, **kwargs)``, which builds its writer from
one mapping of Spark string options (the writer's own and the core ``SinkOptions``).
Shims are imported only when first used, so a missing optional package matters only to
those who use that shim; the error then says what to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["SHIMS", "shim_factory", "shim_options"]

# name -> (factory, its options class, install hint)
SHIMS: dict[str, tuple[str, str, str]] = {
    "http": ("sinks.http:create_writer", "sinks.http:HttpOptions", "pip install asyncsink"),
    "kinesis": (
        "sinks.kinesis:create_writer",
        "sinks.kinesis:KinesisOptions",
        "pip install asyncsink[kinesis]",
    ),
    "elasticsearch": (
        "sinks.elasticsearch:create_writer",
        "sinks.elasticsearch:ElasticsearchOptions",
        "pip install asyncsink",
    ),
}


def shim_factory(name: str) -> Callable[..., Any]:
    """The ``create_writer`` of shim ``name``.

    Raises:
        ValueError: no shim has that name.
        ImportError: the shim needs a package that is not installed (with an install hint).
    """
    factory: Callable[..., Any] = _load(name, 0)
    return factory


def shim_options(name: str) -> type:
    """The options class of shim ``name`` (its own options, beside ``SinkOptions``)."""
    options: type = _load(name, 1)
    return options


def _load(name: str, which: int) -> Any:
    try:
        entry = SHIMS[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown sink {name!r}; known sinks: {', '.join(sorted(SHIMS))}"
        ) from None
    module_name, _, attr = entry[which].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise  # the shim itself is missing: a broken installation, not an extra
        raise ImportError(
            f"sink {name!r} needs a package that is missing ({exc}): {entry[2]}"
        ) from exc
    return getattr(module, attr)
