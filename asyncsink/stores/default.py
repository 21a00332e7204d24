"""Where the record store lives when none is named: a SQLite file private to its user.

``$XDG_STATE_HOME/asyncsink/records.db``, else ``~/.local/state/asyncsink/records.db``;
when the home directory is unknown or cannot be written, ``<tempdir>/asyncsink-<uid>/
records.db``. The directory is created with mode 0o700 and must belong to the user and be
writable by nobody else: in a shared directory another user could read the records, or
plant records that make a sink skip entries it never sent.
"""

from __future__ import annotations

import getpass
import os
import stat
import tempfile
from pathlib import Path
from typing import NoReturn

from asyncsink.errors import DurableError
from asyncsink.stores.sqlite_file import make_private_dirs

__all__ = ["default_store_path", "default_store_url"]

FILE_NAME = "records.db"


def default_store_path() -> Path:
    """The current user's default SQLite record store file; its directory is made private.

    The directory is created (mode 0o700) when missing; the file is left to the store.

    Raises:
        DurableError: the directory exists but is not the user's own, others may write
            it, or no candidate directory can be created. The message names the directory
            and the way out.
    """
    state_home = _state_home()
    if state_home is not None:
        directory = state_home / "asyncsink"
        if _usable(directory):
            return directory / FILE_NAME
    directory = Path(tempfile.gettempdir()) / f"asyncsink-{_user()}"
    try:
        make_private_dirs(directory)
    except OSError as exc:
        raise DurableError(
            f"cannot create the default record store directory {str(directory)!r}: {exc}; "
            f"pass recordStore=sqlite:///PATH/{FILE_NAME} to keep the records elsewhere"
        ) from exc
    if directory.is_symlink():  # in a shared directory, anyone may have planted it
        _refuse(directory, "is a symbolic link")
    _check_private(directory)
    return directory / FILE_NAME


def default_store_url() -> str:
    """``sqlite://`` URL of ``default_store_path()``: the store used when none is named.

    Raises:
        DurableError: as ``default_store_path``.
    """
    return f"sqlite://{default_store_path()}"


def _state_home() -> Path | None:
    """The user's state directory (XDG), or ``None`` when the home directory is unknown."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec says to ignore a relative path
        return Path(xdg)
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        return None
    if not home.is_absolute() or not home.is_dir():
        return None
    return home / ".local" / "state"


def _usable(directory: Path) -> bool:
    """Whether ``directory`` can hold the store: made if missing, private, writable."""
    try:
        make_private_dirs(directory)
    except OSError:
        return False
    if not directory.exists():
        return False
    _check_private(directory)
    return os.access(directory, os.W_OK | os.X_OK)


def _check_private(directory: Path) -> None:
    info = directory.stat()
    uid = _uid()
    if not stat.S_ISDIR(info.st_mode):
        _refuse(directory, "is not a directory")
    if uid is not None and info.st_uid != uid:
        _refuse(directory, f"belongs to another user (uid {info.st_uid}, not {uid})")
    if info.st_mode & 0o022:
        mode = stat.S_IMODE(info.st_mode)
        _refuse(directory, f"can be written by other users (mode {mode:o})")


def _refuse(directory: Path, problem: str) -> NoReturn:
    raise DurableError(
        f"the default record store directory {str(directory)!r} {problem}, so others could "
        f"read or plant call records; remove it, or make it your own with mode 700, or "
        f"pass recordStore=sqlite:///PATH/{FILE_NAME} to keep the records elsewhere"
    )


def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)
    return None if getuid is None else int(getuid())


def _user() -> str:
    uid = _uid()
    return str(uid) if uid is not None else getpass.getuser()
