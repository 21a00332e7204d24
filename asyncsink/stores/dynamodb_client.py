"""The connection of a ``DynamoDBStore`` to its table: client lifecycle, errors, secrets.

``TableClient`` opens an aiobotocore client on first use in each event loop it runs in
(kept per loop by ``asyncsink.clients.per_loop``, closed with the loop or by ``aclose``),
creates the table if asked, retries transaction conflicts, and turns every botocore error
into a ``DurableError`` whose message names the operation, table and scope, with any
credential redacted.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from asyncsink.aws.credentials import AwsIdentity
from asyncsink.aws.sessions import client_credentials
from asyncsink.clients import per_loop
from asyncsink.errors import DurableError
from asyncsink.masking import mask_url
from asyncsink.stores.base import Scope

__all__ = ["AwsCredentials", "TableClient"]

CONFLICT_ATTEMPTS = 6
TABLE_WAIT_S = 60.0

_KIND = "DynamoDB store"

# botocore's loader of service models, a cache of parsed JSON with no loop-bound state,
# shared by the sessions of a process: loading the models anew costs ~0.2 s per client.
_LOADERS: dict[int, Any] = {}


@dataclass(frozen=True, slots=True)
class AwsCredentials:
    """Static AWS credentials. ``repr`` shows none of them, and store errors redact them."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        token = ", session_token='****'" if self.session_token else ""
        return f"AwsCredentials(access_key_id='****', secret_access_key='****'{token})"


