"""Opening the SQLite store's file: private to its user, in WAL mode, at the current schema.

Directories the store creates get mode 0o700 and a new database file mode 0o600 (SQLite
gives the ``-wal`` and ``-shm`` files the database file's mode), so neither the records
nor the file can be read or changed by another user of the machine.

Setting a connection up (the switch to WAL, creating or migrating the schema) is retried
while another process holds the file, until the store's ``timeout``: many Spark tasks
open a new file at the same moment, and some of these steps do not wait on their own.

Schema version 2 (``PRAGMA user_version``)::

    scopes(sink_id, run, batch_id, partition_id, epoch, completed, updated_at)
        primary key (sink_id, run, batch_id, partition_id)
    records(sink_id, run, batch_id, partition_id, key, value BLOB)
        primary key (sink_id, run, batch_id, partition_id, key)

Version 1 had no ``run``; a version-1 file is migrated in place, in one transaction, its
scopes keeping the run ``""``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

__all__ = ["SCHEMA_VERSION", "make_private_dirs", "open_connection"]

SCHEMA_VERSION = 2

_TABLES = """
CREATE TABLE scopes (
    sink_id      TEXT    NOT NULL,
    run          TEXT    NOT NULL DEFAULT '',
    batch_id     INTEGER NOT NULL,
    partition_id INTEGER NOT NULL,
    epoch        INTEGER NOT NULL,
    completed    INTEGER NOT NULL DEFAULT 0,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (sink_id, run, batch_id, partition_id)
) WITHOUT ROWID;
CREATE TABLE records (
    sink_id      TEXT    NOT NULL,
    run          TEXT    NOT NULL DEFAULT '',
    batch_id     INTEGER NOT NULL,
    partition_id INTEGER NOT NULL,
    key          TEXT    NOT NULL,
    value        BLOB    NOT NULL,
    PRIMARY KEY (sink_id, run, batch_id, partition_id, key)
);
"""

_FROM_VERSION_1 = f"""
ALTER TABLE scopes RENAME TO scopes_v1;
ALTER TABLE records RENAME TO records_v1;
{_TABLES}
INSERT INTO scopes (sink_id, run, batch_id, partition_id, epoch, completed, updated_at)
    SELECT sink_id, '', batch_id, partition_id, epoch, completed, updated_at FROM scopes_v1;
INSERT INTO records (sink_id, run, batch_id, partition_id, key, value)
    SELECT sink_id, '', batch_id, partition_id, key, value FROM records_v1;
DROP TABLE scopes_v1;
DROP TABLE records_v1;
"""

_RETRY_PAUSE_S = (0.005, 0.1)  # first and longest pause between setup attempts
_LONGEST_WAIT_S = (2**31 - 1) / 1000  # SQLite's busy timeout is an int of milliseconds


def open_connection(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection to the store file at ``path``, set up for the store.

    Creates the file (and its missing directories) privately when it does not exist,
    switches it to WAL, and creates or migrates the schema, waiting up to ``timeout``
    seconds in all for other processes that hold the file.

    Raises:
        sqlite3.Error: the file cannot be opened or set up, or the wait timed out.
        OSError: the file or a directory cannot be created.
    """
    _create_private_file(path)
    timeout = min(timeout, _LONGEST_WAIT_S)  # longer would wrap around to no wait at all
    deadline = time.monotonic() + timeout
    pause = _RETRY_PAUSE_S[0]
    while True:
        remaining = max(deadline - time.monotonic(), 0.001)
        conn = sqlite3.connect(
            path, timeout=remaining, isolation_level=None, check_same_thread=False
        )
        try:
            _set_up(conn)
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        except BaseException:
            conn.close()
            raise
        time.sleep(pause)
        pause = min(pause * 2, _RETRY_PAUSE_S[1])


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each with mode 0o700.

    Directories that exist already are left as they are.

    Raises:
        OSError: a directory cannot be created.
    """
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile
            pass


def _create_private_file(path: Path) -> None:
    """Create an empty database file readable by its owner only, unless one exists."""
    make_private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _set_up(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL and bring its schema to ``SCHEMA_VERSION``; refuse a file
    that holds another program's tables, before changing a byte of it."""
    if is_foreign(conn):
        raise sqlite3.DatabaseError(
            "the file is another program's SQLite database (tables of its own, and no "
            "record store schema), not a record store"
        )
    (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()  # SQLITE_BUSY if held
    if str(mode).lower() != "wal":  # the file system cannot do WAL: waiting will not help
        raise sqlite3.DatabaseError(f"cannot switch the journal to WAL (got {mode})")
    conn.execute("PRAGMA synchronous = NORMAL")
    if _version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _version(conn)
        if version == 0:
            _run(conn, _TABLES)
        elif version == 1:
            _run(conn, _FROM_VERSION_1)
        elif version != SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is not one this asyncsink supports "
                f"(1 or {SCHEMA_VERSION}); was the file written by a newer release?"
            )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def is_foreign(conn: sqlite3.Connection) -> bool:
    """Whether the file holds another program's tables: some, and no store schema version.

    Read in one statement, so in one snapshot: a process creating the schema meanwhile
    sets the version in the transaction that creates the tables.
    """
    ((version, tables),) = conn.execute(
        "SELECT (SELECT user_version FROM pragma_user_version),"
        " (SELECT count(*) FROM sqlite_master)"
    ).fetchall()
    return bool(version == 0 and tables > 0)


def _version(conn: sqlite3.Connection) -> int:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def _run(conn: sqlite3.Connection, script: str) -> None:
    """Run the statements of ``script`` one by one, inside the caller's transaction
    (``executescript`` would commit it first)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Another connection holds the file: trying again later may succeed."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text
