"""The local destinations the demo delivers to and reads back from: the fault-injecting
HTTP endpoint, a kinesalite Kinesis emulator, the Elasticsearch emulator of the tests.

Neither emulator is part of the package: like kinesalite, the Elasticsearch emulator is
found in the source checkout the package runs from (``tests/servers/elasticsearch``)."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from asyncsink.sinks import sink_factory

from .settings import DemoSettings, plural

__all__ = ["DemoUnavailable", "Destination", "destination_for"]


class DemoUnavailable(Exception):
    """The chosen sink, or its local destination, cannot run here; the message says why."""


@dataclass(frozen=True, slots=True)
class _Delivery:
    stored: int
    duplicates: int
    lost: int
    unexpected: int
    lines: tuple[str, ...]


def _tally(ids: Sequence[Any], rows: int, lines: Sequence[str]) -> _Delivery:
    seen = set(ids)
    expected = {f"r{i}" for i in range(rows)}
    duplicates = len(ids) - len(seen)
    return _Delivery(len(ids), duplicates, len(expected - seen), len(seen - expected), tuple(lines))


class Destination:
    """A local destination the demo delivers to, and reads back from at the end."""

    name = ""
    description = ""
    idempotent = True  # whether a duplicate is a failure (the sink promises none)
    guarantee = ""  # what the sink promises about duplicates, for the report
    settled_by = "asking the destination"  # how a lost attempt's pending call is settled
    resent_as = "unchanged (same idempotency key)"  # how an unsettled one is sent again

    def start(self, settings: DemoSettings, workdir: Path) -> None:
        """Start the destination; return once it takes requests."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop it and release what it holds (safe to call twice, or before ``start``)."""

    def sink_options(self) -> dict[str, str]:
        """The sink's options that point it at this destination."""
        raise NotImplementedError

    def check(self, rows: int) -> _Delivery:
        """What the destination holds of rows ``r0`` .. ``r{rows-1}``."""
        raise NotImplementedError

    def live_count(self) -> int | None:
        """How many distinct rows the destination holds now, if it can tell cheaply."""
        return None


class _HttpDestination(Destination):
    name = "http"
    description = "the fault-injecting HTTP endpoint"
    guarantee = (
        "each row stored once: a re-sent call carries the same Idempotency-Key, and this "
        "endpoint answers a key it already applied from its idempotency store"
    )

    def __init__(self) -> None:
        self.server: Any = None

    def start(self, settings: DemoSettings, workdir: Path) -> None:
        from ..testing import Faults
        from ..testing.fault_server import FaultServer

        faults = Faults(
            latency_ms=settings.latency_ms,
            throttle_rate=settings.throttle_rate,
            error_rate=settings.error_rate,
            partial_failure_rate=settings.partial_failure_rate,
            retry_after_s=0.05,
        )
        self.server = FaultServer(faults).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def sink_options(self) -> dict[str, str]:
        return {"url": self.server.ingest_url}

    def live_count(self) -> int | None:
        count: int = self.server.stats().unique_ids
        return count

    def check(self, rows: int) -> _Delivery:
        stats = self.server.stats()
        answers = ", ".join(f"{status}={count:,}" for status, count in stats.statuses.items())
        lines = [
            f"the endpoint got {stats.requests:,} (answers by status: {answers or 'none'}; "
            f"{plural(stats.replays, 'repeated key')} answered from its idempotency store)",
        ]
        if stats.entries_rejected:
            failed = plural(stats.entries_rejected, "entry", "entries")
            lines.append(f"it failed {failed} inside accepted requests")
        return _tally(self.server.applied_ids(), rows, lines)


_KINESALITE = """
const fs = require('fs');
const server = require(process.argv[1])({createStreamMs: 50});
server.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(process.argv[2] + '.tmp', String(server.address().port));
  fs.renameSync(process.argv[2] + '.tmp', process.argv[2]);
});
"""


def _checkout_root() -> Path:
    """The source checkout this package runs from, if it runs from one (an editable install)."""
    return Path(__file__).resolve().parents[2]


def _kinesalite_package() -> Path | None:
    configured = os.environ.get("ASYNCSINK_KINESALITE")
    candidates = [Path(configured)] if configured else []
    node_modules = _checkout_root() / "tests" / "servers" / "node" / "node_modules"
    candidates.append(node_modules / "kinesalite")
    return next((path for path in candidates if (path / "package.json").is_file()), None)


