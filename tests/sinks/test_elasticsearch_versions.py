"""Versioned writes on the Elasticsearch sink: bodies carry each row's version and
operation, fields stay out of ``_source``, and a 409 to a versioned write counts as
``skipped_stale`` instead of being retried."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from asyncsink import BadRecordError, DeadLetter, OptionError
from asyncsink.sinks.elasticsearch import ElasticsearchOptions, create_writer
from asyncsink.sinks.elasticsearch.results import read_bulk_items
from asyncsink.sinks.web.redact import Redactor
from tests.sinks.test_elasticsearch import (
    HOST,
    Cluster,
    bulk_answer,
    bulk_operations,
    deliver,
    es_writer,
    fast,
)
from tests.sinks.web_doubles import mocked_web

pytestmark = pytest.mark.anyio


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with mocked_web(assert_all_called=False) as router:
        yield Cluster(router)


CHANGES = [
    {"id": "a", "op": "index", "lsn": 10, "name": "Ada"},
    {"id": "b", "op": "delete", "lsn": 11},
    {"id": "a", "op": "index", "lsn": 12, "name": "Ada L."},
]


def lines(request: Any) -> list[Any]:
    return [orjson.loads(line) for line in request.content.splitlines()]


async def test_index_and_delete_carry_the_version_and_excluded_fields_stay_out(
    cluster: Cluster,
) -> None:
    w = es_writer(id_field="id", operation_field="op", version_field="lsn",
                  exclude_fields="op, lsn")  # fmt: skip
    await deliver(w, CHANGES)
    assert lines(cluster.bulks()[0]) == [
        {"index": {"_id": "a", "version": 10, "version_type": "external"}},
        {"id": "a", "name": "Ada"},
        {"delete": {"_id": "b", "version": 11, "version_type": "external"}},
        {"index": {"_id": "a", "version": 12, "version_type": "external"}},
        {"id": "a", "name": "Ada L."},
    ]


async def test_external_gte_and_a_fixed_operation_with_derived_ids(cluster: Cluster) -> None:
    await deliver(es_writer(version_field="lsn", version_type="external_gte"), [{"lsn": 3}])
    ((op, meta),) = bulk_operations(cluster.bulks()[0])
    assert op == "index" and meta["version"] == 3 and meta["version_type"] == "external_gte"
    assert "_id" in meta  # derived, as without versions


async def test_a_409_to_a_versioned_write_is_stale_not_retried(cluster: Cluster) -> None:
    cluster.items.append([409, 409, 201])
    w = await deliver(es_writer(id_field="id", operation_field="op", version_field="lsn"), CHANGES)
    stats = w.statistics()
    assert len(cluster.bulks()) == 1
    assert (stats.delivered, stats.skipped_stale, stats.retried, stats.failed) == (3, 2, 0, 0)
    assert "skipped_stale" in w.statistics().__dataclass_fields__
    assert (stats + stats).skipped_stale == 4


async def test_a_409_without_versions_keeps_its_meaning(cluster: Cluster) -> None:
    cluster.items.append([409, 201])
    w = await deliver(es_writer(id_field="id"), [{"id": "a"}, {"id": "b"}])
    assert len(cluster.bulks()) == 2  # a concurrent change: retried
    assert w.statistics().skipped_stale == 0 and w.statistics().retried == 1


def test_mixed_operations_are_read_by_their_own_item() -> None:
    ops = [("index", {"_id": "a"}), ("create", {"_id": "b"}), ("delete", {"_id": "c"}),
           ("update", {"_id": "d"}), ("index", {"_id": "e"})]  # fmt: skip
    answer = orjson.dumps(bulk_answer(ops, [409, 409, 404, 409, 201]))
    result = read_bulk_items(answer, None, 5, Redactor([]))
    assert result is not None  # unversioned: the index and update 409s are retried
    assert list(result.retry) == [0, 3] and not result.stale
    answer = orjson.dumps(bulk_answer(ops[:3], [409, 409, 409]))
    result = read_bulk_items(answer, None, 3, Redactor([]), versioned=True)
    assert result is not None and list(result.stale) == [0, 2] and not result.retry


async def test_an_unknown_operation_is_a_bad_record_naming_its_position(
    cluster: Cluster,
) -> None:
    rows = [*CHANGES, {"id": "c", "op": "upsert", "lsn": 13}]
    with pytest.raises(BadRecordError, match="operationField.*'upsert'") as caught:
        await deliver(es_writer(id_field="id", operation_field="op"), rows)
    assert caught.value.position == 3
    letters: list[DeadLetter] = []
    w = es_writer(fast(dead_letter=letters.append), id_field="id", operation_field="op")
    await deliver(w, [{"id": "x", "op": None}, *CHANGES])
    assert [d.position for d in letters] == [0] and "null" in letters[0].reason


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"id": "a", "op": "update", "lsn": 1}, "operation 'update' takes no version"),
        ({"id": "a", "op": "create", "lsn": 1}, "operation 'create' takes no version"),
        ({"id": "a", "op": "index", "lsn": "7"}, "'lsn' \\(versionField\\) holds '7'"),
        ({"id": "a", "op": "index"}, "'lsn' \\(versionField\\) holds null"),
    ],
)
async def test_a_row_without_a_usable_version_is_a_bad_record(
    cluster: Cluster, row: dict[str, Any], reason: str
) -> None:
    with pytest.raises(BadRecordError, match=reason):
        await deliver(es_writer(id_field="id", operation_field="op", version_field="lsn"), [row])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"versionType": "external"}, "'versionType' needs option 'versionField'"),
        ({"versionField": "v", "versionType": "internal"}, "versionType"),
        ({"versionField": "v", "operation": "update", "idField": "id"}, "'versionField'"),
        ({"versionField": "v", "autoIds": "true"}, "'versionField' and 'autoIds'"),
        ({"operationField": "op"}, "'operationField' needs option 'idField'"),
        ({"operationField": "op", "idField": "id", "operation": "delete"}, "contradict"),
    ],
)
def test_contradicting_version_and_operation_options_are_refused(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        create_writer({"hosts": HOST, "index": "logs", **options})


def test_version_options_read_from_spark_strings() -> None:
    options = {"hosts": HOST, "index": "logs", "VERSIONFIELD": "lsn",
               "excludeFields": "lsn,op", "idField": "id", "operationField": "op"}  # fmt: skip
    w = create_writer(options)
    es: ElasticsearchOptions = w.es
    assert (es.version_field, es.version_type, es.exclude_fields) == (
        "lsn", "external", ("lsn", "op")
    )  # fmt: skip
