"""The embedded record store: one SQLite file, shared safely by the processes of a machine.

The file runs in WAL mode with ``synchronous=NORMAL``: a committed write survives a crash
of any process (the operating system keeps the WAL), and only a power loss or a kernel
crash may roll back the last commits. Every conditional write runs in a
``BEGIN IMMEDIATE`` transaction, so the epoch check and the writes it guards are one step
for every process using the file; readers never wait for writers.

Schema (``PRAGMA user_version`` = 1)::

    scopes(sink_id, batch_id, partition_id, epoch, completed, updated_at)
        primary key (sink_id, batch_id, partition_id)
    records(sink_id, batch_id, partition_id, key, value BLOB)
        primary key (sink_id, batch_id, partition_id, key)

The calls are short local I/O and run inline in the async methods, without a thread hop.
A call that meets another process's write waits for it up to ``timeout`` seconds,
blocking its event loop meanwhile; transactions here last well under a millisecond.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs

from asyncsink.errors import DurableError, FencedError
from asyncsink.stores.base import (
    RecordStore,
    Scope,
    ScopeInfo,
    ScopeState,
    _checked_writes,
    _purge_cutoff,
)

__all__ = ["SQLiteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scopes (
    sink_id      TEXT    NOT NULL,
    batch_id     INTEGER NOT NULL,
    partition_id INTEGER NOT NULL,
    epoch        INTEGER NOT NULL,
    completed    INTEGER NOT NULL DEFAULT 0,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (sink_id, batch_id, partition_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records (
    sink_id      TEXT    NOT NULL,
    batch_id     INTEGER NOT NULL,
    partition_id INTEGER NOT NULL,
    key          TEXT    NOT NULL,
    value        BLOB    NOT NULL,
    PRIMARY KEY (sink_id, batch_id, partition_id, key)
);
"""

_WHERE_SCOPE = "sink_id = ? AND batch_id = ? AND partition_id = ?"

# Connections inherited through fork(): the child must neither use nor close them (closing
# could checkpoint or unlink the parent's WAL), so they are kept here until the process ends.
_INHERITED: list[sqlite3.Connection] = []


def _key(scope: Scope) -> tuple[str, int, int]:
    return (scope.sink_id, scope.batch_id, scope.partition_id)


