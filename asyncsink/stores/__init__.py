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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from asyncsink.masking import mask_url
from asyncsink.plugins import Registry, is_path, load_target
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


@dataclass(frozen=True, slots=True)
class _StoreEntry:
    target: str | type[RecordStore]
    install_hint: str = ""


_KINESIS_EXTRA = "pip install asyncsink[kinesis]"
_POSTGRESQL_EXTRA = "pip install asyncsink[postgresql]"
_stores: Registry[_StoreEntry] = Registry(
    "store scheme",
    {
        "memory": _StoreEntry("asyncsink.stores.memory:MemoryStore"),
        "sqlite": _StoreEntry("asyncsink.stores.sqlite:SQLiteStore"),
        "dynamodb": _StoreEntry("asyncsink.stores.dynamodb:DynamoDBStore", _KINESIS_EXTRA),
        "postgresql": _StoreEntry("asyncsink.stores.postgresql:PostgreSQLStore", _POSTGRESQL_EXTRA),
        "postgres": _StoreEntry("asyncsink.stores.postgresql:PostgreSQLStore", _POSTGRESQL_EXTRA),
    },
)

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
    if isinstance(target, str) and not is_path(target):
        raise ValueError(f"store target must be 'module:Class', got {target!r}")
    _stores.add(scheme, _StoreEntry(target), replace=replace)


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
    return ", ".join(f"{scheme}://" for scheme in _stores.names())


def _store_class(scheme: str, url: str) -> type[RecordStore]:
    """The store class registered for ``scheme``, imported on first use."""
    if scheme not in _stores:
        raise ValueError(f"unknown store scheme {scheme!r} in {_shown(url)!r}; known: {_schemes()}")
    entry = _stores.get(scheme)
    owner = f"the {scheme!r} record store"
    cls = load_target(entry.target, install_hint=entry.install_hint, owner=owner)
    if not (isinstance(cls, type) and issubclass(cls, RecordStore)):
        raise ValueError(f"store scheme {scheme!r}: {entry.target!r} is not a RecordStore class")
    return cls
