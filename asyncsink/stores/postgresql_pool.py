"""The connections of a ``PostgreSQLStore``: a small pool per process and event loop, the
tables, and errors without secrets.

``Connections`` opens psycopg connections on demand (at most ``size`` at once), keeps the
idle ones for the next operation, and keeps a pool per event loop (with
``asyncsink.clients.per_loop``: closed with its loop or by ``aclose``), so a new loop or a
forked child opens connections of its own. On the first connection of a store it creates
the tables if asked, then checks their columns, so a missing table or one of another shape
is named before any record is written.
Every psycopg error becomes a ``DurableError`` whose message names the operation, the
tables and the scope, with the password (from the URL or ``PGPASSWORD``) redacted.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import psycopg
from psycopg import conninfo as libpq
from psycopg import sql

from asyncsink.clients import per_loop
from asyncsink.errors import DurableError
from asyncsink.masking import mask_url
from asyncsink.stores.base import Scope

__all__ = ["COLUMNS", "Connections", "Tables", "redact", "shown"]

_T = TypeVar("_T")

DEFAULT_CONNECT_TIMEOUT_S = 10

# The columns each table needs, with their types as format_type() names them.
_SCOPE_ID = {
    "sink_id": "text",
    "run": "text",
    "batch_id": "bigint",
    "partition_id": "bigint",
}
COLUMNS = {
    "scopes": {
        **_SCOPE_ID,
        "epoch": "bigint",
        "completed": "boolean",
        "updated_at": "double precision",
    },
    "records": {**_SCOPE_ID, "key": "text", "value": "bytea"},
}

_DDL = """
CREATE TABLE IF NOT EXISTS {scopes} (
    sink_id text NOT NULL,
    run text NOT NULL,
    batch_id bigint NOT NULL,
    partition_id bigint NOT NULL,
    epoch bigint NOT NULL,
    completed boolean NOT NULL DEFAULT false,
    updated_at double precision NOT NULL,
    PRIMARY KEY (sink_id, run, batch_id, partition_id)
);
CREATE INDEX IF NOT EXISTS {age_index} ON {scopes} (sink_id, updated_at);
CREATE TABLE IF NOT EXISTS {records} (
    sink_id text NOT NULL,
    run text NOT NULL,
    batch_id bigint NOT NULL,
    partition_id bigint NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (sink_id, run, batch_id, partition_id, key),
    FOREIGN KEY (sink_id, run, batch_id, partition_id)
        REFERENCES {scopes} ON DELETE CASCADE
)
"""

_KIND = "PostgreSQL store"


class Tables:
    """The two tables of a store: ``<table>_scopes`` and ``<table>_records``."""

    def __init__(self, table: str, schema: str | None) -> None:
        def name(suffix: str) -> sql.Identifier:
            parts = (schema, f"{table}_{suffix}") if schema else (f"{table}_{suffix}",)
            return sql.Identifier(*parts)

        self.shown = f"{schema}.{table}" if schema else table
        self.scopes = name("scopes")
        self.records = name("records")
        self.age_index = sql.Identifier(f"{table}_scopes_sink_age")
        self._composed: dict[str, sql.Composed] = {}
        self._names = {
            "scopes": f"{schema}.{table}_scopes" if schema else f"{table}_scopes",
            "records": f"{schema}.{table}_records" if schema else f"{table}_records",
        }

    def sql(self, template: str) -> sql.Composed:
        """``template`` with ``{scopes}`` and ``{records}`` filled in, quoted; composed
        once per template (a put runs on every request)."""
        composed = self._composed.get(template)
        if composed is None:
            composed = self._composed[template] = sql.SQL(template).format(
                scopes=self.scopes, records=self.records, age_index=self.age_index
            )
        return composed

    async def create(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Create the tables and the index unless they exist, one creator at a time."""
        async with conn.transaction():
            if await self._missing(conn) == []:
                return
            lock = sql.SQL("SELECT pg_advisory_xact_lock(hashtext({}))").format(self.shown)
            await conn.execute(lock)
            for statement in _DDL.split(";"):
                await conn.execute(self.sql(statement))

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Raise ``DurableError`` if a table is missing or lacks a column a store needs."""
        missing = await self._missing(conn)
        if missing:
            raise DurableError(
                f"table {missing[0]!r} does not exist (with "
                "create_table=false the tables must be created beforehand; see the README "
                "for their schema)"
            )
        for kind, wanted in COLUMNS.items():
            rows = await (
                await conn.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                    " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                    (self._quoted(kind),),
                )
            ).fetchall()
            found = dict(rows)
            wrong = [
                f"{column} {kind_}"
                for column, kind_ in wanted.items()
                if found.get(column) != kind_
            ]
            if wrong:
                raise DurableError(
                    f"table {self._names[kind]!r} does not match the "
                    f"schema of a record store: it needs the columns {', '.join(wrong)} "
                    "(see the README for the schema)"
                )

    async def _missing(self, conn: psycopg.AsyncConnection[Any]) -> list[str]:
        missing = []
        for kind in COLUMNS:
            row = await (
                await conn.execute("SELECT to_regclass(%s) IS NULL", (self._quoted(kind),))
            ).fetchone()
            if row is None or row[0]:
                missing.append(self._names[kind])
        return missing

    def _quoted(self, kind: str) -> str:
        return ".".join(f'"{part}"' for part in self._names[kind].split("."))


class _Pool:
    """One event loop's connections of a store: the idle ones, and a slot for each in use.
    Once closed, a connection given back is closed instead of kept."""

    def __init__(self, size: int) -> None:
        self.idle: list[psycopg.AsyncConnection[Any]] = []
        self.slots = asyncio.Semaphore(size)
        self.open = True

    async def aclose(self) -> None:
        self.open = False
        idle, self.idle = self.idle, []
        for conn in idle:
            await conn.close()


class Connections:
    """Connections to one database, pooled per process and event loop.

    Raises (from ``run``):
        DurableError: connecting, setting up the tables or the operation failed.
    """

    def __init__(self, conninfo: str, tables: Tables, *, create_table: bool, size: int = 4) -> None:
        self._conninfo = conninfo
        self._kwargs = _connect_kwargs(conninfo)
        self._secrets = _secrets(conninfo)
        self._tables = tables
        self._create_table = create_table
        self._size = size
        self._key = uuid.uuid4().hex  # this store's pool, in every loop
        self._ready = False

    async def run(
        self,
        operation: str,
        scope: Scope | None,
        work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]],
    ) -> _T:
        """``work(connection)``, on a pooled connection. An idle connection the server
        or the network dropped meanwhile is replaced and the work done once more: each
        operation of the store may run twice without harm."""
        for attempt in range(2):
            async with self._connection(operation, scope) as (conn, reused):
                try:
                    return await work(conn)
                except psycopg.Error as exc:
                    if reused and conn.broken and attempt == 0:
                        await self.aclose()  # the other idle ones likely broke too
                        continue
                    raise self.error(operation, scope, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def error(self, operation: str, scope: Scope | None, exc: BaseException) -> DurableError:
        """A ``DurableError`` describing ``exc``, with every secret redacted."""
        where = f" for scope {scope}" if scope is not None else ""
        detail = f"{type(exc).__name__}: {str(exc).strip()}"
        message = (
            f"postgresql store {shown(self._conninfo)!r} (tables {self._tables.shown}_*): "
            f"{operation}{where} failed: {detail}"
        )
        return DurableError(self.redact(message))

    def redact(self, text: str) -> str:
        """``text`` with the password masked."""
        return _replace(text, self._secrets)

    async def aclose(self) -> None:
        """Close the running loop's idle connections; the next operation opens new ones."""
        await per_loop.close_client(_KIND, self._key)

    @asynccontextmanager
    async def _connection(
        self, operation: str, scope: Scope | None
    ) -> AsyncIterator[tuple[psycopg.AsyncConnection[Any], bool]]:
        pool: _Pool = await per_loop.shared_client(_KIND, self._key, self._open_pool)
        async with pool.slots:
            reused = bool(pool.idle)
            conn = pool.idle.pop() if reused else await self._open(operation, scope)
            try:
                yield conn, reused
            finally:
                if conn.broken or conn.closed or not pool.open:
                    await conn.close()
                elif conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    await conn.close()  # cancelled inside a transaction: do not reuse
                else:
                    pool.idle.append(conn)

    async def _open_pool(self, stack: AsyncExitStack) -> _Pool:
        pool = _Pool(self._size)
        stack.push_async_callback(pool.aclose)
        return pool

    async def _open(self, operation: str, scope: Scope | None) -> psycopg.AsyncConnection[Any]:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, **self._kwargs
            )
        except psycopg.Error as exc:
            raise self.error("connect", scope, exc) from exc
        try:
            if not self._ready:
                if self._create_table:
                    await self._tables.create(conn)
                await self._tables.check(conn)
                self._ready = True
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, psycopg.Error):
                raise self.error("setting up the tables", None, exc) from exc
            if isinstance(exc, DurableError):
                where = f"postgresql store {shown(self._conninfo)!r}"
                raise DurableError(self.redact(f"{where}: {exc}")) from None
            raise
        return conn


