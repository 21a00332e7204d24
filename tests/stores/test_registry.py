from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path

import pytest

import asyncsink.stores as stores
import asyncsink.stores.memory as memory
from asyncsink.stores import check_store_url, open_store, register_store
from asyncsink.stores.memory import MemoryStore
from asyncsink.stores.sqlite import SQLiteStore


def test_all_names_the_public_exports() -> None:
    assert sorted(stores.__all__) == sorted(
        [
            "RecordStore",
            "Scope",
            "ScopeInfo",
            "ScopeState",
            "check_store_url",
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
    assert "redis://***@cache:6379/0?token=***&db=***" in message
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
    monkeypatch.setattr(stores, "_stores", stores._stores.copy())
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


@pytest.mark.parametrize(
    ("url", "shown", "rule"),
    [
        ("mysql://x", "mysql://x", "unknown store scheme 'mysql'"),
        ("sqlite://", "sqlite://", "without a file path"),
        ("sqlite:///", "sqlite:///", "without a file path"),
        ("sqlite://?timeout=3", "sqlite://?timeout=***", "without a file path"),
        ("sqlite:///x.db?timeout=abc", "sqlite:///x.db?timeout=***", "number of seconds > 0"),
        ("sqlite:///x.db?timeout=-1", "sqlite:///x.db?timeout=***", "number of seconds > 0"),
        ("sqlite:///x.db?timeout=nan", "sqlite:///x.db?timeout=***", "number of seconds > 0"),
        ("sqlite:///x.db?timeout=", "sqlite:///x.db?timeout=***", "number of seconds > 0"),
        ("sqlite:///x.db?timout=3", "sqlite:///x.db?timout=***", "options ['timout']"),
        ("sqlite:///x.db?timeout", "sqlite:///x.db?***", "malformed options"),
        ("memory://name?size=3", "memory://name?size=***", "take no options"),
        ("dynamodb://ab", "dynamodb://ab", "3 to 255"),
        ("dynamodb:///calls", "dynamodb:///calls", "dynamodb://TABLE"),
        ("dynamodb://calls?create_table=maybe", "create_table=***", "true or false"),
        ("dynamodb://calls?regoin=x", "dynamodb://calls?regoin=***", "options ['regoin']"),
    ],
)
def test_check_store_url_names_the_url_the_scheme_and_the_rule(
    url: str, shown: str, rule: str
) -> None:
    with pytest.raises(ValueError) as caught:
        check_store_url(url)
    message = str(caught.value)
    assert shown in message and rule in message
    scheme = url.partition("://")[0]
    assert f"{scheme} store URL" in message or f"scheme {scheme!r}" in message
    with pytest.raises(ValueError, match=re.escape(rule)):
        open_store(url)


def test_check_store_url_shows_no_option_value(tmp_path: Path) -> None:
    for url in (
        "sqlite:///x.db?password=hunter2",
        "dynamodb://calls?aws_secret_access_key=hunter2",
        "dynamodb://calls?region=us-east-1&create_table=hunter2",
        "sqlite:///x.db?timeout=hunter2",
    ):
        with pytest.raises(ValueError) as caught:
            check_store_url(url)
        assert "hunter2" not in str(caught.value), url


@pytest.mark.parametrize(
    ("bare", "meant"),
    [("/tmp/x.db", "sqlite:///tmp/x.db"), ("state/records.db", "sqlite://state/records.db")],
)
def test_a_bare_path_is_refused_with_the_sqlite_url_it_may_mean(bare: str, meant: str) -> None:
    for check in (check_store_url, open_store):
        with pytest.raises(ValueError, match="no scheme") as caught:
            check(bare)
        assert f"write {meant} " in str(caught.value)


def test_check_store_url_opens_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "new" / "dir" / "records.db"
    check_store_url(f"sqlite://{path}?timeout=2.5")
    check_store_url("sqlite://relative/records.db")
    assert not path.parent.parent.exists() and not Path("relative").exists()
    name = f"checked-{uuid.uuid4().hex}"
    check_store_url(f"memory://{name}")
    assert name not in memory._NAMED, "no named memory store was made"
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    start = time.monotonic()
    check_store_url("dynamodb://calls?region=us-east-1&endpoint_url=http://192.0.2.1:9")
    assert time.monotonic() - start < 1.0, "no connection was attempted"


def test_check_store_url_gives_the_install_hint_for_a_missing_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiobotocore", None)
    monkeypatch.setitem(sys.modules, "aiobotocore.session", None)
    for module in ("asyncsink.stores.dynamodb", "asyncsink.stores.dynamodb_client"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=r"pip install asyncsink\[kinesis\]"):
        check_store_url("dynamodb://calls?region=us-east-1")


class _Checked(MemoryStore):
    @classmethod
    def check_url(cls, url: str) -> None:
        if "bad" in url:
            raise ValueError("this store refuses 'bad'")


def test_check_store_url_asks_a_registered_store_class_that_can_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stores, "_stores", stores._stores.copy())
    register_store("checked", _Checked)
    check_store_url("checked://good")
    with pytest.raises(ValueError, match=r"checked store URL 'checked://bad' refused: this"):
        check_store_url("checked://bad")
    register_store("custom", _Custom)
    # _Custom reads its own URLs: the memory store's rules, which it inherits, do not apply.
    check_store_url("custom://anything?at=all")
    with pytest.raises(ValueError, match="unknown store scheme"):
        check_store_url("unregistered://x")
