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

__all__ = ["SHIMS", "shim_factory"]

SHIMS: dict[str, tuple[str, str]] = {
    "http": ("sinks.http:create_writer", "pip install asyncsink"),
    "kinesis": ("sinks.kinesis:create_writer", "pip install asyncsink[kinesis]"),
    "elasticsearch": ("sinks.elasticsearch:create_writer", "pip install asyncsink"),
}


def shim_factory(name: str) -> Callable[..., Any]:
    """The ``create_writer`` of shim ``name``.

    Raises:
        ValueError: no shim has that name.
        ImportError: the shim needs a package that is not installed (with an install hint).
    """
    try:
        target, hint = SHIMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown sink {name!r}; known sinks: {', '.join(sorted(SHIMS))}") from None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"sink {name!r} needs a package that is missing ({exc}): {hint}") from exc
    factory: Callable[..., Any] = getattr(module, attr)
    return factory
