"""The record store for clusters: one DynamoDB table that every executor can reach.

Table layout (created on demand with on-demand billing, unless ``create_table=False``)::

    pk (S, hash key)   str(scope): "sink_id/batch_id/partition_id", with a run
                       "sink_id/run/batch_id/partition_id"
    sk (S, range key)  "#scope"   the scope item: epoch (N), completed (BOOL),
                                  updated_at (N), sink_id (S), run (S), batch_id (N),
                                  partition_id (N)
                       "r#<key>"  one record: v (B)

Items written before scopes had runs lack the ``run`` attribute; their pk has no run, so
they read as scopes of the run ``""``.

Fencing: ``take`` increments ``epoch`` with one atomic ``UpdateItem``, so concurrent takers
each get a distinct epoch and only the highest may write; it then reads the records with a
consistent ``Query``. A put is a ``TransactWriteItems`` whose first action updates the
scope item on the condition ``epoch = <caller's epoch>``, so the record writes happen only
while that epoch is current, and a superseded writer gets ``FencedError``.

Limits: one transaction holds at most 100 actions and 4 MB, one item at most 400 KB.
A put of up to 99 records and about 650 KB of values (the request body, base64-encoded,
stays under 1 MiB so that sending it never blocks the event loop) is one transaction: all
or nothing. A larger put is split into chunks of that size, in order, each one a
transaction carrying the same epoch condition; if the scope is taken over (or the store
fails) between chunks, the chunks already applied stay, each written while the epoch was
still current, and ``put`` raises. ``complete(drop_records=True)`` sets COMPLETED in its
first transaction and drops records beyond that in further transactions conditioned on
the scope staying COMPLETED.
A record larger than an item allows is refused before anything is written.

``seal`` bumps the epoch, sets COMPLETED and writes its puts in one transaction when they
fit in one, then drops the records under its prefixes with batched deletes: a crash leaves
the scope COMPLETED with its puts before any record is gone. Larger puts take the default
path of ``RecordStore.seal`` (take, chunked put, complete, delete).

``scopes()`` and ``purge()`` scan the table; they are meant for maintenance, not hot paths.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiobotocore.config import AioConfig
from botocore.exceptions import ClientError

from asyncsink.aws.credentials import AwsIdentity
from asyncsink.clients import connections
from asyncsink.errors import DurableError, FencedError
from asyncsink.masking import mask_url
from asyncsink.stores.base import (
    RecordStore,
    Scope,
    ScopeInfo,
    ScopeState,
    _checked_writes,
    _purge_cutoff,
)
from asyncsink.stores.dynamodb_client import (
    CONFLICT_ATTEMPTS,
    AwsCredentials,
    TableClient,
    backoff,
)
from asyncsink.stores.urls import parse_dynamodb_url

__all__ = ["AwsCredentials", "DynamoDBStore"]

SCOPE_SK = "#scope"
RECORD_PREFIX = "r#"
MAX_TRANSACTION_ACTIONS = 100
MAX_ITEM_BYTES = 400 * 1024
_CHUNK_ACTIONS = MAX_TRANSACTION_ACTIONS - 1  # one action is the epoch condition
# Request bodies stay below 1 MiB: aiohttp warns that larger raw bodies may block the event
# loop. That also keeps every transaction far below DynamoDB's 4 MB.
_CHUNK_BYTES = 900 * 1024
_BATCH_DELETE = 25  # BatchWriteItem's limit
_NAMES = {"#pk": "pk", "#sk": "sk", "#e": "epoch", "#c": "completed", "#u": "updated_at"}
_IDENTITY = "#s = :sink, #r = :run, #b = :batch, #p = :part"
_SCOPE_NAMES = {
    **{name: _NAMES[name] for name in ("#e", "#c", "#u")},
    **{"#s": "sink_id", "#r": "run", "#b": "batch_id", "#p": "partition_id"},
}


class DynamoDBStore(RecordStore):
    """A ``RecordStore`` in a DynamoDB table, for stores every executor of a cluster shares.

    Without ``credentials`` the usual AWS chain applies (environment, profile, instance
    role); ``region`` and ``endpoint_url`` likewise default to the environment's. With
    ``role_arn`` those credentials assume that role (``external_id``,
    ``role_session_name``), and its credentials refresh themselves before they expire.

    A client is opened on first use in each event loop the store runs in, and closed when
    that loop ends (``asyncio.run``, ``anyio.run``) or by ``aclose()``, which a loop you
    manage by hand calls before it closes. After a ``fork`` the child opens its own.

    Raises (from every method):
        DurableError: the table cannot be reached, created or written (the vendor error is
            chained as ``__cause__``).
    """

    def __init__(
        self,
        table: str,
        region: str | None = None,
        endpoint_url: str | None = None,
        *,
        credentials: AwsCredentials | None = None,
        create_table: bool = True,
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
        max_attempts: int = 5,
        role_arn: str | None = None,
        external_id: str | None = None,
        role_session_name: str | None = None,
    ) -> None:
        if not table:
            raise ValueError("table must be a non-empty DynamoDB table name")
        self._table = table
        self._region = region
        self._endpoint_url = endpoint_url
        config = AioConfig(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "max_attempts": max_attempts},
            # A connection a server may be closing is not reused (a reset write waits
            # for botocore's backoff before it is retried).
            connector_args={"keepalive_timeout": connections.IDLE_CONNECTION_S},
        )
        role = None
        if role_arn is not None:  # assumed with the credentials (or the default chain)
            keys = credentials or AwsCredentials("", "")
            role = AwsIdentity(
                access_key_id=keys.access_key_id or None,
                secret_access_key=keys.secret_access_key or None,
                session_token=keys.session_token,
                role_arn=role_arn,
                external_id=external_id,
                role_session_name=role_session_name,
                region=region,
                role_option="role_arn",
            )
        self._db = TableClient(
            table,
            region,
            endpoint_url,
            credentials,
            create_table=create_table,
            config=config,
            role=role,
        )

    @classmethod
    def from_url(cls, url: str) -> DynamoDBStore:
        """Open ``dynamodb://TABLE?region=us-east-1&endpoint_url=http://127.0.0.1:8000``.

        Options: ``region``, ``endpoint_url``, ``create_table`` (``true``/``false``), and
        ``role_arn`` with ``external_id`` and ``role_session_name`` to assume a role (its
        credentials refresh themselves).
        Credentials are never taken from a URL; they come from the AWS chain. Nothing is
        contacted until the store is first used.

        Raises:
            ValueError: not such a URL (see ``check_url``).
        """
        parsed = parse_dynamodb_url(url)
        return cls(
            parsed.table,
            parsed.region,
            parsed.endpoint_url,
            create_table=parsed.create_table,
            role_arn=parsed.role_arn,
            external_id=parsed.external_id,
            role_session_name=parsed.role_session_name,
        )

    @classmethod
    def check_url(cls, url: str) -> None:
        """Check ``url`` the way ``from_url`` does, without building a store.

        Raises:
            ValueError: no valid table name, or an unknown or malformed option.
        """
        parse_dynamodb_url(url)

    @property
    def table(self) -> str:
        """The table name."""
        return self._table

    def __repr__(self) -> str:
        return (
            f"DynamoDBStore(table={self._table!r}, region={self._region!r}, "
            f"endpoint_url={self._endpoint_url and mask_url(self._endpoint_url)!r})"
        )

    async def take(self, scope: Scope) -> ScopeState:
        """Bump the epoch of ``scope`` (creating it at 1) and return its state."""
        response = await self._db.call(
            "UpdateItem",
            scope,
            TableName=self._table,
            Key=self._key(scope, SCOPE_SK),
            UpdateExpression=f"ADD #e :one SET #u = :now, {_IDENTITY}, #c = if_not_exists(#c, :no)",
            ExpressionAttributeNames=dict(_SCOPE_NAMES),
            ExpressionAttributeValues={**_identity_values(scope), ":no": {"BOOL": False}},
            ReturnValues="ALL_NEW",
        )
        attributes = response["Attributes"]
        records = await self._query(scope, records_only=True)
        return ScopeState(
            int(attributes["epoch"]["N"]),
            bool(attributes["completed"]["BOOL"]),
            {item["sk"]["S"][len(RECORD_PREFIX) :]: bytes(item["v"]["B"]) for item in records},
        )

    async def load(self, scope: Scope) -> ScopeState | None:
        """Return the state of ``scope``, or ``None`` if it was never taken."""
        items = await self._query(scope, records_only=False)
        if not items or items[0]["sk"]["S"] != SCOPE_SK:
            return None
        head = items[0]
        return ScopeState(
            int(head["epoch"]["N"]),
            bool(head["completed"]["BOOL"]),
            {item["sk"]["S"][len(RECORD_PREFIX) :]: bytes(item["v"]["B"]) for item in items[1:]},
        )

    async def load_record(self, scope: Scope, key: str) -> bytes | None:
        """One record of ``scope``, or ``None``: one consistent GetItem."""
        response = await self._db.call(
            "GetItem",
            scope,
            TableName=self._table,
            Key=self._key(scope, RECORD_PREFIX + key),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else bytes(item["v"]["B"])

    async def put(
        self,
        scope: Scope,
        epoch: int,
        puts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
    ) -> None:
        """Apply ``puts`` and ``deletes`` if ``epoch`` is current: in one transaction up to
        99 records (see the module docstring for larger puts).

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
            DurableError: a record exceeds DynamoDB's item size; nothing was written.
        """
        checked, dropped = _checked_writes(puts, deletes)
        actions = self._put_actions(scope, checked)
        for name in dropped:
            key = self._key(scope, RECORD_PREFIX + name)
            delete = {"Delete": {"TableName": self._table, "Key": key}}
            actions.append((delete, _wire_bytes(_item_bytes(scope, name, b""), 0)))
        guard = self._epoch_guard(scope, epoch, "SET #u = :now")
        for chunk in _chunks(actions) or [[]]:
            await self._transact(scope, epoch, [guard, *chunk])

    async def complete(self, scope: Scope, epoch: int, *, drop_records: bool = True) -> None:
        """Mark ``scope`` COMPLETED (dropping its records if asked) if ``epoch`` is current.

        Raises:
            FencedError: the scope's epoch is no longer ``epoch``.
        """
        deletes: list[tuple[dict[str, Any], int]] = []
        if drop_records:
            for item in await self._query(scope, records_only=True, keys_only=True):
                key = {"pk": item["pk"], "sk": item["sk"]}
                size = _wire_bytes(len(item["pk"]["S"]) + len(item["sk"]["S"]), 0)
                deletes.append(({"Delete": {"TableName": self._table, "Key": key}}, size))
        guard = self._epoch_guard(scope, epoch, "SET #c = :yes, #u = :now")
        guard["Update"]["ExpressionAttributeValues"][":yes"] = {"BOOL": True}
        first, *rest = _chunks(deletes) or [[]]
        await self._transact(scope, epoch, [guard, *first])
        still_completed = {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": self._key(scope, SCOPE_SK),
                "ConditionExpression": "#c = :yes",
                "ExpressionAttributeNames": {"#c": "completed"},
                "ExpressionAttributeValues": {":yes": {"BOOL": True}},
            }
        }
        for chunk in rest:
            await self._transact(scope, None, [still_completed, *chunk])

    async def scopes(self, sink_id: str | None = None) -> list[ScopeInfo]:
        """List the scopes held (of one sink, or all), ordered by scope. Scans the table."""
        heads, counts = await self._scan(sink_id)
        infos = [
            ScopeInfo(
                _parse_scope(pk),
                int(item["epoch"]["N"]),
                bool(item["completed"]["BOOL"]),
                counts.get(pk, 0),
                float(item["updated_at"]["N"]),
            )
            for pk, item in heads.items()
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
        both are given). Returns how many.

        Each scope's records go first and its scope item last, so an interrupted purge
        leaves whole scopes with fewer records, never records without a scope."""
        cutoff = _purge_cutoff(before_batch, older_than_s, time.time())
        doomed = [
            info.scope
            for info in await self.scopes(sink_id)
            if (run is None or info.scope.run == run)
            and (before_batch is None or info.scope.batch_id < before_batch)
            and (cutoff is None or info.updated_at < cutoff)
        ]
        for scope in doomed:
            records = await self._query(scope, records_only=True, keys_only=True)
            await self._batch_delete(scope, [{"pk": it["pk"], "sk": it["sk"]} for it in records])
            await self._batch_delete(scope, [self._key(scope, SCOPE_SK)])
        return len(doomed)

    async def seal(
        self, scope: Scope, puts: Mapping[str, bytes], *, drop_prefixes: tuple[str, ...]
    ) -> None:
        """Mark ``scope`` COMPLETED for good: bump its epoch (creating it at 1), set
        COMPLETED and write ``puts`` in one transaction, then drop the records under
        ``drop_prefixes`` (see the module docstring for puts beyond one transaction).

        Raises:
            DurableError: a put exceeds DynamoDB's item size (nothing was written), or the
                table cannot be written.
        """
        checked, _ = _checked_writes(puts, ())
        chunks = _chunks(self._put_actions(scope, checked))
        if len(chunks) > 1:
            await super().seal(scope, checked, drop_prefixes=drop_prefixes)
            return
        update = {
            "TableName": self._table,
            "Key": self._key(scope, SCOPE_SK),
            "UpdateExpression": f"ADD #e :one SET #c = :yes, #u = :now, {_IDENTITY}",
            "ExpressionAttributeNames": dict(_SCOPE_NAMES),
            "ExpressionAttributeValues": {**_identity_values(scope), ":yes": {"BOOL": True}},
        }
        await self._transact(scope, None, [{"Update": update}, *(chunks[0] if chunks else [])])
        doomed: dict[str, dict[str, Any]] = {}
        for prefix in drop_prefixes:
            for item in await self._query(scope, records_only=True, keys_only=True, under=prefix):
                if item["sk"]["S"][len(RECORD_PREFIX) :] not in checked:
                    doomed[item["sk"]["S"]] = {"pk": item["pk"], "sk": item["sk"]}
        await self._batch_delete(scope, list(doomed.values()))

    async def aclose(self) -> None:
        """Close the client; the next call opens a new one."""
        await self._db.aclose()

    # -- requests ------------------------------------------------------------------------

    @staticmethod
    def _key(scope: Scope, sk: str) -> dict[str, Any]:
        return {"pk": {"S": str(scope)}, "sk": {"S": sk}}

    def _put_actions(
        self, scope: Scope, records: Mapping[str, bytes]
    ) -> list[tuple[dict[str, Any], int]]:
        """Transaction actions that write ``records``, each with its share of the request.

        Raises:
            DurableError: a record exceeds DynamoDB's item size.
        """
        actions: list[tuple[dict[str, Any], int]] = []
        for name, value in records.items():
            item = {**self._key(scope, RECORD_PREFIX + name), "v": {"B": value}}
            size = _item_bytes(scope, name, value)
            if size > MAX_ITEM_BYTES:
                raise DurableError(
                    f"record {name!r} of scope {scope} is {size} bytes; a DynamoDB item "
                    f"holds at most {MAX_ITEM_BYTES} (a request's record takes about 5 bytes "
                    "an entry: lower maxBatchSize; a durable call's result must be smaller)"
                )
            put = {"Put": {"TableName": self._table, "Item": item}}
            actions.append((put, _wire_bytes(size - len(value), len(value))))
        return actions

    def _epoch_guard(self, scope: Scope, epoch: int, update: str) -> dict[str, Any]:
        """The transaction action that updates the scope item only while it holds ``epoch``."""
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(scope, SCOPE_SK),
                "UpdateExpression": update,
                "ConditionExpression": "#e = :epoch",
                "ExpressionAttributeNames": {
                    "#e": "epoch",
                    **{name: _NAMES[name] for name in ("#c", "#u") if name in update},
                },
                "ExpressionAttributeValues": {
                    ":epoch": {"N": str(epoch)},
                    ":now": {"N": repr(time.time())},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    async def _transact(
        self, scope: Scope, epoch: int | None, actions: list[dict[str, Any]]
    ) -> None:
        """Run one transaction whose first action is its guard; a failed guard means the
        scope was taken over (``FencedError``) when ``epoch`` is given."""
        try:
            await self._db.call("TransactWriteItems", scope, TransactItems=actions)
        except DurableError as exc:
            cause = exc.__cause__
            if epoch is None or not isinstance(cause, ClientError):
                raise
            reasons = cause.response.get("CancellationReasons") or [{}]
            if reasons[0].get("Code") != "ConditionalCheckFailed":
                raise
            held = reasons[0].get("Item", {}).get("epoch", {}).get("N")
            raise FencedError(scope, epoch, None if held is None else int(held)) from cause

    async def _query(
        self, scope: Scope, *, records_only: bool, keys_only: bool = False, under: str = ""
    ) -> list[dict[str, Any]]:
        """All items of ``scope`` in sort-key order (the scope item, if wanted, first);
        with ``records_only``, the records whose keys start with ``under``."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": "pk"},
            "ExpressionAttributeValues": {":pk": {"S": str(scope)}},
        }
        if records_only:
            request["KeyConditionExpression"] += " AND begins_with(#sk, :records)"
            request["ExpressionAttributeNames"]["#sk"] = "sk"
            request["ExpressionAttributeValues"][":records"] = {"S": RECORD_PREFIX + under}
        if keys_only:
            request["ProjectionExpression"] = "#pk, #sk"
            request["ExpressionAttributeNames"]["#sk"] = "sk"
        return await self._db.pages("Query", scope, request)

    async def _scan(self, sink_id: str | None) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        """Scope items by pk, and record counts by pk, of one sink or all."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "ProjectionExpression": "#pk, #sk, #e, #c, #u",
            "ExpressionAttributeNames": dict(_NAMES),
        }
        if sink_id is not None:
            request["FilterExpression"] = "begins_with(#pk, :prefix)"
            request["ExpressionAttributeValues"] = {":prefix": {"S": f"{sink_id}/"}}
        heads: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}
        for item in await self._db.pages("Scan", None, request):
            pk = item["pk"]["S"]
            if item["sk"]["S"] == SCOPE_SK:
                heads[pk] = item
            else:
                counts[pk] = counts.get(pk, 0) + 1
        return heads, counts

    async def _batch_delete(self, scope: Scope, keys: list[dict[str, Any]]) -> None:
        for start in range(0, len(keys), _BATCH_DELETE):
            pending = {
                self._table: [
                    {"DeleteRequest": {"Key": key}} for key in keys[start : start + _BATCH_DELETE]
                ]
            }
            for attempt in range(CONFLICT_ATTEMPTS):
                response = await self._db.call("BatchWriteItem", scope, RequestItems=pending)
                pending = response.get("UnprocessedItems") or {}
                if not pending:
                    break
                await asyncio.sleep(backoff(attempt))
            else:
                raise DurableError(
                    f"DynamoDB BatchWriteItem on table {self._table!r} for scope {scope} "
                    f"left items unprocessed after {CONFLICT_ATTEMPTS} attempts"
                )


