"""The Elasticsearch sink against OpenSearch 2/3 and OpenSearch Serverless, as the local
Elasticsearch server answers in their flavors: the compatibility headers are refused, and
an aoss time-series or vector collection refuses document ids, which the sink reports at
the first batch, or avoids with autoIds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from asyncsink import FatalError, OptionError
from asyncsink.sinks.elasticsearch import create_writer
from asyncsink.testing.sigv4 import SigV4Check
from tests.servers.elasticsearch import ElasticsearchServer

pytestmark = pytest.mark.anyio

KEY, SECRET = "AKIDAOSSTEST", "aoss-secret-key"
SIGNING = {"awsService": "aoss", "region": "us-east-1", "awsAccessKeyId": KEY,
           "awsSecretAccessKey": SECRET}  # fmt: skip


@pytest.fixture(scope="module")
def opensearch() -> Iterator[ElasticsearchServer]:
    with ElasticsearchServer(in_thread=True, flavor="opensearch") as server:
        yield server


@pytest.fixture(scope="module")
def aoss() -> Iterator[ElasticsearchServer]:
    check = SigV4Check("aoss", "us-east-1", keys=((KEY, SECRET),))
    with ElasticsearchServer(in_thread=True, flavor="aoss", sigv4=check) as server:
        yield server


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"msg": f"{prefix}-{i}", "n": i} for i in range(count)]


async def deliver(options: dict[str, str], data: list[dict[str, Any]]) -> Any:
    writer = create_writer({"maxBatchSize": "50", "initialBackoffMs": "1", **options})
    with anyio.fail_after(20):
        async with writer:
            await writer.write_all(data)
    return writer


def test_the_opensearch_flavor_says_so_and_sends_no_elastic_product_header(
    opensearch: ElasticsearchServer,
) -> None:
    answer = httpx.get(opensearch.url)
    assert answer.json()["version"]["distribution"] == "opensearch"
    assert "x-elastic-product" not in answer.headers


async def test_opensearch_takes_bulk_writes_and_lookups_as_elasticsearch_does(
    opensearch: ElasticsearchServer,
) -> None:
    opensearch.reset()
    await deliver({"hosts": opensearch.url, "index": "logs", "refresh": "true"}, rows("os", 120))
    assert len(opensearch.documents("logs")) == 120


async def test_opensearch_refuses_the_elasticsearch_compatibility_headers(
    opensearch: ElasticsearchServer,
) -> None:
    options = {"hosts": opensearch.url, "index": "logs", "compatibilityVersion": "8"}
    with pytest.raises(Exception) as caught:
        await deliver(options, rows("compat", 3))
    assert "406" in f"{caught.value} {caught.value.__cause__}"


async def test_aoss_refusing_ids_fails_the_first_batch_saying_what_to_set(
    aoss: ElasticsearchServer,
) -> None:
    aoss.reset()
    with pytest.raises(Exception) as caught:
        await deliver({"hosts": aoss.url, "index": "metrics", **SIGNING}, rows("ids", 200))
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    fatal = next(e for e in chain if isinstance(e, FatalError))
    assert "autoIds=true" in str(fatal) and "at least once" in str(fatal)
    assert set(aoss.stats().items_by_status) == {400}  # the batches in flight, no more


async def test_aoss_with_auto_ids_takes_every_document_signed(
    aoss: ElasticsearchServer,
) -> None:
    aoss.reset()
    options = {"hosts": aoss.url, "index": "metrics", "autoIds": "true", "gzip": "true",
               **SIGNING}  # fmt: skip
    writer = await deliver(options, rows("auto", 300))
    assert len(aoss.documents("metrics")) == 300
    assert writer.statistics().delivered == 300
    assert 403 not in aoss.stats().responses_by_status


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"autoIds": "true", "idField": "id"}, "autoIds"),
        ({"autoIds": "true", "operation": "update", "idField": None}, "autoIds"),
        ({**SIGNING, "compatibilityVersion": "8"}, "compatibilityVersion"),
    ],
)
def test_opensearch_options_that_contradict_are_refused(given: dict[str, Any], option: str) -> None:
    options = {"hosts": "https://search.example", "index": "logs", **given}
    with pytest.raises(OptionError) as caught:
        create_writer({k: v for k, v in options.items() if v is not None})
    assert caught.value.option == option, str(caught.value)
