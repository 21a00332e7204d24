"""The sink registry: every sink the Spark entry points and data sources know, by name.

A sink is a factory ``create_writer(options, **kwargs)`` that builds an
``AsyncSinkWriter`` from one mapping of Spark string options (its own and the core
``SinkOptions``), plus the options class that documents and checks its own options.
Built-in sinks are named as ``"module:attribute"`` paths and imported only when first
used, so a missing optional package matters only to those who use that sink; the error
then says what to install. A user's sink registers the same way::

    register_sink("webhook", "webhook_spark:create_writer", "webhook_spark:WebhookOptions")
    foreach_batch("webhook", {"url": url}, sink_id="events")
    # after register_data_sources(spark):
    df.write.format("asyncsink-webhook").option("url", url).mode("append").save()

The factory may also be the callable itself. Spark runs it in its own Python workers, so
its module must be importable there.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SinkEntry", "register_sink", "sink_entry", "sink_names"]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")

Target = str | Callable[..., Any]


@dataclass(frozen=True, slots=True)
class SinkEntry:
    """A registered sink: its name, factory, options class and install hint."""

    name: str
    factory: Target
    options: str | type | None = None
    install_hint: str = ""

    def load_factory(self) -> Callable[..., Any]:
        """The factory, imported if named by path.

        Raises:
            ImportError: the sink needs a package that is not installed (with the hint).
        """
        factory: Callable[..., Any] = self._load(self.factory)
        return factory

    def load_options(self) -> type | None:
        """The options class of the sink's own options (beside ``SinkOptions``), if any."""
        if self.options is None:
            return None
        options: type = self._load(self.options)
        return options

    def _load(self, target: str | Any) -> Any:
        if not isinstance(target, str):
            return target
        try:
            return load_path(target)
        except ImportError as exc:
            module_name = target.partition(":")[0]
            if not self.install_hint or (exc.name and module_name.startswith(exc.name)):
                raise  # the sink's own module is missing: not an optional package
            raise ImportError(
                f"sink {self.name!r} needs a package that is missing ({exc}): {self.install_hint}"
            ) from exc


_SINKS: dict[str, SinkEntry] = {
    entry.name: entry
    for entry in (
        SinkEntry(
            "http",
            "asyncsink.sinks.http:create_writer",
            "asyncsink.sinks.http:HttpOptions",
            "pip install asyncsink",
        ),
        SinkEntry(
            "kinesis",
            "asyncsink.sinks.kinesis:create_writer",
            "asyncsink.sinks.kinesis:KinesisOptions",
            "pip install asyncsink[kinesis]",
        ),
        SinkEntry(
            "elasticsearch",
            "asyncsink.sinks.elasticsearch:create_writer",
            "asyncsink.sinks.elasticsearch:ElasticsearchOptions",
            "pip install asyncsink",
        ),
    )
}


def register_sink(
    name: str,
    factory: Target,
    options_class: str | type | None = None,
    *,
    install_hint: str = "",
    replace: bool = False,
) -> None:
    """Make ``name`` a sink: ``foreach_batch(name, ...)``, ``foreach_partition(df, name,
    ...)`` and, once ``register_data_sources`` ran, ``format("asyncsink-" + name)``.

    Args:
        name: lowercase letters, digits, ``-`` and ``_``, starting with a letter.
        factory: ``create_writer(options, **kwargs)``, or its ``"module:attribute"`` path.
            It gets the Spark options and ``call_log=`` and returns an unopened writer.
        options_class: the sink's own options (an ``asyncsink.options.Options``
            dataclass, or its path), shown by ``python -m asyncsink options NAME``.
        install_hint: what to install when the factory's module needs a missing package.
        replace: allow replacing a registered sink.

    Raises:
        ValueError: the name is not allowed, a path is not ``module:attribute``, or the
            name is taken and ``replace`` is false.
    """
    if not _NAME.match(name):
        raise ValueError(
            f"a sink name is 1-40 lowercase letters, digits, '-' or '_', starting with a "
            f"letter; got {name!r}"
        )
    for target in (factory, options_class):
        if isinstance(target, str) and not _is_path(target):
            raise ValueError(f"sink {name!r}: expected 'module:attribute', got {target!r}")
    entry = SinkEntry(name, factory, options_class, install_hint)
    if name in _SINKS and _SINKS[name] != entry and not replace:
        raise ValueError(f"sink {name!r} is already registered; pass replace=True to replace it")
    _SINKS[name] = entry


def sink_entry(name: str) -> SinkEntry:
    """The registered sink ``name`` (case-insensitive).

    Raises:
        ValueError: no sink has that name (the known ones are listed).
    """
    entry = _SINKS.get(name.lower())
    if entry is None:
        raise ValueError(f"unknown sink {name!r}; known sinks: {', '.join(sink_names())}")
    return entry


def sink_names() -> list[str]:
    """The registered sinks' names, sorted."""
    return sorted(_SINKS)


def load_path(path: str) -> Any:
    """The attribute a ``"module:attribute"`` path names.

    Raises:
        ValueError: not a ``module:attribute`` path, or the module has no such attribute.
        ImportError: the module cannot be imported.
    """
    if not _is_path(path):
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    module_name, _, attribute = path.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None


def _is_path(text: str) -> bool:
    module_name, sep, attribute = text.partition(":")
    return bool(sep and module_name and attribute)
