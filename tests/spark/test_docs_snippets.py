"""Every Python snippet of README.md and docs/ runs in a test, or says why it cannot.

The README's three snippets run here as written, with only their destinations swapped
for the local ones: the fault-injecting HTTP endpoint, kinesalite and the
Elasticsearch-compatible endpoint. Record stores become a SQLite file, since the local
Spark session runs on one machine.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import orjson
import pytest

from asyncsink.testing import FaultServer
from tests.servers.elasticsearch import ElasticsearchServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"(?:^|\n)(?P<before>[^\n]*)\n+```python\n(?P<code>.*?)```", re.S)
ROWS = 300


def snippets(page: Path) -> list[tuple[str, str]]:
    """(the line before the block, the block) for each Python block of ``page``."""
    text = page.read_text(encoding="utf-8")
    return [(m.group("before").strip(), m.group("code")) for m in BLOCK.finditer(text)]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_snippet_is_tested_or_says_why_not(page: Path) -> None:
    for before, code in snippets(page):
        tested = re.fullmatch(r"<!-- tested by (tests/\S+\.py) -->", before)
        skipped = re.fullmatch(r"<!-- not runnable: (.{10,}) -->", before)
        assert tested or skipped, f"{page.name}: a snippet without a marker:\n{code[:200]}"
        if tested:
            test_file = ROOT / tested.group(1)
            assert test_file.exists(), f"{page.name}: {tested.group(1)} does not exist"
            assert page.name in test_file.read_text(encoding="utf-8")


def readme_snippet(sink: str) -> str:
    (code,) = [c for _, c in snippets(ROOT / "README.md") if f'"{sink}"' in c]
    assert len(code.splitlines()) <= 10
    assert "sink_id=" in code and '"recordStore"' in code
    return code


def run(code: str, swaps: dict[str, str], namespace: dict[str, Any]) -> dict[str, Any]:
    for old, new in swaps.items():
        assert old in code, old
        code = code.replace(old, new)
    exec(code, namespace)  # noqa: S102
    query = namespace.get("query")
    if query is not None:
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    return namespace


@pytest.fixture
def events(spark: Any, tmp_path: Path) -> Any:
    folder = tmp_path / "in"
    folder.mkdir()
    lines = (orjson.dumps({"id": f"e{i}", "user_id": f"u{i % 9}", "n": i}) for i in range(ROWS))
    (folder / "part-0.json").write_bytes(b"\n".join(lines) + b"\n")
    return spark.readStream.schema("id STRING, user_id STRING, n LONG").json(str(folder))


def store_swaps(tmp_path: Path, store: str) -> dict[str, str]:
    return {store: f"sqlite://{tmp_path / 'records.db'}"}


def test_the_readme_http_snippet_delivers_each_row_once(events: Any, tmp_path: Path) -> None:
    """README.md: the HTTP snippet, against the fault-injecting endpoint."""
    with FaultServer(require_auth="Bearer t0ken") as server:
        swaps = {
            "https://api.example.com/ingest": server.ingest_url,
            "/checkpoints/events": str(tmp_path / "checkpoint"),
            **store_swaps(tmp_path, "postgresql://etl@db.internal/pipelines"),
        }
        run(readme_snippet("http"), swaps, {"events": events, "token": "t0ken"})
        assert server.stats().entries_received == ROWS


@pytest.fixture
def kinesis_stream(kinesalite_endpoint: str) -> Iterator[tuple[Any, str]]:
    client = botocore.session.get_session().create_client(
        "kinesis", region_name="us-east-1", endpoint_url=kinesalite_endpoint,
        aws_access_key_id="docs", aws_secret_access_key="docs",
    )  # fmt: skip
    name = f"docs-{uuid.uuid4().hex[:10]}"
    client.create_stream(StreamName=name, ShardCount=2)
    deadline = time.monotonic() + 30
    while (
        client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
        != "ACTIVE"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield client, name
    client.delete_stream(StreamName=name)
    client.close()


def stream_ids(client: Any, name: str) -> list[str]:
    ids: list[str] = []
    for shard in client.list_shards(StreamName=name)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        page = client.get_records(ShardIterator=iterator, Limit=10_000)
        ids.extend(orjson.loads(record["Data"])["id"] for record in page["Records"])
    return ids


@pytest.mark.emulator
def test_the_readme_kinesis_snippet_puts_each_row_once(
    events: Any, tmp_path: Path, kinesis_stream: tuple[Any, str], kinesalite_endpoint: str
) -> None:
    """README.md: the Kinesis snippet, against kinesalite."""
    client, name = kinesis_stream
    swaps = {
        '"streamName": "events"': f'"streamName": "{name}"',
        '"region": "eu-west-1"': f'"region": "us-east-1", "endpointUrl": "{kinesalite_endpoint}", '
        '"awsAccessKeyId": "docs", "awsSecretAccessKey": "docs"',
        "/checkpoints/kinesis": str(tmp_path / "checkpoint"),
        **store_swaps(tmp_path, "dynamodb://asyncsink-records?region=eu-west-1"),
    }
    run(readme_snippet("kinesis"), swaps, {"events": events})
    assert sorted(stream_ids(client, name)) == sorted(f"e{i}" for i in range(ROWS))


def test_the_readme_elasticsearch_snippet_indexes_by_id(spark: Any, tmp_path: Path) -> None:
    """README.md: the Elasticsearch snippet, against the ES-compatible endpoint."""
    orders = spark.range(ROWS).selectExpr("concat('o', id) AS order_id", "id * 2 AS amount")
    with ElasticsearchServer() as server:
        swaps = {
            "https://es.internal:9200": server.url,
            **store_swaps(tmp_path, "postgresql://etl@db.internal/pipelines"),
        }
        namespace = run(readme_snippet("elasticsearch"), swaps,
                        {"orders": orders, "api_key": "a2V5OnNlY3JldA=="})  # fmt: skip
        assert namespace["stats"].delivered == ROWS
        assert set(server.documents("orders")) == {f"o{i}" for i in range(ROWS)}


def test_the_quickstart_program_runs(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/quickstart.md: the first job, as written."""
    (code,) = [c for _, c in snippets(ROOT / "docs" / "quickstart.md")]
    exec(code, {})  # noqa: S102
    assert "1000 rows received" in capsys.readouterr().out
