"""Registries by name: sinks (``asyncsink.plugins.sinks``, where ``asyncsink.sinks``
registers the built-in ones) and record stores (``asyncsink.stores``) are both kept in a
``Registry``.

An entry names its code as ``"module:attribute"`` paths, imported only when first used,
so a missing optional package matters only to those who use that entry; ``load_target``
then says what to install. An entry may also hold the object itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "load_path", "load_target"]

EntryT = TypeVar("EntryT")


class Registry(Generic[EntryT]):
    """Entries by lowercase name.

    Args:
        kind: what an entry is, for messages (``"sink"``, ``"record store scheme"``).
    """

    def __init__(self, kind: str, entries: dict[str, EntryT] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, EntryT] = dict(entries or {})

    def add(self, name: str, entry: EntryT, *, replace: bool = False) -> None:
        """Register ``entry`` as ``name``.

        Raises:
            ValueError: the name is taken by another entry and ``replace`` is false.
        """
        name = name.lower()
        taken = self._entries.get(name)
        if taken is not None and taken != entry and not replace:
            raise ValueError(
                f"{self.kind} {name!r} is already registered; pass replace=True to replace it"
            )
        self._entries[name] = entry

    def get(self, name: str) -> EntryT:
        """The entry of ``name`` (case-insensitive).

        Raises:
            ValueError: no entry has that name (the known ones are listed).
        """
        entry = self._entries.get(name.lower())
        if entry is None:
            known = ", ".join(self.names())
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}")
        return entry

    def copy(self) -> Registry[EntryT]:
        """A registry holding the same entries, to change apart from this one."""
        return Registry(self.kind, self._entries)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def load_target(target: str | Any, *, install_hint: str = "", owner: str = "") -> Any:
    """``target`` itself, or the attribute its ``"module:attribute"`` path names.

    Raises:
        ImportError: the module needs a package that is missing (the message says what to
            install, for ``owner``, when an ``install_hint`` is given).
        ValueError: not a ``module:attribute`` path, or the module has no such attribute.
    """
    if not isinstance(target, str):
        return target
    try:
        return load_path(target)
    except ImportError as exc:
        module_name = target.partition(":")[0]
        if not install_hint or (exc.name and module_name.startswith(exc.name)):
            raise  # the entry's own module is missing: not an optional package
        raise ImportError(
            f"{owner} needs a package that is missing ({exc}): {install_hint}"
        ) from exc


def load_path(path: str) -> Any:
    """The attribute a ``"module:attribute"`` path names.

    Raises:
        ValueError: not a ``module:attribute`` path, or the module has no such attribute.
        ImportError: the module cannot be imported.
    """
    if not is_path(path):
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    module_name, _, attribute = path.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None


def is_path(text: str) -> bool:
    """Whether ``text`` has the ``module:attribute`` form."""
    module_name, sep, attribute = text.partition(":")
    return bool(sep and module_name and attribute)
