"""The sink registry: every sink the Spark entry points and data sources know, by name.

The sinks register themselves: ``asyncsink.sinks`` adds the built-in ones when it is
imported, and the registry imports it by name the first time it is asked, so that the
Spark layer depends on the registry alone, never on a sink.

A sink is an ``AsyncSinkWriter`` subclass and the options class of its own options. The
framework splits one mapping of Spark string options between that class and the core
``SinkOptions``, refuses unknown and missing ones with an ``OptionError`` naming them,
and builds the writer as ``Writer(own_options, options=core, call_log=...)``. The
driver checks the options without building a writer. Built-in sinks are named as
``"module:attribute"`` paths, imported only when first used, so a missing optional
package matters only to those who use that sink; the error then says what to install.
A user's sink registers the same way::

    register_sink("webhook", "webhook_spark:WebhookWriter", "webhook_spark:WebhookOptions")
    foreach_batch("webhook", {"url": url}, sink_id="events")
    # after register_data_sources(spark):
    df.write.format("asyncsink-webhook").option("url", url).mode("append").save()

Spark runs the writer in its own Python workers, so its module must be importable there.
A factory ``create_writer(options, **kwargs)`` is accepted in place of the class; it
then splits the options itself, and the driver checks them only when an options class
is registered beside it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..options import Options, SinkOptions, parse_options, raise_unknown
from ..writer import AsyncSinkWriter
from . import Registry, is_path, load_target

__all__ = ["SinkEntry", "build_writer", "register_sink", "sink_entry", "sink_names"]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")

Target = str | type | Callable[..., Any]


@dataclass(frozen=True, slots=True)
class SinkEntry:
    """A registered sink: its name, writer class (or factory), options class and install
    hint."""

    name: str
    writer: Target
    options: str | type | None = None
    install_hint: str = ""
    json_rows: bool = False
    """Whether the writer's entries are the rows' JSON under the contract of its options'
    ``contract`` (``asyncsink.encoding``), made from ``ArrowRows`` by ``encode_batch``:
    the Spark entry points may then hand it nested columns as JSON text made by Spark
    (see ``asyncsink.spark.json_columns``)."""

    def load_writer(self) -> Any:
        """The writer class (or factory), imported if named by path.

        Raises:
            ImportError: the sink needs a package that is not installed (with the hint).
        """
        return self._load(self.writer)

    def load_options(self) -> type[Options] | None:
        """The options class of the sink's own options (beside ``SinkOptions``), if any."""
        if self.options is None:
            return None
        options: type[Options] = self._load(self.options)
        return options

    def parse(self, raw: Mapping[str, Any]) -> tuple[Options | None, SinkOptions]:
        """Split ``raw`` into the sink's own options and the core ones, checked.

        Raises:
            OptionError: an option is unknown, missing or not allowed.
        """
        return split_options(self.load_options(), raw, owner=f"the {self.name} sink")

    def takes_mappings(self, own: Options | None = None) -> bool:
        """Whether the writer converts a dict of a row's fields as it converts the ``Row``:
        its class says so in ``takes_mappings``, and its options ``own`` may say not (a
        ``takes_mappings`` of theirs); a factory's writer is not known here."""
        writer = self.load_writer()
        if not (_is_writer_class(writer) and writer.takes_mappings is True):
            return False
        return bool(getattr(own, "takes_mappings", True))

    def build(self, raw: Mapping[str, Any], **kwargs: Any) -> AsyncSinkWriter[Any, Any]:
        """A writer (not opened) from the Spark options ``raw``; ``kwargs`` go to the
        writer (``call_log``, or a sink's ``client``...).

        Raises:
            OptionError: an option is unknown, missing or not allowed.
        """
        writer = self.load_writer()
        if not _is_writer_class(writer):
            return _from_factory(writer, raw, kwargs, f"sink {self.name!r}")
        own, core = self.parse(raw)
        return build_writer(writer, own, core, **kwargs)

    def factory(self) -> Callable[..., AsyncSinkWriter[Any, Any]]:
        """``build`` as a ``create_writer(options, **kwargs)`` function."""
        return self.build

    def _load(self, target: Any) -> Any:
        return load_target(target, install_hint=self.install_hint, owner=f"sink {self.name!r}")


