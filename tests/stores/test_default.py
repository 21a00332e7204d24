"""The default record store is a SQLite file only its user can read or write."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import asyncsink.stores.default as default
from asyncsink.errors import DurableError
from asyncsink.stores import Scope, default_store_url, open_store
from asyncsink.stores.default import default_store_path
from asyncsink.stores.sqlite import SQLiteStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A home and a temp directory of the test's own; no XDG_STATE_HOME."""
    home, temp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    temp.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    yield home, temp


@pytest.fixture
def no_umask() -> Iterator[None]:
    """Let only the modes the code asks for decide: the umask takes nothing away."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_the_default_is_under_the_xdg_state_home(
    places: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    assert default_store_path() == state / "asyncsink" / "records.db"
    assert default_store_url() == f"sqlite://{state}/asyncsink/records.db"
    store = open_store(default_store_url())
    assert isinstance(store, SQLiteStore) and store.path == default_store_path()


def test_a_relative_xdg_state_home_is_ignored(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = places
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert default_store_path() == home / ".local" / "state" / "asyncsink" / "records.db"


def test_the_default_directories_and_file_are_private(
    places: tuple[Path, Path], no_umask: None
) -> None:
    home, _ = places
    path = default_store_path()
    assert path == home / ".local" / "state" / "asyncsink" / "records.db"
    for made in (home / ".local", home / ".local" / "state", path.parent):
        assert mode(made) == 0o700, made
    assert not path.exists(), "the file is left to the store"

    async def write() -> dict[str, int]:
        async with SQLiteStore(path) as store:
            epoch = (await store.take(Scope("s", 1, 0))).epoch
            await store.put(Scope("s", 1, 0), epoch, {"k": b"v"})
            return {file.name: mode(file) for file in path.parent.iterdir()}

    modes = anyio.run(write)  # the -wal and -shm files go when the last connection closes
    assert modes == {"records.db": 0o600, "records.db-shm": 0o600, "records.db-wal": 0o600}


def test_the_sqlite_store_makes_missing_directories_private_and_keeps_existing_ones(
    tmp_path: Path, no_umask: None
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    path = shared / "a" / "b" / "records.db"

    async def touch() -> None:
        async with SQLiteStore(path) as store:
            await store.take(Scope("s", 1, 0))

    anyio.run(touch)
    assert (mode(shared), mode(shared / "a"), mode(path.parent), mode(path)) == (
        0o755,
        0o700,
        0o700,
        0o600,
    )
    path.chmod(0o640)
    anyio.run(touch)
    assert mode(path) == 0o640, "an existing file keeps the mode its owner gave it"


def test_without_a_usable_home_the_default_falls_back_to_a_private_temp_directory(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, no_umask: None
) -> None:
    home, temp = places
    fallback = temp / f"asyncsink-{os.getuid()}" / "records.db"
    monkeypatch.setenv("HOME", str(home / "does-not-exist"))
    assert default_store_path() == fallback
    assert mode(fallback.parent) == 0o700
    (home / ".local").write_text("a file where a directory should be")
    monkeypatch.setenv("HOME", str(home))
    assert default_store_path() == fallback, "a home that cannot hold the directory"

    def unknown_home(cls: type[Path]) -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("HOME")
    monkeypatch.setattr(Path, "home", classmethod(unknown_home))
    assert default_store_path() == fallback, "an unknown home"


@pytest.mark.parametrize("bad_mode", [0o777, 0o770, 0o702])
def test_a_default_directory_others_can_write_is_refused(
    places: tuple[Path, Path], bad_mode: int
) -> None:
    home, _ = places
    directory = home / ".local" / "state" / "asyncsink"
    directory.mkdir(parents=True)
    directory.chmod(bad_mode)
    with pytest.raises(DurableError) as caught:
        default_store_url()
    message = str(caught.value)
    assert str(directory) in message and f"mode {bad_mode:o}" in message
    assert "recordStore=sqlite:///" in message and "mode 700" in message


def test_a_default_directory_of_another_user_is_refused(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, temp = places
    monkeypatch.setenv("HOME", "/does-not-exist")
    planted = temp / f"asyncsink-{os.getuid()}"
    planted.mkdir(mode=0o700)
    monkeypatch.setattr(default, "_uid", lambda: os.getuid() + 1)
    monkeypatch.setattr(default, "_user", lambda: str(os.getuid()))
    with pytest.raises(DurableError, match="belongs to another user") as caught:
        default_store_path()
    assert str(planted) in str(caught.value) and "recordStore=" in str(caught.value)


def test_a_planted_symlink_in_the_temp_directory_is_refused(
    places: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, temp = places
    monkeypatch.setenv("HOME", "/does-not-exist")
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (temp / f"asyncsink-{os.getuid()}").symlink_to(target)
    with pytest.raises(DurableError, match="symbolic link"):
        default_store_path()
    assert list(target.iterdir()) == []