def _chunks(actions: list[tuple[dict[str, Any], int]]) -> list[list[dict[str, Any]]]:
    """Split transaction actions, in order, into chunks within DynamoDB's limits."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for action, action_size in actions:
        if current and (len(current) == _CHUNK_ACTIONS or size + action_size > _CHUNK_BYTES):
            chunks.append(current)
            current, size = [], 0
        current.append(action)
        size += action_size
    if current:
        chunks.append(current)
    return chunks


def _item_bytes(scope: Scope, name: str, value: bytes) -> int:
    """The size DynamoDB counts for a record item: attribute names plus values."""
    return (
        len("pkskv") + len(str(scope).encode()) + len((RECORD_PREFIX + name).encode()) + len(value)
    )


def _wire_bytes(text_bytes: int, binary_bytes: int) -> int:
    """An upper bound of an action's share of the JSON request body (binary is base64)."""
    return 160 + 2 * text_bytes + 4 * (binary_bytes + 2) // 3


def _parse_scope(pk: str) -> Scope:
    try:
        return Scope.parse(pk)
    except ValueError:
        raise DurableError(f"the table holds an item that is no scope: pk={pk!r}") from None


def _identity_values(scope: Scope) -> dict[str, Any]:
    """Values of an update that bumps the epoch and sets the scope's own fields."""
    return {
        ":one": {"N": "1"},
        ":now": {"N": repr(time.time())},
        ":sink": {"S": scope.sink_id},
        ":run": {"S": scope.run},
        ":batch": {"N": str(scope.batch_id)},
        ":part": {"N": str(scope.partition_id)},
    }