def split_options(
    own_class: type[Options] | None, raw: Mapping[str, Any], *, owner: str
) -> tuple[Options | None, SinkOptions]:
    """The sink's own options (``None`` without a class) and the core ``SinkOptions`` that
    ``raw`` gives, with the defaults the own options set for the core ones.

    Raises:
        OptionError: an option is unknown, missing (named with ``owner``) or not allowed.
    """
    own, rest = (None, raw) if own_class is None else parse_options(own_class, raw, owner=owner)
    defaults = own.core_defaults() if own is not None else {}
    core, rest = parse_options(SinkOptions, rest, defaults, owner=owner)
    if own is not None:
        own.check_core(core)
    if rest:
        raise_unknown(rest, [SinkOptions, *([own_class] if own_class else [])])
    return own, core


def build_writer(
    writer: type[AsyncSinkWriter[Any, Any]], own: Options | None, core: SinkOptions, **kwargs: Any
) -> AsyncSinkWriter[Any, Any]:
    """``writer(own, options=core, **kwargs)``, or without ``own`` when it is ``None``."""
    make: Callable[..., AsyncSinkWriter[Any, Any]] = writer
    if own is None:
        return make(options=core, **kwargs)
    return make(own, options=core, **kwargs)


def _is_writer_class(target: Any) -> bool:
    return isinstance(target, type) and issubclass(target, AsyncSinkWriter)


def _from_factory(
    factory: Callable[..., Any], raw: Mapping[str, Any], kwargs: dict[str, Any], what: str
) -> AsyncSinkWriter[Any, Any]:
    try:
        writer = factory(raw, **kwargs)
    except TypeError as exc:
        raise TypeError(
            f"{what}: calling it as a factory, with the options and call_log=..., failed: {exc}"
        ) from exc
    if not isinstance(writer, AsyncSinkWriter):
        raise TypeError(
            f"{what} gave {type(writer).__name__}, not an AsyncSinkWriter (a factory must "
            "return a writer; a class must subclass AsyncSinkWriter)"
        )
    return writer


_SINKS: Registry[SinkEntry] = Registry("sink")
_BUILT_IN = "asyncsink.sinks"  # registers the built-in sinks when it is imported


def _sinks() -> Registry[SinkEntry]:
    """The registry, the built-in sinks in it (their package is imported once, by name)."""
    if _BUILT_IN not in sys.modules:
        importlib.import_module(_BUILT_IN)
    return _SINKS


def register_sink(
    name: str,
    writer: Target,
    options: str | type | None = None,
    *,
    install_hint: str = "",
    replace: bool = False,
    json_rows: bool = False,
) -> None:
    """Make ``name`` a sink: ``foreach_batch(name, ...)``, ``foreach_partition(df, name,
    ...)`` and, once ``register_data_sources`` ran, ``format("asyncsink-" + name)``.

    Args:
        name: lowercase letters, digits, ``-`` and ``_``, starting with a letter.
        writer: the ``AsyncSinkWriter`` subclass, or its ``"module:Class"`` path. It is
            built as ``writer(own_options, options=core, call_log=...)``, or without
            ``own_options`` when the sink has no options class. A factory
            ``create_writer(options, **kwargs)`` is accepted too.
        options: the sink's own options (an ``asyncsink.options.Options`` dataclass, or
            its path): checked on the driver, required ones included, and shown by
            ``python -m asyncsink options NAME``.
        install_hint: what to install when the writer's module needs a missing package.
        replace: allow replacing a registered sink.
        json_rows: the writer's entries are the rows' JSON, as ``encode_batch`` makes it
            under its options' ``contract`` (see ``SinkEntry.json_rows``).

    Raises:
        ValueError: the name is not allowed, a path is not ``module:attribute``, or the
            name is taken and ``replace`` is false.
    """
    if not _NAME.match(name):
        raise ValueError(
            f"a sink name is 1-40 lowercase letters, digits, '-' or '_', starting with a "
            f"letter; got {name!r}"
        )
    for target in (writer, options):
        if isinstance(target, str) and not is_path(target):
            raise ValueError(f"sink {name!r}: expected 'module:attribute', got {target!r}")
    _sinks().add(name, SinkEntry(name, writer, options, install_hint, json_rows), replace=replace)


def sink_entry(name: str) -> SinkEntry:
    """The registered sink ``name`` (case-insensitive).

    Raises:
        ValueError: no sink has that name (the known ones are listed).
    """
    return _sinks().get(name)


def sink_names() -> list[str]:
    """The registered sinks' names, sorted."""
    return _sinks().names()