class TableClient:
    """Requests to one DynamoDB table, through a client of its own in each event loop.

    Raises (from ``call`` and ``pages``):
        DurableError: the request failed (the botocore error is chained as ``__cause__``).
    """

    def __init__(
        self,
        table: str,
        region: str | None,
        endpoint_url: str | None,
        credentials: AwsCredentials | None,
        *,
        create_table: bool,
        config: Config,
        role: AwsIdentity | None = None,
    ) -> None:
        self.table = table
        self._role = role
        self._region = region
        self._endpoint_url = endpoint_url
        self._credentials = credentials
        self._create_table = create_table
        self._config = config
        self._key = uuid.uuid4().hex  # this client's own, in every loop
        self._table_ready = not create_table

    async def call(self, operation: str, scope: Scope | None, **request: Any) -> dict[str, Any]:
        """Send one request (``operation`` as AWS names it); retry transaction conflicts."""
        client = await self._open()
        method = getattr(client, _snake(operation))
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                return cast(dict[str, Any], await method(**request))
            except ClientError as exc:
                if _is_conflict(exc) and attempt + 1 < CONFLICT_ATTEMPTS:
                    await asyncio.sleep(backoff(attempt))
                    continue
                raise self.error(operation, scope, exc) from exc
            except (TimeoutError, BotoCoreError, OSError) as exc:
                raise self.error(operation, scope, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def pages(
        self, operation: str, scope: Scope | None, request: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """All items of a paginated ``Query`` or ``Scan``."""
        items: list[dict[str, Any]] = []
        while True:
            response = await self.call(operation, scope, **request)
            items.extend(response.get("Items", ()))
            last = response.get("LastEvaluatedKey")
            if not last:
                return items
            request = {**request, "ExclusiveStartKey": last}

    def error(self, operation: str, scope: Scope | None, exc: BaseException) -> DurableError:
        """A ``DurableError`` describing ``exc``, with every credential redacted."""
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code, text = error.get("Code", "unknown"), error.get("Message", "")
            detail = f"{code}: {text}" if text else code
            if code == "UnknownOperationException":
                detail += " (the endpoint does not implement this operation)"
            reasons = exc.response.get("CancellationReasons")
            if reasons:
                detail += f" (reasons: {[reason.get('Code') for reason in reasons]})"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        where = f" for scope {scope}" if scope is not None else ""
        message = f"DynamoDB {operation} on table {self.table!r}{where} failed: {detail}"
        return DurableError(self._redact(message))

    async def aclose(self) -> None:
        """Close the running loop's client; the next call opens a new one."""
        await per_loop.close_client(_KIND, self._key)

    def _redact(self, text: str) -> str:
        endpoint = self._endpoint_url
        if endpoint:  # a token in its query, a password in its authority
            text = text.replace(endpoint, mask_url(endpoint))
            for part in _url_secrets(endpoint):  # in the forms botocore writes it
                text = text.replace(part, "***")
        credentials = self._credentials
        if credentials is None:
            return text
        for secret in (
            credentials.secret_access_key,
            credentials.session_token,
            credentials.access_key_id,
        ):
            if secret:
                text = text.replace(secret, "****")
        return text

    async def _open(self) -> Any:
        return await per_loop.shared_client(_KIND, self._key, self._open_client)

    async def _open_client(self, stack: AsyncExitStack) -> Any:
        try:
            client = await stack.enter_async_context(self._client_context())
            if not self._table_ready:
                await self._ensure_table(client)
        except (ClientError, BotoCoreError, OSError, TimeoutError) as exc:
            raise self.error("open", None, exc) from exc
        return client

    def _client_context(self) -> Any:
        secrets: dict[str, str | None] = {}
        if self._credentials is not None:
            secrets = {
                "aws_access_key_id": self._credentials.access_key_id,
                "aws_secret_access_key": self._credentials.secret_access_key,
                "aws_session_token": self._credentials.session_token,
            }
        session = get_session()
        session.register_component("data_loader", _data_loader(session))
        if self._role is not None:  # an assumed role, refreshed by the shared source
            secrets = client_credentials(session, self._role)
        return session.create_client(
            "dynamodb",
            region_name=self._region,
            endpoint_url=self._endpoint_url,
            config=self._config,
            **secrets,
        )

    async def _ensure_table(self, client: Any) -> None:
        """Create the table if it is missing, wait until it is ACTIVE, check its keys."""
        try:
            description = await client.describe_table(TableName=self.table)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            description = await self._create(client)
        deadline = time.monotonic() + TABLE_WAIT_S
        attempt = 0
        while description["Table"]["TableStatus"] != "ACTIVE":
            if time.monotonic() > deadline:
                raise DurableError(
                    f"DynamoDB table {self.table!r} is not ACTIVE after {TABLE_WAIT_S:.0f} s"
                )
            await asyncio.sleep(backoff(attempt))
            attempt += 1
            description = await client.describe_table(TableName=self.table)
        schema = {
            (key["AttributeName"], key["KeyType"]) for key in description["Table"]["KeySchema"]
        }
        if schema != {("pk", "HASH"), ("sk", "RANGE")}:
            raise DurableError(
                f"DynamoDB table {self.table!r} has key schema {sorted(schema)}; "
                "a record store needs pk (HASH, S) and sk (RANGE, S)"
            )
        self._table_ready = True

    async def _create(self, client: Any) -> dict[str, Any]:
        try:
            await client.create_table(
                TableName=self.table,
                KeySchema=[
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise
        return cast(dict[str, Any], await client.describe_table(TableName=self.table))


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): exponential, jittered, capped."""
    return float(min(2.0, 0.02 * 2**attempt) * (0.5 + random.random()))


def _is_conflict(exc: ClientError) -> bool:
    """A transaction conflict: nothing was written and the request may be sent again."""
    code = exc.response.get("Error", {}).get("Code")
    if code == "TransactionConflictException":
        return True
    if code != "TransactionCanceledException":
        return False
    codes = {reason.get("Code") for reason in exc.response.get("CancellationReasons") or ()}
    return "TransactionConflict" in codes and "ConditionalCheckFailed" not in codes


def _data_loader(session: Any) -> Any:
    pid = os.getpid()
    if pid not in _LOADERS:
        _LOADERS.clear()
        _LOADERS[pid] = session.get_component("data_loader")
    return _LOADERS[pid]


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")


def _url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that may be secret: its password and query values (those of
    six characters or more, which cannot be mistaken for the rest of a message)."""
    parts = urlsplit(url)
    values = [value for _, value in parse_qsl(parts.query)]
    if parts.password:
        values.append(parts.password)
    return [value for value in values if len(value) >= 6]
