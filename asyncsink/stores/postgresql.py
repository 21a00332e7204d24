"""The record store for any cluster: two tables in a PostgreSQL database every executor
can reach.

::

    postgresql://asyncsink@db.internal:5432/pipelines?table=asyncsink&sslmode=require

Tables (created on first use unless ``create_table=false``; ``table`` names their prefix):

- ``<table>_scopes``: one row per scope, keyed by ``(sink_id, run, batch_id,
  partition_id)``, with its ``epoch``, ``completed`` flag and ``updated_at`` (seconds
  since the epoch, by the writer's clock); an index on ``(sink_id, updated_at)`` serves
  listing and purging by sink and age.
- ``<table>_records``: one row per record, keyed by the scope and ``key``, with its
  ``value`` (bytea); a foreign key to its scope deletes it with the scope.

Fencing: ``take`` bumps the epoch with one upsert, which takes the scope row's lock, then
reads the records in the same transaction, so it sees every put that committed before
it. A put is one statement: an ``UPDATE`` of the scope row on the condition ``epoch =
<caller's epoch>``, and the deletes and inserts of records only when that update matched.
The puts that a process's writers make while one is being written share the next
statement and its commit, each behind its own scope's condition (group commit, see
``asyncsink.stores.postgresql_groups``). A put that meets a take in progress waits for
it, then finds the new epoch and writes nothing (``FencedError``). Every write is
committed, with PostgreSQL's durability, when the call returns.

Connection settings come from the URL and, for what it leaves out, libpq's ``PG*``
environment variables, service file and password file. Connections are pooled per
process (see ``asyncsink.stores.postgresql_pool``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import conninfo as libpq
from psycopg import sql

from asyncsink.errors import DurableError, FencedError
from asyncsink.stores.base import (
    RecordStore,
    Scope,
    ScopeInfo,
    ScopeState,
    _checked_writes,
    _purge_cutoff,
)
from asyncsink.stores.postgresql_groups import GroupPut, LoopGroups
from asyncsink.stores.postgresql_pool import Connections, Tables, redact, shown
from asyncsink.stores.urls import parse_postgresql_url

__all__ = ["PostgreSQLStore"]

_SCOPE = "sink_id = %(sink)s AND run = %(run)s AND batch_id = %(batch)s AND partition_id = %(part)s"
_ID = "sink_id, run, batch_id, partition_id"
_VALUES = "%(sink)s, %(run)s, %(batch)s, %(part)s"

_TAKE = f"""
INSERT INTO {{scopes}} AS s ({_ID}, epoch, completed, updated_at)
VALUES ({_VALUES}, 1, %(completed)s, %(now)s)
ON CONFLICT ({_ID}) DO UPDATE
SET epoch = s.epoch + 1, updated_at = excluded.updated_at,
    completed = s.completed OR excluded.completed
