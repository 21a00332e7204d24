"""The DynamoDB sink against moto's server behind the fault proxy: a stream of puts and
deletes of a few keys, through throttles, UnprocessedItems, lost answers, a killed writer
and a replay, leaves every key with its last write (Scan)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from asyncsink import BadRecordError, OptionError
from asyncsink.policies.ordering import NO_ORDERING
from asyncsink.sinks.dynamodb import DynamoDBOptions, DynamoDBWriter, create_writer
from tests.servers.aws_faults import AwsFaultProxy

from .aws_helpers import KEYS, REGION, boto, killed_run, options, run_writer

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(180)]


def changes(keys: int, versions: int) -> list[dict[str, Any]]:
    """Each key's changes in order: puts with a growing version, some of them deletes."""
    rows = []
    for version in range(versions):
        for k in range(keys):
            delete = (k + version) % 4 == 0
            rows.append(
                {
                    "id": f"k{k:03d}",
                    "v": version,
                    "op": "delete" if delete else "put",
                    "price": 10.25,
                    "tags": ["a", None],
                    "at": "2026-11-28T12:00:00Z",
                }
            )
    return rows


def final(rows: list[dict[str, Any]]) -> dict[str, int]:
    """What each key ends with: its last put's version, or nothing after a delete."""
    state: dict[str, int] = {}
    for row in rows:
        if row["op"] == "delete":
            state.pop(row["id"], None)
        else:
            state[row["id"]] = row["v"]
    return state


def make_table(endpoint: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    boto("dynamodb", endpoint).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def scanned(endpoint: str, table: str) -> dict[str, dict[str, Any]]:
    dynamodb, items, start = boto("dynamodb", endpoint), {}, None
    for _ in range(1000):
        page = dynamodb.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        items.update({item["id"]["S"]: item for item in page["Items"]})
        start = page.get("LastEvaluatedKey")
        if not start:
            return items
    raise AssertionError("the scan did not end")


def test_options_need_a_table_and_its_key_and_order_by_key_fields_only() -> None:
    with pytest.raises(OptionError, match="tableName"):
        create_writer({"keyFields": "id"})
    with pytest.raises(OptionError, match="keyFields"):
        DynamoDBOptions(table_name="orders", key_fields="a,b,c")
    with pytest.raises(OptionError, match="orderingKey"):
        create_writer({"tableName": "orders", "keyFields": "id", "orderingKey": "user"})
    writer = create_writer(
        {"tableName": "orders", "keyFields": "customer,order", "orderingKey": "customer"}
    )
    assert (writer.options.max_batch_size, writer.options.max_record_size_in_bytes) == (
        25,
        400 * 1024,
    )


def test_rows_map_to_dynamodb_types_and_bad_rows_are_refused() -> None:
    writer = create_writer({"tableName": "orders", "keyFields": "id", "operationField": "op"})
    entry = writer.convert(
        {"id": "a", "n": 12, "d": 0.5, "ok": True, "none": None, "s": {"x": [1, "y"]}, "op": "put"}
    )
    item = entry.request["PutRequest"]["Item"]
    assert item == {
        "id": {"S": "a"},
        "n": {"N": "12"},
        "d": {"N": "0.5"},
        "ok": {"BOOL": True},
        "none": {"NULL": True},
        "s": {"M": {"x": {"L": [{"N": "1"}, {"S": "y"}]}}},
    }
    delete = writer.convert({"id": 7, "op": "DELETE"}).request
    assert delete == {"DeleteRequest": {"Key": {"id": {"N": "7"}}}}
    for bad, reason in (
        ({"op": "put"}, "key field 'id' is missing"),
        ({"id": "a", "op": "merge"}, "not put or delete"),
        ({"id": "a", "big": 1e300}, "beyond DynamoDB's numbers"),
    ):
        with pytest.raises(ValueError, match=reason):
            writer.convert(bad)


@pytest.mark.anyio
async def test_every_key_ends_with_its_last_write_through_faults_a_kill_and_a_replay(
    proxy: AwsFaultProxy, moto_endpoint: str, tmp_path: Path
) -> None:
    table = make_table(moto_endpoint)
    settings = options(
        proxy.url, tableName=table, keyFields="id", operationField="op", maxInFlightRequests="4"
    )
    store, data = str(tmp_path / "records.db"), changes(60, 8)
    killed_run("dynamodb", settings, data, store, kill_after=8)
    first = await run_writer("dynamodb", settings, data, store)
    again = await run_writer("dynamodb", settings, data, store)  # the batch replayed
    items = scanned(moto_endpoint, table)
    assert {key: int(item["v"]["N"]) for key, item in items.items()} == final(data)
    assert first.skipped >= 50 and again.delivered == 0  # the dead writer's acknowledged
    assert min(proxy.counts[f] for f in ("throttle", "partial", "lost")) >= 1, proxy.counts
    one = next(iter(items.values()))
    assert one["price"] == {"N": "10.25"} and "op" not in one
    assert one["tags"] == {"L": [{"S": "a"}, {"NULL": True}]}


@pytest.mark.anyio
async def test_two_writes_of_one_key_in_one_request_leave_the_later(moto_endpoint: str) -> None:
    table = make_table(moto_endpoint)
    own = DynamoDBOptions(
        table_name=table,
        key_fields="id",
        operation_field="op",
        region=REGION,
        endpoint_url=moto_endpoint,
        aws_access_key_id=KEYS["awsAccessKeyId"],
        aws_secret_access_key="x",
    )
    async with DynamoDBWriter(own, ordering=NO_ORDERING) as writer:  # one request for all
        await writer.write_all(
            [
                {"id": "a", "v": 1},
                {"id": "b", "v": 1},
                {"id": "a", "v": 2},
                {"id": "b", "op": "delete"},
            ]
        )
    assert {k: item["v"]["N"] for k, item in scanned(moto_endpoint, table).items()} == {"a": "2"}
    assert writer.statistics().delivered == 4


@pytest.mark.anyio
async def test_a_missing_table_fails_at_once_naming_it(moto_endpoint: str) -> None:
    writer = create_writer(options(moto_endpoint, tableName="nowhere", keyFields="id"))
    with pytest.raises(Exception, match="DynamoDB table 'nowhere'.*check tableName"):
        async with writer:
            await writer.write_all([{"id": "a"}])
    assert BadRecordError  # the writer's errors are asyncsink's
