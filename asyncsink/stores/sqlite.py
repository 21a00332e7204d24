"""The embedded record store: one SQLite file, shared safely by the processes of a machine.

The file runs in WAL mode with ``synchronous=NORMAL``: a committed write survives a crash
of any process (the operating system keeps the WAL), and only a power loss or a kernel
crash may roll back the last commits. Every conditional write runs in a
``BEGIN IMMEDIATE`` transaction, so the epoch check and the writes it guards are one step
for every process using the file; readers never wait for writers.

The file is private to its user, and its schema (a ``scopes`` and a ``records`` table,
both keyed by sink, run, batch and partition) is created or migrated when a process first
opens it: see ``asyncsink.stores.sqlite_file``.

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

from asyncsink.errors import DurableError, FencedError
from asyncsink.stores.base import (
    RecordStore,
    Scope,
    ScopeInfo,
    ScopeState,
    _checked_writes,
    _purge_cutoff,
)
from asyncsink.stores.sqlite_file import open_connection
from asyncsink.stores.urls import check_timeout, parse_sqlite_url

__all__ = ["SQLiteStore"]

_COLUMNS = "sink_id, run, batch_id, partition_id"
_WHERE_SCOPE = "sink_id = ? AND run = ? AND batch_id = ? AND partition_id = ?"

# Connections inherited through fork(): the child must neither use nor close them (closing
# could checkpoint or unlink the parent's WAL), so they are kept here until the process ends.
_INHERITED: list[sqlite3.Connection] = []


def _key(scope: Scope) -> tuple[str, str, int, int]:
    return (scope.sink_id, scope.run, scope.batch_id, scope.partition_id)


class SQLiteStore(RecordStore):
    """A ``RecordStore`` in one SQLite file; safe across the processes of one machine.

    Each process opens its own connection on first use (and again after a ``fork``), so a
    store can be built before Spark forks its Python workers. ``timeout`` bounds the wait
    for another process's write transaction, and for the setup of a new connection. A
    missing file is created, private to its user, with its missing directories.

    Raises (from every method):
        DurableError: the file cannot be opened, read or written, or the wait timed out.
    """

    verifies = True  # opens the file as a task would

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        check_timeout(timeout)
        self._path = Path(path)
        self._timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Open ``sqlite:///abs/path.db`` or ``sqlite://relative/path.db``.

        The one option is ``timeout`` (seconds), e.g. ``sqlite:///x.db?timeout=30``.
        Nothing is opened or created until the store is first used.

        Raises:
            ValueError: the URL is not such a URL (see ``check_url``).
        """
        path, timeout = parse_sqlite_url(url)
        return cls(path) if timeout is None else cls(path, timeout=timeout)

    async def verify(self) -> None:
        """Open the file as a task would (created, with its schema, when missing), so a
        path that cannot serve fails before any task starts.

        Raises:
            DurableError: a directory, another program's database, a file that cannot
                be created or read.
        """
        try:
            open_connection(self._path, self._timeout).close()
        except (OSError, sqlite3.Error) as exc:
            raise DurableError(
                f"the SQLite file {str(self._path)!r} cannot be used as a record store: {exc}"
            ) from exc

    @classmethod
    def check_url(cls, url: str) -> None:
        """Check ``url`` the way ``from_url`` does, without building a store.

        Raises:
            ValueError: no file path, an unknown or malformed option, or a timeout that is
                not a number of seconds > 0.
        """
        parse_sqlite_url(url)

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
                f"INSERT INTO scopes ({_COLUMNS}, epoch, completed, updated_at)"
                " VALUES (?, ?, ?, ?, 1, 0, ?)"
                f" ON CONFLICT ({_COLUMNS})"
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

    async def load_record(self, scope: Scope, key: str) -> bytes | None:
        """One record of ``scope``, or ``None``."""
        with self._transaction("load_record", scope, write=False) as conn:
            row = conn.execute(
                f"SELECT value FROM records WHERE {_WHERE_SCOPE} AND key = ?", (*_key(scope), key)
            ).fetchone()
        return None if row is None else bytes(row[0])

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
            self._write(conn, scope, checked)

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
                "SELECT s.sink_id, s.run, s.batch_id, s.partition_id, s.epoch, s.completed,"
                " s.updated_at, (SELECT count(*) FROM records AS r WHERE r.sink_id = s.sink_id"
                " AND r.run = s.run AND r.batch_id = s.batch_id"
                " AND r.partition_id = s.partition_id)"
                f" FROM scopes AS s {where}"
                " ORDER BY s.sink_id, s.batch_id, s.partition_id, s.run",
                args,
            ).fetchall()
        return [
            ScopeInfo(Scope(sink, batch, part, run), epoch, bool(done), count, updated)
            for sink, run, batch, part, epoch, done, updated, count in rows
        ]

    async def purge(
        self,
        sink_id: str,
        *,
        run: str | None = None,
        before_batch: int | None = None,
        older_than_s: float | None = None,
    ) -> int:
        """Delete the scopes of ``sink_id`` (of one ``run``, or of all) below
        ``before_batch`` and/or older than ``older_than_s`` seconds (both must hold when
        both are given). Returns how many."""
        cutoff = _purge_cutoff(before_batch, older_than_s, time.time())
        where = ["sink_id = ?"]
        args: list[object] = [sink_id]
        if run is not None:
            where.append("run = ?")
            args.append(run)
        if before_batch is not None:
            where.append("batch_id < ?")
            args.append(before_batch)
        if cutoff is not None:
            where.append("updated_at < ?")
            args.append(cutoff)
        condition = " AND ".join(where)
        with self._transaction("purge", None, write=True) as conn:
            conn.execute(
                f"DELETE FROM records WHERE ({_COLUMNS}) IN"
                f" (SELECT {_COLUMNS} FROM scopes WHERE {condition})",
                args,
            )
            return conn.execute(f"DELETE FROM scopes WHERE {condition}", args).rowcount

    async def seal(
        self, scope: Scope, puts: Mapping[str, bytes], *, drop_prefixes: tuple[str, ...]
    ) -> None:
        """Mark ``scope`` COMPLETED for good, in one transaction: bump its epoch (creating
        it at 1), drop the records under ``drop_prefixes`` and write ``puts``."""
        checked, _ = _checked_writes(puts, ())
        key = _key(scope)
        with self._transaction("seal", scope, write=True) as conn:
            conn.execute(
                f"INSERT INTO scopes ({_COLUMNS}, epoch, completed, updated_at)"
                " VALUES (?, ?, ?, ?, 1, 1, ?)"
                f" ON CONFLICT ({_COLUMNS}) DO UPDATE SET epoch = epoch + 1, completed = 1,"
                " updated_at = excluded.updated_at",
                (*key, time.time()),
            )
            # substr, not LIKE: a prefix may hold '%' or '_'.
            conn.executemany(
                f"DELETE FROM records WHERE {_WHERE_SCOPE} AND substr(key, 1, ?) = ?",
                [(*key, len(prefix), prefix) for prefix in dict.fromkeys(drop_prefixes)],
            )
            self._write(conn, scope, checked)

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
    def _write(conn: sqlite3.Connection, scope: Scope, records: Mapping[str, bytes]) -> None:
        if records:
            conn.executemany(
                f"INSERT INTO records ({_COLUMNS}, key, value) VALUES (?, ?, ?, ?, ?, ?)"
                f" ON CONFLICT ({_COLUMNS}, key) DO UPDATE SET value = excluded.value",
                [(*_key(scope), name, value) for name, value in records.items()],
            )

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
            except (sqlite3.Error, OSError) as exc:
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
        return open_connection(self._path, self._timeout)