RETURNING epoch, completed"""

_RECORDS = f"SELECT key, value FROM {{records}} WHERE {_SCOPE}"

_LOAD = f"""
SELECT epoch, completed, NULL, NULL FROM {{scopes}} WHERE {_SCOPE}
UNION ALL
SELECT NULL, NULL, key, value FROM {{records}} WHERE {_SCOPE}"""

_EPOCH = f"SELECT epoch FROM {{scopes}} WHERE {_SCOPE}"

# A lone put, guarded by the fence: its writes happen only if the UPDATE matched. Fewer
# parameters than a group's statement, so cheaper to send: one writer a process (a
# Spark executor's usual Python worker) only ever sends this one.
_PUT = f"""
WITH fence AS (
    UPDATE {{scopes}} SET updated_at = %(now)s WHERE {_SCOPE} AND epoch = %(epoch)s
    RETURNING epoch
), dropped AS (
    DELETE FROM {{records}}
    WHERE {_SCOPE} AND key = ANY(%(deletes)s::text[]) AND EXISTS (SELECT FROM fence)
), written AS (
    INSERT INTO {{records}} AS r ({_ID}, key, value)
    SELECT {_VALUES}, k, v FROM unnest(%(keys)s::text[], %(values)b::bytea[]) AS t(k, v)
    WHERE EXISTS (SELECT FROM fence)
    ON CONFLICT ({_ID}, key) DO UPDATE SET value = excluded.value
)
SELECT (SELECT count(*) FROM fence), ({_EPOCH})"""

# The writes of a group of puts (``postgresql_groups``), each guarded by its scope's fence:
# a put's deletes and inserts happen only if the UPDATE of its scope matched; the put's
# number in the group (``n``, from 1) comes back for each one that did.
_PUT_GROUP = f"""
WITH put AS (
    SELECT * FROM unnest(%(sinks)s::text[], %(runs)s::text[], %(batches)s::bigint[],
                         %(parts)s::bigint[], %(epochs)s::bigint[])
        WITH ORDINALITY AS t(sink_id, run, batch_id, partition_id, epoch, n)
), fence AS (
    UPDATE {{scopes}} AS s SET updated_at = %(now)s FROM put
    WHERE s.sink_id = put.sink_id AND s.run = put.run AND s.batch_id = put.batch_id
        AND s.partition_id = put.partition_id AND s.epoch = put.epoch
    RETURNING put.n, put.sink_id, put.run, put.batch_id, put.partition_id
), dropped AS (
    DELETE FROM {{records}} AS r
    USING unnest(%(drop_n)s::bigint[], %(drop_keys)s::text[]) AS d(n, key), fence AS f
    WHERE d.n = f.n AND r.sink_id = f.sink_id AND r.run = f.run AND r.batch_id = f.batch_id
        AND r.partition_id = f.partition_id AND r.key = d.key
), written AS (
    INSERT INTO {{records}} AS r ({_ID}, key, value)
    SELECT f.sink_id, f.run, f.batch_id, f.partition_id, w.k, w.v
    FROM unnest(%(put_n)s::bigint[], %(keys)s::text[], %(values)b::bytea[]) AS w(n, k, v)
    JOIN fence AS f ON f.n = w.n
    ON CONFLICT ({_ID}, key) DO UPDATE SET value = excluded.value
)
SELECT n FROM fence"""

_COMPLETE = f"""
WITH fence AS (
    UPDATE {{scopes}} SET completed = true, updated_at = %(now)s
    WHERE {_SCOPE} AND epoch = %(epoch)s
    RETURNING epoch
), dropped AS (
    DELETE FROM {{records}} WHERE {_SCOPE} AND %(drop)s AND EXISTS (SELECT FROM fence)
)
SELECT (SELECT count(*) FROM fence), ({_EPOCH})"""

# After the scope row is locked by _TAKE: drop the prefixed records the puts do not keep,
# and write the puts.
_SEAL_RECORDS = f"""
WITH dropped AS (
    DELETE FROM {{records}}
    WHERE {_SCOPE} AND key <> ALL(%(keys)s::text[])
    AND EXISTS (SELECT FROM unnest(%(prefixes)s::text[]) AS p(prefix)
                WHERE starts_with(key, prefix))
)
INSERT INTO {{records}} ({_ID}, key, value)
SELECT {_VALUES}, k, v FROM unnest(%(keys)s::text[], %(values)b::bytea[]) AS t(k, v)
ON CONFLICT ({_ID}, key) DO UPDATE SET value = excluded.value"""

_SCOPES = """
SELECT s.sink_id, s.run, s.batch_id, s.partition_id, s.epoch, s.completed, s.updated_at,
       (SELECT count(*) FROM {records} AS r WHERE r.sink_id = s.sink_id AND r.run = s.run
        AND r.batch_id = s.batch_id AND r.partition_id = s.partition_id)