def _connect_kwargs(conninfo: str) -> dict[str, Any]:
    """Settings added to the URL's: a connect timeout unless the URL or PGCONNECT_TIMEOUT
    sets one, and the application name the server shows for these sessions."""
    given = dict(parse_qsl(urlsplit(conninfo).query))
    kwargs: dict[str, Any] = {}
    if "connect_timeout" not in given and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT_S
    if "application_name" not in given and not os.environ.get("PGAPPNAME"):
        kwargs["application_name"] = "asyncsink"
    return kwargs


def redact(conninfo: str, text: str) -> str:
    """``text`` without the secrets of ``conninfo``, nor its options' values (those of
    three characters or more, which cannot be mistaken for the rest of a message)."""
    values = [value for _, value in parse_qsl(urlsplit(conninfo).query) if len(value) >= 3]
    return _replace(text, [*_secrets(conninfo), *sorted(values, key=len, reverse=True)])


def _replace(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def shown(conninfo: str) -> str:
    """``conninfo`` fit to show: a URL through ``mask_url``; of a ``key=value`` string, the
    settings that locate the database only."""
    if "://" in conninfo:
        return mask_url(conninfo)
    try:
        settings = libpq.conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<a malformed connection string>"
    kept = ("host", "hostaddr", "port", "dbname", "user", "service")
    return " ".join(f"{key}={settings[key]}" for key in kept if settings.get(key))


def _secrets(conninfo: str) -> list[str]:
    """What a message must never show: the password (as written and decoded), the
    ``password`` and ``sslpassword`` settings, and ``PGPASSWORD``; the longest first."""
    found: list[str] = [os.environ.get("PGPASSWORD", "")]
    if "://" in conninfo:
        parts = urlsplit(conninfo)
        userinfo, at, _ = parts.netloc.rpartition("@")
        if at:
            password = userinfo.partition(":")[2]
            found += [password, unquote(password)]
    try:
        settings = libpq.conninfo_to_dict(conninfo)
    except psycopg.Error:
        settings = {}
    found += [str(settings.get(name) or "") for name in ("password", "sslpassword")]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)
