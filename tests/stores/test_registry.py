from __future__ import annotations

import sys
from pathlib import Path

import pytest

import asyncsink.stores as stores
from asyncsink.stores import open_store, register_store
from asyncsink.stores.memory import MemoryStore
from asyncsink.stores.sqlite import SQLiteStore


def test_all_names_the_public_exports() -> None:
    assert sorted(stores.__all__) == sorted(
        [
            "RecordStore",
            "Scope",
            "ScopeInfo",
            "ScopeState",
            "default_store_url",
            "open_store",
            "register_store",
        ]
    )
    for name in stores.__all__:
        assert hasattr(stores, name), name


def test_open_store_picks_the_implementation_by_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://registry-test"), MemoryStore)
    absolute = open_store(f"sqlite://{tmp_path}/calls.db?timeout=2.5")
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == tmp_path / "calls.db"
    relative = open_store("sqlite://state/calls.db")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == Path("state/calls.db")
    assert isinstance(open_store("SQLITE:///x.db"), SQLiteStore), "schemes are case-insensitive"


def test_open_store_names_the_url_and_the_known_schemes_for_an_unknown_one() -> None:
    with pytest.raises(ValueError) as caught:
        open_store("redis://localhost/0")
    message = str(caught.value)
    assert "redis://localhost/0" in message
    for scheme in ("dynamodb://", "memory://", "sqlite://"):
        assert scheme in message
    with pytest.raises(ValueError, match="no scheme"):
        open_store("/tmp/calls.db")


def test_errors_name_the_url_without_its_secrets() -> None:
    with pytest.raises(ValueError) as caught:
        open_store("redis://user:hunter2@cache:6379/0?token=abc123&db=1")
    message = str(caught.value)
    assert "redis://user:****@cache:6379/0?token=****&db=****" in message
    assert "hunter2" not in message and "abc123" not in message


def test_store_urls_with_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown sqlite store options"):
        open_store("sqlite:///x.db?timout=3")
    with pytest.raises(ValueError, match="timeout"):
        open_store("sqlite:///x.db?timeout=soon")
    with pytest.raises(ValueError, match="without a file path"):
        open_store("sqlite://")


def test_a_missing_optional_package_gives_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiobotocore", None)
    monkeypatch.setitem(sys.modules, "aiobotocore.session", None)
    for module in ("asyncsink.stores.dynamodb", "asyncsink.stores.dynamodb_client"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=r"pip install asyncsink\[kinesis\]") as caught:
        open_store("dynamodb://calls?region=us-east-1")
    assert "aiobotocore" in str(caught.value)
    assert isinstance(caught.value.__cause__, ImportError)


class _Custom(MemoryStore):
    @classmethod
    def from_url(cls, url: str) -> _Custom:
        store = cls()
        store.url = url  # type: ignore[attr-defined]
        return store


class _Other(_Custom):
    pass


def test_register_store_adds_a_scheme_by_path_or_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stores, "_registry", dict(stores._registry))
    register_store("custom", f"{__name__}:_Custom")
    opened = open_store("custom://anything")
    assert isinstance(opened, _Custom) and opened.url == "custom://anything"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="already registered"):
        register_store("custom", MemoryStore)
    register_store("custom", _Other, replace=True)
    assert type(open_store("custom://x")) is _Other
    register_store("broken", f"{__name__}:test_register_store_adds_a_scheme_by_path_or_class")
    with pytest.raises(ValueError, match="not a RecordStore class"):
        open_store("broken://x")
    with pytest.raises(ValueError, match="module:Class"):
        register_store("bad", "no_colon_here")
    with pytest.raises(ValueError, match="plain name"):
        register_store("has space", MemoryStore)