class _KinesisDestination(Destination):
    name = "kinesis"
    description = "a local Kinesis emulator (kinesalite, 2 shards)"
    guarantee = (
        "each row stored once: PutRecords takes no idempotency key, so the retry reads the "
        "shards a lost attempt's pending calls map to and sends only the records the stream "
        "does not hold (a call not settled within the scan's budget is re-sent, at least "
        "once, and counted below)"
    )
    settled_by = "reading the stream's shards"
    resent_as = "as they were (no idempotency key: stored twice if they had landed)"
    stream = "asyncsink-demo"

    def __init__(self) -> None:
        try:
            sink_factory("kinesis")
            import botocore.session  # noqa: F401
        except ImportError as exc:
            raise DemoUnavailable(f"the kinesis sink cannot be loaded: {exc}") from exc
        self.node = shutil.which("node")
        self.package = _kinesalite_package()
        if self.node is None or self.package is None:
            raise DemoUnavailable(
                "the kinesis demo needs Node.js on PATH and the kinesalite package: run "
                "'npm install --prefix tests/servers/node' in a source checkout (scripts/test "
                "does it), or set ASYNCSINK_KINESALITE to a kinesalite folder"
            )
        self.process: subprocess.Popen[bytes] | None = None
        self.client: Any = None
        self.url = ""

    def start(self, settings: DemoSettings, workdir: Path) -> None:
        import botocore.session

        port_file = workdir / "kinesalite.port"
        log = workdir / "kinesalite.log"
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                [str(self.node), "-e", _KINESALITE, str(self.package), str(port_file)],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise DemoUnavailable(f"kinesalite did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"
        self.client = botocore.session.get_session().create_client(
            "kinesis", region_name="us-east-1", endpoint_url=self.url,
            aws_access_key_id="AKIADEMO", aws_secret_access_key="demo",
        )  # fmt: skip
        self.client.create_stream(StreamName=self.stream, ShardCount=2)
        while time.monotonic() < deadline:
            summary = self.client.describe_stream_summary(StreamName=self.stream)
            if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                return
            time.sleep(0.05)
        raise DemoUnavailable("the kinesalite stream did not become active in 30 s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.client is not None:
            self.client.close()
            self.client = None

    def sink_options(self) -> dict[str, str]:
        return {"streamName": self.stream, "endpointUrl": self.url, "region": "us-east-1",
                "awsAccessKeyId": "AKIADEMO", "awsSecretAccessKey": "demo",
                "partitionKeyField": "id"}  # fmt: skip

    def check(self, rows: int) -> _Delivery:
        ids: list[Any] = []
        for shard in self.client.list_shards(StreamName=self.stream)["Shards"]:
            iterator = self.client.get_shard_iterator(
                StreamName=self.stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                answer = self.client.get_records(ShardIterator=iterator, Limit=10_000)
                ids.extend(orjson.loads(record["Data"]).get("id") for record in answer["Records"])
                if not answer["Records"] and not answer.get("MillisBehindLatest"):
                    break
                iterator = answer.get("NextShardIterator")
        lines = ["kinesalite injects no faults: the fault rates apply to http and elasticsearch"]
        return _tally(ids, rows, lines)


def _elasticsearch_emulator() -> ModuleType:
    root = _checkout_root()
    if not (root / "tests" / "servers" / "elasticsearch" / "__init__.py").is_file():
        raise DemoUnavailable(
            "the elasticsearch demo needs the Elasticsearch emulator of the tests, which is "
            "not part of the installed package: run the demo from a source checkout "
            "(git clone, then scripts/demo --sink elasticsearch)"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # so the emulator's spawned process imports it too
    return importlib.import_module("tests.servers.elasticsearch")


class _ElasticsearchDestination(Destination):
    name = "elasticsearch"
    description = "the local Elasticsearch emulator (tests/servers/elasticsearch)"
    guarantee = (
        "each row stored once: document ids derive from the durable scope and the row's "
        "position, so a re-sent row overwrites its own document"
    )
    index = "asyncsink-demo"

    def __init__(self) -> None:
        try:
            sink_factory("elasticsearch")
        except ImportError as exc:
            raise DemoUnavailable(
                f"the elasticsearch sink is not available in this installation ({exc})"
            ) from exc
        self.emulator = _elasticsearch_emulator()
        self.server: Any = None

    def start(self, settings: DemoSettings, workdir: Path) -> None:
        faults = self.emulator.EsFaults(
            latency_ms=settings.latency_ms,
            request_throttle_rate=settings.throttle_rate,
            request_unavailable_rate=settings.error_rate,
            item_throttle_rate=settings.partial_failure_rate,
        )
        self.server = self.emulator.ElasticsearchServer(faults).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def sink_options(self) -> dict[str, str]:
        return {"hosts": self.server.url, "index": self.index}

    def check(self, rows: int) -> _Delivery:
        stats = self.server.stats()
        documents = self.server.documents(self.index)
        items = ", ".join(f"{status}={n:,}" for status, n in stats.items_by_status.items())
        lines = [
            f"the endpoint got {stats.bulk_requests:,} bulk requests (items by status: "
            f"{items or 'none'})",
            f"{plural(stats.duplicate_applications, 'document')} written again under the same _id "
            "(re-sends overwrite, they do not duplicate)",
        ]
        return _tally([source.get("id") for source in documents.values()], rows, lines)


_DESTINATIONS: dict[str, type[Destination]] = {
    "http": _HttpDestination,
    "kinesis": _KinesisDestination,
    "elasticsearch": _ElasticsearchDestination,
}


def destination_for(sink: str) -> Destination:
    """The local destination of ``sink``.

    Raises:
        DemoUnavailable: the sink is unknown, or it or its destination cannot run here.
    """
    try:
        cls = _DESTINATIONS[sink]
    except KeyError:
        raise DemoUnavailable(
            f"unknown sink {sink!r}; the demo runs {', '.join(_DESTINATIONS)}"
        ) from None
    return cls()