class SQLiteStore(RecordStore):
    """A ``RecordStore`` in one SQLite file; safe across the processes of one machine.

    Each process opens its own connection on first use (and again after a ``fork``), so a
    store can be built before Spark forks its Python workers. ``timeout`` bounds the wait
    for another process's write transaction.

    Raises (from every method):
        DurableError: the file cannot be opened, read or written, or the wait timed out.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._path = Path(path)
        self._timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Open ``sqlite:///abs/path.db`` or ``sqlite://relative/path.db``.

        The one option is ``timeout`` (seconds), e.g. ``sqlite:///x.db?timeout=30``.
        """
        prefix = "sqlite://"
        if url[: len(prefix)].lower() != prefix:
            raise ValueError(f"not a sqlite store URL (expected sqlite:///path.db): {url!r}")
        path, _, query = url[len(prefix) :].partition("?")
        if not path or path == "/":
            raise ValueError(f"sqlite store URL without a file path: {url!r}")
        options = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
        unknown = sorted(set(options) - {"timeout"})
        if unknown:
            raise ValueError(f"unknown sqlite store options {unknown} in {url!r}; allowed: timeout")
        if "timeout" not in options:
            return cls(path)
        try:
            timeout = float(options["timeout"][-1])
        except ValueError:
            raise ValueError(f"sqlite store option timeout must be seconds: {url!r}") from None
        return cls(path, timeout=timeout)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    async def take(self, scope: Scope) -> ScopeState:
        """Bump the epoch of ``scope`` (creating it at 1) and return its state."""
        with self._transaction("take", scope, write=True) as conn:
            ((epoch, completed),) = conn.execute(
                "INSERT INTO scopes (sink_id, batch_id, partition_id, epoch, completed,"
                " updated_at) VALUES (?, ?, ?, 1, 0, ?)"
                " ON CONFLICT (sink_id, batch_id, partition_id)"
                " DO UPDATE SET epoch = epoch + 1, updated_at = excluded.updated_at"
                " RETURNING epoch, completed",
                (*_key(scope), time.time()),
            ).fetchall()
            records = self._records(conn, scope)
        return ScopeState(epoch, bool(completed), records)

    async def load(self, scope: Scope) -> ScopeState | None:
        """Return the state of ``scope``, or ``None`` if it was never taken."""
        with self._transaction("load", scope, write=False) as conn:
            row = conn.execute(
                f"SELECT epoch, completed FROM scopes WHERE {_WHERE_SCOPE}", _key(scope)
            ).fetchone()
            if row is None:
                return None
            records = self._records(conn, scope)
        return ScopeState(row[0], bool(row[1]), records)

    async def put(
        self,
        scope: Scope,
        epoch: int,
        puts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
    ) -> None:
        """Apply ``puts`` and ``deletes`` in one transaction if ``epoch`` is current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        checked, dropped = _checked_writes(puts, deletes)
        key = _key(scope)
        with self._transaction("put", scope, write=True) as conn:
            self._fence(conn, scope, epoch, "updated_at = ?", (time.time(),))
            if dropped:
                conn.executemany(
                    f"DELETE FROM records WHERE {_WHERE_SCOPE} AND key = ?",
                    [(*key, name) for name in dropped],
                )
            if checked:
                conn.executemany(
                    "INSERT INTO records (sink_id, batch_id, partition_id, key, value)"
                    " VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (sink_id, batch_id, partition_id, key)"
                    " DO UPDATE SET value = excluded.value",
                    [(*key, name, value) for name, value in checked.items()],
                )

    async def complete(self, scope: Scope, epoch: int, *, drop_records: bool = True) -> None:
        """Mark ``scope`` COMPLETED (dropping its records if asked) if ``epoch`` is current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        with self._transaction("complete", scope, write=True) as conn:
            self._fence(conn, scope, epoch, "completed = 1, updated_at = ?", (time.time(),))
            if drop_records:
                conn.execute(f"DELETE FROM records WHERE {_WHERE_SCOPE}", _key(scope))

    async def scopes(self, sink_id: str | None = None) -> list[ScopeInfo]:
        """List the scopes held (of one sink, or all), ordered by scope."""
        where, args = ("WHERE s.sink_id = ?", (sink_id,)) if sink_id is not None else ("", ())
        with self._transaction("scopes", None, write=False) as conn:
            rows = conn.execute(
                "SELECT s.sink_id, s.batch_id, s.partition_id, s.epoch, s.completed,"
                " s.updated_at, (SELECT count(*) FROM records AS r WHERE r.sink_id = s.sink_id"
                " AND r.batch_id = s.batch_id AND r.partition_id = s.partition_id)"
                f" FROM scopes AS s {where}"
                " ORDER BY s.sink_id, s.batch_id, s.partition_id",
                args,
            ).fetchall()
        return [
            ScopeInfo(Scope(sink, batch, part), epoch, bool(done), count, updated)
            for sink, batch, part, epoch, done, updated, count in rows
        ]

    async def purge(
        self,
        sink_id: str,
        *,
        before_batch: int | None = None,
        older_than_s: float | None = None,
    ) -> int:
        """Delete the scopes of ``sink_id`` below ``before_batch`` and/or older than
        ``older_than_s`` seconds (both must hold when both are given). Returns how many."""
        cutoff = _purge_cutoff(before_batch, older_than_s, time.time())
        where = ["sink_id = ?"]
        args: list[object] = [sink_id]
        if before_batch is not None:
            where.append("batch_id < ?")
            args.append(before_batch)
        if cutoff is not None:
            where.append("updated_at < ?")
            args.append(cutoff)
        condition = " AND ".join(where)
        with self._transaction("purge", None, write=True) as conn:
            conn.execute(
                "DELETE FROM records WHERE (sink_id, batch_id, partition_id) IN"
                f" (SELECT sink_id, batch_id, partition_id FROM scopes WHERE {condition})",
                args,
            )
            return conn.execute(f"DELETE FROM scopes WHERE {condition}", args).rowcount

    async def aclose(self) -> None:
        """Close this process's connection; the next call opens a new one."""
        self._adopt_process()
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    @staticmethod
    def _records(conn: sqlite3.Connection, scope: Scope) -> dict[str, bytes]:
        rows = conn.execute(f"SELECT key, value FROM records WHERE {_WHERE_SCOPE}", _key(scope))
        return {name: bytes(value) for name, value in rows}

    @staticmethod
    def _fence(
        conn: sqlite3.Connection,
        scope: Scope,
        epoch: int,
        assignments: str,
        values: tuple[object, ...],
    ) -> None:
        """Update the scope row only if it holds ``epoch``; else raise ``FencedError``."""
        updated = conn.execute(
            f"UPDATE scopes SET {assignments} WHERE {_WHERE_SCOPE} AND epoch = ?",
            (*values, *_key(scope), epoch),
        ).rowcount
        if updated != 1:
            row = conn.execute(
                f"SELECT epoch FROM scopes WHERE {_WHERE_SCOPE}", _key(scope)
            ).fetchone()
            raise FencedError(scope, epoch, None if row is None else row[0])

    @contextmanager
    def _transaction(
        self, operation: str, scope: Scope | None, *, write: bool
    ) -> Iterator[sqlite3.Connection]:
        """Run a block in one transaction; translate SQLite errors into ``DurableError``."""
        self._adopt_process()
        with self._lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    conn.execute("COMMIT")
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                where = f" of scope {scope}" if scope is not None else ""
                raise DurableError(
                    f"sqlite store {str(self._path)!r}: {operation}{where} failed: {exc}"
                ) from exc

    def _adopt_process(self) -> None:
        """After a fork, drop the parent's connection and lock (neither is ours to use)."""
        pid = os.getpid()
        if pid != self._pid:
            if self._conn is not None:
                _INHERITED.append(self._conn)
            self._conn = None
            self._lock = threading.Lock()
            self._pid = pid

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        try:
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot switch the journal to WAL (got {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                (version,) = conn.execute("PRAGMA user_version").fetchone()
                if version == 0:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                elif version != SCHEMA_VERSION:
                    raise sqlite3.DatabaseError(
                        f"schema version {version} is not the supported {SCHEMA_VERSION}"
                    )
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except BaseException:
            conn.close()
            raise
        return conn
