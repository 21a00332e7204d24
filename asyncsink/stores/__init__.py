"""Record stores for the durable call log, opened by URL.

::

    open_store("memory://tests")                       # in-process; same name, same data
    open_store("sqlite:///var/lib/asyncsink/calls.db")  # absolute path
    open_store("sqlite://calls.db")                    # relative to the working directory
    open_store("dynamodb://calls?region=us-east-1")     # needs asyncsink[kinesis]
    open_store(default_store_url())                    # the user's private default file

Stores are looked up by URL scheme in a registry that names each implementation as
``"module:Class"`` and imports it only when a URL of that scheme is opened, so a missing
optional package matters only to those who use it. ``register_store`` adds a scheme; the
class needs a ``from_url(url)`` classmethod that returns the store.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit, urlunsplit

from asyncsink.stores.base import RecordStore, Scope, ScopeInfo, ScopeState
from asyncsink.stores.default import default_store_url

__all__ = [
    "RecordStore",
    "Scope",
    "ScopeInfo",
    "ScopeState",
    "default_store_url",
    "open_store",
    "register_store",
]

_registry: dict[str, str | type[RecordStore]] = {
    "memory": "asyncsink.stores.memory:MemoryStore",
    "sqlite": "asyncsink.stores.sqlite:SQLiteStore",
    "dynamodb": "asyncsink.stores.dynamodb:DynamoDBStore",
}

_install_hints: dict[str, str] = {
    "dynamodb": "pip install asyncsink[kinesis]",
}


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
        ValueError: the URL has no scheme, an unknown one, or options its store rejects.
        ImportError: the store needs an optional package that is missing (with the
            ``pip install`` command that adds it).
    """
    scheme, separator, _ = url.partition("://")
    if not separator or not scheme:
        raise ValueError(f"store URL {_shown(url)!r} has no scheme; expected one of {_schemes()}")
    factory = _factory(scheme.lower(), url)
    return factory(url)


def _shown(url: str) -> str:
    """``url`` fit for an error message: a password and the query's values masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{url.partition('://')[0]}://..."
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":****@", 1)
    query = "&".join(
        f"{name.partition('=')[0]}=****" if "=" in name else name
        for name in parts.query.split("&")
        if name
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _schemes() -> str:
    return ", ".join(f"{scheme}://" for scheme in sorted(_registry))


def _factory(scheme: str, url: str) -> Callable[[str], RecordStore]:
    target = _registry.get(scheme)
    if target is None:
        raise ValueError(f"unknown store scheme {scheme!r} in {_shown(url)!r}; known: {_schemes()}")
    if isinstance(target, str):
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
        target = cls
    from_url = getattr(target, "from_url", None)
    if not callable(from_url):
        raise ValueError(f"store scheme {scheme!r}: {target.__name__} has no from_url(url)")
    return cast(Callable[[str], RecordStore], from_url)
