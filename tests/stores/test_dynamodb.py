"""DynamoDBStore against local emulators.

The conformance suite runs on moto's server, which implements ``TransactWriteItems``.
dynalite 4.0.0 has no transactions; against it the tests check what it does serve (table
creation, the epoch counter, queries, scans, batch deletes) and how an unsupported
operation surfaces.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from botocore.exceptions import ClientError

from asyncsink.clients import connections, per_loop
from asyncsink.errors import DurableError, FencedError
from asyncsink.stores import RecordStore, Scope, check_store_url, open_store
from asyncsink.stores.dynamodb import MAX_ITEM_BYTES, AwsCredentials, DynamoDBStore, _chunks
from asyncsink.stores.dynamodb_client import _is_conflict
from tests.core.test_connections import closed_port
from tests.servers.idle_proxy import IdleResettingProxy
from tests.stores.conformance import StoreConformance

KEY_ID = "AKIDEXAMPLESTORE0001"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"
CREDENTIALS = AwsCredentials(KEY_ID, SECRET, "session-token-value")
SCOPE = Scope("dyn", 1, 0)
SERVER_IDLE_S = 0.5


def _store(endpoint: str, **options: Any) -> DynamoDBStore:
    table = f"records-{uuid.uuid4().hex[:12]}"
    return DynamoDBStore(table, "us-east-1", endpoint, credentials=CREDENTIALS, **options)


@pytest.mark.emulator
class TestDynamoDBStore(StoreConformance):
    @pytest.fixture
    async def store(self, moto_endpoint: str) -> AsyncIterator[RecordStore]:
        async with _store(moto_endpoint) as store:
            yield store


@pytest.mark.emulator
@pytest.mark.anyio
async def test_a_put_larger_than_one_transaction_round_trips(moto_endpoint: str) -> None:
    records = {f"r{i:03d}": bytes([i % 251]) * (100 * 1024) for i in range(45)}
    async with _store(moto_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        await store.put(SCOPE, epoch, records)
        state = await store.load(SCOPE)
    assert state is not None and dict(state.records) == records


@pytest.mark.emulator
@pytest.mark.anyio
async def test_every_chunk_of_a_large_put_carries_the_epoch_condition(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = {f"r{i:03d}": b"v" for i in range(250)}
    store = _store(moto_endpoint)
    async with store:
        old = (await store.take(SCOPE)).epoch
        transact = store._transact
        chunks_sent = 0

        async def take_over_after_first_chunk(*args: Any) -> None:
            nonlocal chunks_sent
            await transact(*args)
            chunks_sent += 1
            if chunks_sent == 1:
                await store.take(SCOPE)

        monkeypatch.setattr(store, "_transact", take_over_after_first_chunk)
        with pytest.raises(FencedError) as caught:
            await store.put(SCOPE, old, records)
        assert caught.value.current == old + 1
        assert chunks_sent == 1, "the second chunk was refused"
        state = await store.load(SCOPE)
    assert state is not None
    assert dict(state.records) == dict(list(records.items())[:99]), "only the first chunk"


@pytest.mark.emulator
@pytest.mark.anyio
async def test_a_record_too_large_for_an_item_is_refused_before_any_write(
    moto_endpoint: str,
) -> None:
    async with _store(moto_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        with pytest.raises(DurableError, match="at most"):
            await store.put(SCOPE, epoch, {"small": b"x", "huge": b"x" * MAX_ITEM_BYTES})
        state = await store.load(SCOPE)
    assert state is not None and dict(state.records) == {}


@pytest.mark.emulator
@pytest.mark.anyio
async def test_complete_drops_more_records_than_one_transaction_holds(
    moto_endpoint: str,
) -> None:
    async with _store(moto_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        await store.put(SCOPE, epoch, {f"r{i}": b"v" for i in range(230)})
        await store.complete(SCOPE, epoch)
        state = await store.load(SCOPE)
        (info,) = await store.scopes()
    assert state is not None and state.completed and dict(state.records) == {}
    assert info.record_count == 0


@pytest.mark.emulator
@pytest.mark.anyio
async def test_open_store_url_uses_the_credential_chain(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    table = f"url-{uuid.uuid4().hex[:12]}"
    store = open_store(f"dynamodb://{table}?region=us-east-1&endpoint_url={moto_endpoint}")
    assert isinstance(store, DynamoDBStore) and store.table == table
    async with store:
        assert (await store.take(SCOPE)).epoch == 1
    async with open_store(f"dynamodb://{table}?endpoint_url={moto_endpoint}&region=us-east-1"):
        pass


@pytest.mark.emulator
@pytest.mark.anyio
async def test_without_create_table_a_missing_table_is_a_durable_error(
    moto_endpoint: str,
) -> None:
    async with _store(moto_endpoint, create_table=False) as store:
        with pytest.raises(DurableError, match="ResourceNotFoundException") as caught:
            await store.take(SCOPE)
    assert isinstance(caught.value.__cause__, ClientError)


@pytest.mark.emulator
def test_each_event_loop_gets_a_client_of_its_own_closed_with_the_loop(
    moto_endpoint: str,
) -> None:
    store = _store(moto_endpoint)

    async def take() -> int:
        return (await store.take(SCOPE)).epoch

    async def first_loop() -> None:
        assert await take() == 1
        assert await anyio.to_thread.run_sync(anyio.run, take) == 2, "another loop's own"
        assert per_loop.open_client_count("DynamoDB store") == 1, "closed with its loop"
        await store.aclose()
        assert per_loop.open_client_count("DynamoDB store") == 0
        assert await take() == 3, "after aclose the store reopens"

    anyio.run(first_loop)
    assert per_loop.open_client_count("DynamoDB store") == 0


def test_from_url_parses_table_and_options() -> None:
    store = DynamoDBStore.from_url(
        "dynamodb://calls?region=eu-west-1&endpoint_url=http://127.0.0.1:8000&create_table=false"
    )
    assert repr(store) == (
        "DynamoDBStore(table='calls', region='eu-west-1', endpoint_url='http://127.0.0.1:8000')"
    )
    with pytest.raises(ValueError, match="unknown dynamodb store options") as caught:
        open_store(f"dynamodb://calls?region=us-east-1&aws_secret_access_key={SECRET}")
    assert SECRET not in str(caught.value) and "aws_secret_access_key" in str(caught.value)
    with pytest.raises(ValueError, match="create_table"):
        DynamoDBStore.from_url("dynamodb://calls?create_table=maybe")
    with pytest.raises(ValueError, match="dynamodb://TABLE"):
        DynamoDBStore.from_url("dynamodb:///calls")
    bad_options = ("endpoint_url=notaurl", "endpoint_url=", "endpoint_url=ftp://h",
                   "endpoint_url=http://h:port", "region=", "region=US East")  # fmt: skip
    for bad in bad_options:
        with pytest.raises(ValueError, match=bad.partition("=")[0]):
            check_store_url(f"dynamodb://calls?region=us-east-1&{bad}")


@pytest.mark.anyio
async def test_an_endpoint_that_cannot_be_reached_is_named_without_its_secrets() -> None:
    token = "tok3n-value"
    url = f"http://127.0.0.1:{closed_port()}/path?token={token}"
    store = DynamoDBStore("calls", "us-east-1", url, credentials=CREDENTIALS, max_attempts=1)
    with pytest.raises(DurableError) as caught:
        async with store:
            await store.scopes()
    message = str(caught.value)
    assert "DynamoDB" in message and "'calls'" in message and "127.0.0.1" in message
    assert token not in message


def test_secrets_appear_in_no_repr_and_no_error_message() -> None:
    store = DynamoDBStore("calls", "us-east-1", credentials=CREDENTIALS)
    for text in (repr(store), repr(CREDENTIALS), str(CREDENTIALS)):
        assert KEY_ID not in text and SECRET not in text and "session-token-value" not in text
    echoed = ClientError(
        {"Error": {"Code": "IncompleteSignature", "Message": f"bad Credential={KEY_ID}/{SECRET}"}},
        "PutItem",
    )
    message = str(store._db.error("PutItem", SCOPE, echoed))
    assert KEY_ID not in message and SECRET not in message
    assert "IncompleteSignature" in message and "dyn/1/0" in message and "'calls'" in message


def test_transaction_conflicts_are_retried_and_fences_are_not() -> None:
    def canceled(*codes: str) -> ClientError:
        return ClientError(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                "CancellationReasons": [{"Code": code} for code in codes],
            },
            "TransactWriteItems",
        )

    assert _is_conflict(canceled("None", "TransactionConflict"))
    assert not _is_conflict(canceled("ConditionalCheckFailed", "TransactionConflict"))
    assert not _is_conflict(canceled("ConditionalCheckFailed", "None"))
    conflict = ClientError(
        {"Error": {"Code": "TransactionConflictException", "Message": "busy"}}, "UpdateItem"
    )
    assert _is_conflict(conflict)
    other = ClientError({"Error": {"Code": "ValidationException", "Message": "no"}}, "Query")
    assert not _is_conflict(other)


def test_chunks_keep_order_and_stay_within_transaction_limits() -> None:
    actions = [({"n": i}, 1) for i in range(250)]
    chunks = _chunks(actions)
    assert [len(chunk) for chunk in chunks] == [99, 99, 52]
    assert [action["n"] for chunk in chunks for action in chunk] == list(range(250))
    heavy = [({"n": i}, 400 * 1024) for i in range(20)]
    sizes = [len(chunk) * 400 * 1024 for chunk in _chunks(heavy)]
    assert all(size <= 3 * 1024 * 1024 for size in sizes) and sum(sizes) == 20 * 400 * 1024
    assert _chunks([]) == []


@pytest.mark.emulator
@pytest.mark.anyio
async def test_dynalite_serves_the_non_transactional_operations(dynalite_endpoint: str) -> None:
    async with _store(dynalite_endpoint) as store:
        assert [(await store.take(SCOPE)).epoch for _ in range(3)] == [1, 2, 3]
        await store.take(Scope("dyn", 0, 0))
        state = await store.load(SCOPE)
        assert state is not None and (state.epoch, state.completed) == (3, False)
        assert [info.scope for info in await store.scopes("dyn")] == [Scope("dyn", 0, 0), SCOPE]
        assert await store.purge("dyn", before_batch=1) == 1
        assert [info.scope for info in await store.scopes()] == [SCOPE]


@pytest.mark.emulator
@pytest.mark.anyio
async def test_an_unsupported_operation_is_a_durable_error_without_secrets(
    dynalite_endpoint: str,
) -> None:
    async with _store(dynalite_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        with pytest.raises(DurableError) as caught:
            await store.put(SCOPE, epoch, {"k": b"v"})
    message = str(caught.value)
    assert "TransactWriteItems" in message and "UnknownOperationException" in message
    assert "the endpoint does not implement this operation" in message
    assert KEY_ID not in message and SECRET not in message
    assert isinstance(caught.value.__cause__, ClientError)


async def _put_item_without_run(store: DynamoDBStore, pk: str, sk: str, **fields: Any) -> None:
    """Write an item as a release before runs did: no ``run`` attribute, pk without a run."""
    item = {"pk": {"S": pk}, "sk": {"S": sk}, **fields}
    await store._db.call("PutItem", None, TableName=store.table, Item=item)


@pytest.mark.emulator
@pytest.mark.anyio
async def test_items_written_before_runs_read_as_the_empty_run(moto_endpoint: str) -> None:
    async with _store(moto_endpoint) as store:
        await store.take(Scope("old", 9, 9))  # creates the table
        await _put_item_without_run(
            store,
            "old/1/0",
            "#scope",
            epoch={"N": "2"},
            completed={"BOOL": False},
            updated_at={"N": "1000.5"},
            sink_id={"S": "old"},
            batch_id={"N": "1"},
            partition_id={"N": "0"},
        )
        await _put_item_without_run(store, "old/1/0", "r#call:1", v={"B": b"r1"})
        await store.take(Scope("old", 1, 0, "run-1"))
        await store.take(Scope("older", 1, 0))
        listed = [(i.scope, i.epoch, i.record_count) for i in await store.scopes("old")]
        assert listed == [
            (Scope("old", 1, 0), 2, 1),
            (Scope("old", 1, 0, "run-1"), 1, 0),
            (Scope("old", 9, 9), 1, 0),
        ]
        state = await store.take(Scope("old", 1, 0))
        assert (state.epoch, dict(state.records)) == (3, {"call:1": b"r1"})
        assert await store.purge("old", run="") == 2
        assert [info.scope for info in await store.scopes()] == [
            Scope("old", 1, 0, "run-1"),
            Scope("older", 1, 0),
        ]


@pytest.mark.emulator
@pytest.mark.anyio
async def test_seal_is_one_transaction_then_a_query_and_deletes_per_prefix(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _store(moto_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        await store.put(SCOPE, epoch, {f"call:{i}": b"r" for i in range(30)} | {"fn:0": b"f"})
        sent: list[str] = []
        call = store._db.call

        async def spy(operation: str, *args: Any, **request: Any) -> dict[str, Any]:
            sent.append(operation)
            return await call(operation, *args, **request)

        monkeypatch.setattr(store._db, "call", spy)
        await store.seal(SCOPE, {"summary": b"s"}, drop_prefixes=("call:", "meta"))
        assert sent == ["TransactWriteItems", "Query", "Query", "BatchWriteItem", "BatchWriteItem"]
        state = await store.load(SCOPE)
    assert state is not None and state.completed and state.epoch == epoch + 1
    assert dict(state.records) == {"fn:0": b"f", "summary": b"s"}


@pytest.mark.emulator
@pytest.mark.anyio
async def test_a_seal_cut_short_leaves_the_scope_completed_with_its_puts(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _store(moto_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        await store.put(SCOPE, epoch, {"call:1": b"r1", "call:2": b"r2"})

        async def crash(*args: Any) -> None:
            raise DurableError("the process died here")

        monkeypatch.setattr(store, "_batch_delete", crash)
        with pytest.raises(DurableError, match="died"):
            await store.seal(SCOPE, {"summary": b"s"}, drop_prefixes=("call:",))
        state = await store.load(SCOPE)
        assert state is not None and state.completed
        assert dict(state.records) == {"call:1": b"r1", "call:2": b"r2", "summary": b"s"}
        with pytest.raises(FencedError):
            await store.put(SCOPE, epoch, {"late": b"x"})
        monkeypatch.undo()
        await store.seal(SCOPE, {"summary": b"s"}, drop_prefixes=("call:",))
        state = await store.load(SCOPE)
    assert state is not None and dict(state.records) == {"summary": b"s"}


@pytest.mark.emulator
@pytest.mark.anyio
async def test_seal_with_puts_beyond_one_transaction_writes_them_all(moto_endpoint: str) -> None:
    puts = {f"sum:{i:03d}": b"v" for i in range(150)}
    async with _store(moto_endpoint) as store:
        epoch = (await store.take(SCOPE)).epoch
        await store.put(SCOPE, epoch, {"call:1": b"r"})
        await store.seal(SCOPE, puts, drop_prefixes=("call:",))
        state = await store.load(SCOPE)
        with pytest.raises(DurableError, match="at most"):
            await store.seal(Scope("dyn", 2, 0), {"huge": b"x" * MAX_ITEM_BYTES}, drop_prefixes=())
        assert await store.load(Scope("dyn", 2, 0)) is None
    assert state is not None and state.completed and dict(state.records) == puts


async def _take_pause_load(endpoint: str) -> int:
    """A take, a pause longer than the server keeps idle connections, a load: how many
    requests the server reset for arriving on a connection idle past its timeout."""
    port = urlsplit(endpoint).port
    assert port is not None
    with IdleResettingProxy(port, SERVER_IDLE_S) as proxy:
        async with _store(proxy.url().rstrip("/")) as store:
            epoch = (await store.take(SCOPE)).epoch
            await anyio.sleep(SERVER_IDLE_S + 0.3)
            state = await store.load(SCOPE)
    assert state is not None and state.epoch == epoch
    return proxy.resets


@pytest.mark.emulator
@pytest.mark.anyio
async def test_connections_idle_past_the_limit_are_replaced_not_reused(
    dynalite_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "IDLE_CONNECTION_S", SERVER_IDLE_S / 2)
    assert await _take_pause_load(dynalite_endpoint) == 0


@pytest.mark.emulator
@pytest.mark.anyio
async def test_a_connection_reused_after_the_server_timeout_is_reset_and_retried(
    dynalite_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "IDLE_CONNECTION_S", 60.0)
    assert await _take_pause_load(dynalite_endpoint) >= 1  # and botocore's retry succeeded