FROM {scopes} AS s"""


def _params(scope: Scope, **more: Any) -> dict[str, Any]:
    return {
        "sink": scope.sink_id,
        "run": scope.run,
        "batch": scope.batch_id,
        "part": scope.partition_id,
        **more,
    }


class PostgreSQLStore(RecordStore):
    """A ``RecordStore`` in a PostgreSQL database, for clusters whose executors all reach it.

    ``conninfo`` is a libpq connection string or ``postgresql://`` URI; what it leaves out
    comes from the ``PG*`` environment variables, the service file and the password file.
    Nothing is contacted until the store is first used; then the tables are created
    (unless ``create_table`` is false) and their columns checked.

    Raises (from every method):
        DurableError: the server cannot be reached, the login is refused, the tables are
            missing or of another shape, or a statement failed (the psycopg error is
            chained as ``__cause__``; the message never holds the password).
    """

    verifies = True  # connects and checks its tables
    records_ahead = True  # a put is a round trip and a commit: requests do not wait for it

    def __init__(
        self,
        conninfo: str = "",
        *,
        table: str = "asyncsink",
        schema: str | None = None,
        create_table: bool = True,
        max_connections: int = 4,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self._tables = Tables(table, schema)
        self._conninfo = conninfo
        self._db = Connections(
            conninfo, self._tables, create_table=create_table, size=max_connections
        )
        self._groups = LoopGroups(self._write_group)

    @classmethod
    def from_url(cls, url: str) -> PostgreSQLStore:
        """Open ``postgresql://user@host:5432/dbname?table=asyncsink&create_table=true``.

        ``table`` (``NAME`` or ``SCHEMA.NAME``) and ``create_table`` are the store's
        options; any other is a libpq connection parameter (``sslmode``,
        ``connect_timeout``, ``service``, ...). A password may be in the URL, but is
        better left to ``PGPASSWORD`` or a password file. Nothing is contacted yet.

        Raises:
            ValueError: not such a URL (see ``check_url``).
        """
        cls.check_url(url)
        parsed = parse_postgresql_url(url)
        return cls(
            parsed.conninfo,
            table=parsed.table,
            schema=parsed.schema,
            create_table=parsed.create_table,
        )

    @classmethod
    def check_url(cls, url: str) -> None:
        """Check ``url`` the way ``from_url`` does, without connecting.

        Raises:
            ValueError: not a postgresql URL, a malformed store option, or a parameter
                libpq does not know (named, its value never shown).
        """
        parsed = parse_postgresql_url(url)
        try:
            libpq.conninfo_to_dict(parsed.conninfo)
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "malformed"
            shown = redact(parsed.conninfo, reason)
            raise ValueError(f"not a valid PostgreSQL connection URI: {shown}") from None

    @property
    def table(self) -> str:
        """The tables' prefix, with its schema when given."""
        return self._tables.shown

    def __repr__(self) -> str:
        return f"PostgreSQLStore({shown(self._conninfo)!r}, table={self._tables.shown!r})"

    async def verify(self) -> None:
        """Connect, create the tables if asked and check them: what the driver does before
        any task starts, so that a bad URL, login or table fails there."""
        await self._db.run("connect", None, _nothing)

    async def take(self, scope: Scope) -> ScopeState:
        """Bump the epoch of ``scope`` (creating it at 1) and return its state."""

        async def work(conn: psycopg.AsyncConnection[Any]) -> ScopeState:
            async with conn.transaction():
                cursor = await conn.execute(self._sql(_TAKE), _params(scope, **self._fresh()))
                epoch, completed = await _one(cursor)
                rows = await (await conn.execute(self._sql(_RECORDS), _params(scope))).fetchall()
            return ScopeState(epoch, completed, {key: bytes(value) for key, value in rows})

        return await self._db.run("take", scope, work)

    async def load(self, scope: Scope) -> ScopeState | None:
        """Return the state of ``scope``, or ``None`` if it was never taken."""

        async def work(conn: psycopg.AsyncConnection[Any]) -> ScopeState | None:
            rows = await (await conn.execute(self._sql(_LOAD), _params(scope))).fetchall()
            heads = [row for row in rows if row[0] is not None]
            if not heads:
                return None
            records = {row[2]: bytes(row[3]) for row in rows if row[0] is None}
            return ScopeState(heads[0][0], heads[0][1], records)

        return await self._db.run("load", scope, work)

    async def load_record(self, scope: Scope, key: str) -> bytes | None:
        """One record of ``scope``, or ``None``."""

        async def work(conn: psycopg.AsyncConnection[Any]) -> bytes | None:
            query = self._sql(_RECORDS + " AND key = %(key)s")
            row = await (await conn.execute(query, _params(scope, key=key))).fetchone()
            return None if row is None else bytes(row[1])

        return await self._db.run("load_record", scope, work)

    async def put(
        self,
        scope: Scope,
        epoch: int,
        puts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
    ) -> None:
        """Apply ``puts`` and ``deletes`` atomically if ``epoch`` is current, in one
        transaction with the puts of this process's other writers made meanwhile (group
        commit: ``asyncsink.stores.postgresql_groups``).

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        checked, dropped = _checked_writes(puts, deletes)
        await self._groups.running().put(scope, epoch, checked, dropped)

    async def _write_one(self, put: GroupPut) -> dict[int, BaseException]:
        """A group of one put, in the lone put's statement."""
        params = _params(
            put.scope,
            epoch=put.epoch,
            now=time.time(),
            deletes=put.deletes,
            keys=list(put.puts),
            values=list(put.puts.values()),
        )
        fenced = await self._fenced("put", put.scope, put.epoch, _PUT, params)
        return {} if fenced is None else {0: fenced}

    async def _write_group(self, group: Sequence[GroupPut]) -> dict[int, BaseException]:
        """Write a group of puts in one statement; the fenced ones, by position."""
        if len(group) == 1:
            return await self._write_one(group[0])
        params: dict[str, Any] = {
            "sinks": [put.scope.sink_id for put in group],
            "runs": [put.scope.run for put in group],
            "batches": [put.scope.batch_id for put in group],
            "parts": [put.scope.partition_id for put in group],
            "epochs": [put.epoch for put in group],
            "now": time.time(),
            "drop_n": [n for n, put in enumerate(group, 1) for _ in put.deletes],
            "drop_keys": [key for put in group for key in put.deletes],
            "put_n": [n for n, put in enumerate(group, 1) for _ in put.puts],
            "keys": [key for put in group for key in put.puts],
            "values": [value for put in group for value in put.puts.values()],
        }

        async def work(conn: psycopg.AsyncConnection[Any]) -> dict[int, BaseException]:
            cursor = await conn.execute(self._sql(_PUT_GROUP), params)
            matched = {row[0] for row in await cursor.fetchall()}
            fenced: dict[int, BaseException] = {}
            for index, put in enumerate(group):
                if index + 1 not in matched:  # read after the statement: a take it met
                    query = self._sql(_EPOCH)
                    row = await (await conn.execute(query, _params(put.scope))).fetchone()
                    held = None if row is None else row[0]
                    fenced[index] = FencedError(put.scope, put.epoch, held)
            return fenced

        return await self._db.run(f"put (a group of {len(group)} scopes)", None, work)

    async def complete(self, scope: Scope, epoch: int, *, drop_records: bool = True) -> None:
        """Mark ``scope`` COMPLETED (dropping its records if asked) if ``epoch`` is current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        params = _params(scope, epoch=epoch, now=time.time(), drop=drop_records)
        fenced = await self._fenced("complete", scope, epoch, _COMPLETE, params)
        if fenced is not None:
            raise fenced

    async def scopes(self, sink_id: str | None = None) -> list[ScopeInfo]:
        """List the scopes held (of one sink, or all), ordered by scope."""

        async def work(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
            where = " WHERE s.sink_id = %(sink)s" if sink_id is not None else ""
            cursor = await conn.execute(self._sql(_SCOPES + where), {"sink": sink_id})
            return await cursor.fetchall()

        rows = await self._db.run("scopes", None, work)
        infos = [
            ScopeInfo(Scope(sink, batch, part, run), epoch, done, count, updated)
            for sink, run, batch, part, epoch, done, updated, count in rows
        ]
        return sorted(infos, key=lambda info: info.scope)

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
        both are given), with their records. Returns how many."""
        cutoff = _purge_cutoff(before_batch, older_than_s, time.time())
        where = ["sink_id = %(sink)s"]
        if run is not None:
            where.append("run = %(run)s")
        if before_batch is not None:
            where.append("batch_id < %(before)s")
        if cutoff is not None:
            where.append("updated_at < %(cutoff)s")
        query = "DELETE FROM {scopes} WHERE " + " AND ".join(where)
        params = {"sink": sink_id, "run": run, "before": before_batch, "cutoff": cutoff}

        async def work(conn: psycopg.AsyncConnection[Any]) -> int:
            return (await conn.execute(self._sql(query), params)).rowcount

        return await self._db.run("purge", None, work)

    async def seal(
        self, scope: Scope, puts: Mapping[str, bytes], *, drop_prefixes: tuple[str, ...]
    ) -> None:
        """Mark ``scope`` COMPLETED for good, in one transaction: bump its epoch (creating
        it at 1), drop the records under ``drop_prefixes`` and write ``puts``."""
        checked, _ = _checked_writes(puts, ())
        params = _params(
            scope,
            **self._fresh(completed=True),
            keys=list(checked),
            values=list(checked.values()),
            prefixes=list(dict.fromkeys(drop_prefixes)),
        )

        async def work(conn: psycopg.AsyncConnection[Any]) -> None:
            async with conn.transaction():
                await conn.execute(self._sql(_TAKE), params)
                await conn.execute(self._sql(_SEAL_RECORDS), params)

        await self._db.run("seal", scope, work)

    async def aclose(self) -> None:
        """Close this process's idle connections; the next call opens new ones."""
        await self._db.aclose()

    def _sql(self, template: str) -> sql.Composed:
        return self._tables.sql(template)

    @staticmethod
    def _fresh(*, completed: bool = False) -> dict[str, Any]:
        return {"completed": completed, "now": time.time()}

    async def _fenced(
        self, operation: str, scope: Scope, epoch: int, template: str, params: dict[str, Any]
    ) -> FencedError | None:
        """Run a statement guarded by the fence; ``None`` if it matched, else the
        ``FencedError`` to raise."""

        async def work(conn: psycopg.AsyncConnection[Any]) -> tuple[bool, int | None]:
            matched, current = await _one(await conn.execute(self._sql(template), params))
            if matched:
                return True, None
            if current == epoch:  # taken over while the statement ran: read it again
                row = await (await conn.execute(self._sql(_EPOCH), params)).fetchone()
                current = None if row is None else row[0]
            return False, None if current is None else int(current)

        matched, held = await self._db.run(operation, scope, work)
        return None if matched else FencedError(scope, epoch, held)


async def _nothing(conn: psycopg.AsyncConnection[Any]) -> None:
    """Connecting (and setting up the tables) was the work."""


async def _one(cursor: psycopg.AsyncCursor[Any]) -> Any:
    row = await cursor.fetchone()
    if row is None:
        raise DurableError("postgresql store: a statement returned no row")
    return row
