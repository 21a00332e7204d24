"""Record stores for the durable call log, opened by URL.

::

    open_store("memory://tests")                       # in-process; same name, same data
    open_store("sqlite:///var/lib/asyncsink/calls.db")  # absolute path
    open_store("sqlite://calls.db")                    # relative to the working directory
    open_store("dynamodb://calls?region=us-east-1")     # needs asyncsink[kinesis]
    open_store("postgresql://app@db:5432/pipelines")   # needs asyncsink[postgresql]
    open_store(default_store_url())                    # the user's private default file

Stores are looked up by URL scheme in a registry that names each implementation as
``"module:Class"`` and imports it only when a URL of that scheme is opened, so a missing
optional package matters only to those who use it. ``register_store`` adds a scheme; the
class needs a ``from_url(url)`` classmethod that returns the store, and may have a
``check_url(url)`` classmethod that raises ``ValueError`` for a URL ``from_url`` would
refuse, without opening anything (``check_store_url`` calls it).

A bare path (``/tmp/calls.db``) is not a store URL: its meaning would depend on the
machine reading it, so it is refused with the ``sqlite://`` URL it probably meant.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar, cast

from asyncsink.masking import mask_url
from asyncsink.stores.base import RecordStore, Scope, ScopeInfo, ScopeState
from asyncsink.stores.default import default_store_url

__all__ = [
    "RecordStore",
    "Scope",
    "ScopeInfo",
    "ScopeState",
    "check_store_url",
    "default_store_url",
    "open_store",
    "register_store",
]

_registry: dict[str, str | type[RecordStore]] = {
    "memory": "asyncsink.stores.memory:MemoryStore",
    "sqlite": "asyncsink.stores.sqlite:SQLiteStore",
    "dynamodb": "asyncsink.stores.dynamodb:DynamoDBStore",
    "postgresql": "asyncsink.stores.postgresql:PostgreSQLStore",
    "postgres": "asyncsink.stores.postgresql:PostgreSQLStore",
}

_install_hints: dict[str, str] = {
    "dynamodb": "pip install asyncsink[kinesis]",
    "postgresql": "pip install asyncsink[postgresql]",
    "postgres": "pip install asyncsink[postgresql]",
}

_T = TypeVar("_T")


def register_store(scheme: str, target: str | type[RecordStore], *, replace: bool = False) -> None:
    """Make ``open_store`` open URLs of ``scheme`` with ``target``.

    ``target`` is a ``RecordStore`` subclass with a ``from_url`` classmethod, or its
    ``"module:Class"`` path, imported on first use.

    Raises:
        ValueError: the scheme is not a plain lowercase name, the path is not
            ``module:Class``, or the scheme is taken and ``replace`` is false.
    """
    if not scheme or not scheme.isascii() or not scheme.replace("+", "").isalnum():
        raise ValueError(f"a store scheme is a plain name like 'sqlite', got {scheme!r}")
    scheme = scheme.lower()
    if isinstance(target, str):
        module, _, name = target.partition(":")
        if not module or not name:
            raise ValueError(f"store target must be 'module:Class', got {target!r}")
    if scheme in _registry and _registry[scheme] != target and not replace:
        raise ValueError(
            f"store scheme {scheme!r} is already registered to {_registry[scheme]!r}; "
            "pass replace=True to replace it"
        )
    _registry[scheme] = target
    _install_hints.pop(scheme, None)


def open_store(url: str) -> RecordStore:
    """Open the record store that ``url`` names; its scheme picks the implementation.

    Raises:
        ValueError: the URL has no scheme, an unknown one, or options its store rejects
            (the message names the URL with its secrets masked).
        ImportError: the store needs an optional package that is missing (with the
            ``pip install`` command that adds it).
    """
    scheme = _scheme(url)
    from_url = getattr(_store_class(scheme, url), "from_url", None)
    if not callable(from_url):
        raise ValueError(f"store scheme {scheme!r}: its store class has no from_url(url)")
    return _read(url, scheme, cast(Callable[[str], RecordStore], from_url))


def check_store_url(url: str) -> None:
    """Refuse a store URL that ``open_store`` would refuse, without opening anything.

    Meant for the driver, so that a bad ``recordStore`` fails the job before any task
    starts. No connection is made and no file or directory is created. A registered store
    class is asked through its ``check_url`` classmethod; without one (or when it only
    overrides ``from_url`` of a class that has one), the scheme alone is checked.

    Raises:
        ValueError: the URL has no scheme, an unknown one, no path or table, or an
            unknown or malformed option; the message names the URL (secrets masked), the
            scheme and the rule.
        ImportError: the store needs an optional package that is missing (with the
            ``pip install`` command that adds it).
    """
    scheme = _scheme(url)
    check_url = _checker(_store_class(scheme, url))
    if check_url is not None:
        _read(url, scheme, check_url)


def _checker(cls: type[RecordStore]) -> Callable[[str], object] | None:
    """``cls.check_url``, unless ``cls`` overrides ``from_url`` below it (a subclass for
    another scheme must not be checked by its parent's rules)."""
    for klass in cls.__mro__:
        if "check_url" in vars(klass):
            check_url = getattr(cls, "check_url", None)
            return cast(Callable[[str], object], check_url) if callable(check_url) else None
        if "from_url" in vars(klass):
            return None
    return None


def _scheme(url: str) -> str:
    """The lowercase scheme of ``url``.

    Raises:
        ValueError: ``url`` has none; a bare path gets the ``sqlite://`` URL it may mean.
    """
    scheme, separator, _ = url.partition("://")
    if separator and scheme:
        return scheme.lower()
    hint = ""
    if url and ":" not in url:
        hint = f"; for a SQLite file write sqlite://{_shown(url)} (sqlite:// then the path)"
    raise ValueError(f"store URL {_shown(url)!r} has no scheme; expected one of {_schemes()}{hint}")


def _read(url: str, scheme: str, reader: Callable[[str], _T]) -> _T:
    """``reader(url)``, with a refusal that names the URL (secrets masked) and scheme."""
    try:
        return reader(url)
    except ValueError as exc:
        raise ValueError(f"{scheme} store URL {_shown(url)!r} refused: {exc}") from exc


def _shown(url: str) -> str:
    """``url`` fit for an error message: credentials and the query's values masked."""
    return mask_url(url)


def _schemes() -> str:
    return ", ".join(f"{scheme}://" for scheme in sorted(_registry))


def _store_class(scheme: str, url: str) -> type[RecordStore]:
    """The store class registered for ``scheme``, imported on first use."""
    target = _registry.get(scheme)
    if target is None:
        raise ValueError(f"unknown store scheme {scheme!r} in {_shown(url)!r}; known: {_schemes()}")
    if not isinstance(target, str):
        return target
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = _install_hints.get(scheme)
        if hint is None:
            raise
        missing = exc.name or "a package"
        raise ImportError(
            f"the {scheme!r} record store needs {missing!r}, which is not installed; "
            f"install it with: {hint}"
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, RecordStore)):
        raise ValueError(f"store scheme {scheme!r}: {target!r} is not a RecordStore class")
    return cls
