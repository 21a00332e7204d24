"""The docs' "Writing a sink" example is complete and correct: it runs as written against
the fault-injecting endpoint, and its Spark factory builds the writer."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncsink import OptionError
from asyncsink.plugins import sinks as registry
from asyncsink.spark import SinkSpec
from asyncsink.testing import Faults, FaultServer

DOCS = Path(__file__).resolve().parent.parent / "docs"
FAULTS = Faults(throttle_rate=0.05, error_rate=0.03, partial_failure_rate=0.03,
                retry_after_s=0.01, seed=11)  # fmt: skip


def code_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    program, factory = code_blocks("writing-a-sink.md")[:2]
    (tmp_path / "webhook.py").write_text(program)
    (tmp_path / "webhook_spark.py").write_text(factory)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("webhook", "webhook_spark"):
        sys.modules.pop(name, None)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(FAULTS, in_thread=True) as running:
        yield running


def test_the_example_is_a_complete_program_under_65_lines(example: Path) -> None:
    program = (example / "webhook.py").read_text()
    assert len(program.splitlines()) < 65
    assert 'if __name__ == "__main__":' in program


def test_the_example_delivers_every_row_once_through_faults(
    example: Path, server: FaultServer
) -> None:
    result = subprocess.run(
        [sys.executable, str(example / "webhook.py"), server.ingest_url],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "10000 written, 10000 delivered" in result.stdout
    stats = server.stats()
    assert stats.unique_ids == 10_000 and stats.duplicates == 0
    assert stats.statuses.get(429, 0) + stats.statuses.get(503, 0) > 0  # it was throttled
    assert stats.entries_rejected > 0  # and some entries failed on their own, then got in
    assert sorted(server.applied_ids(), key=lambda i: int(i.split("-")[1])) == [
        f"row-{i}" for i in range(10_000)
    ]


class _PlainAnswers(BaseHTTPRequestHandler):
    """Takes JSON arrays of rows and answers 204 No Content, or 200 with a plain "OK"."""

    def do_POST(self) -> None:  # noqa: N802 - the handler's name
        rows = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server: Any = self.server
        with server.lock:
            server.ids.extend(row["id"] for row in rows)
        if server.answer == "204":
            self.send_response(204)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("answer", ["204", "plain text"])
def test_the_example_takes_an_empty_or_plain_text_2xx_as_delivered(
    example: Path, answer: str
) -> None:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _PlainAnswers)
    server.ids, server.lock, server.answer = [], threading.Lock(), answer
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        result = subprocess.run(
            [sys.executable, str(example / "webhook.py"), f"http://127.0.0.1:{server.server_port}/"],
            capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    assert "10000 written, 10000 delivered" in result.stdout
    assert sorted(server.ids) == sorted(f"row-{i}" for i in range(10_000))


def test_the_example_fails_fast_on_a_fatal_answer(example: Path, server: FaultServer) -> None:
    server.set_faults(Faults(fail_statuses=(401,)))
    result = subprocess.run(
        [sys.executable, str(example / "webhook.py"), server.ingest_url],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "FatalError" in result.stderr and "HTTP 401" in result.stderr


def test_the_spark_module_registers_the_writer_with_a_required_url(
    example: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_SINKS", registry._SINKS.copy())
    importlib.import_module("webhook_spark").register()
    # what foreach_batch("webhook", ...) checks on the driver, and a task builds
    writer: Any = SinkSpec("webhook", {"url": server.ingest_url, "maxBatchSize": "50"}).build()
    assert type(writer).__name__ == "SparkWebhookWriter"
    assert writer.url == server.ingest_url and writer.options.max_batch_size == 50

    async def deliver() -> None:
        async with writer:
            for i in range(500):
                await writer.write({"id": f"f-{i}", "value": i})

    anyio.run(deliver)
    assert server.stats().unique_ids == 500
    with pytest.raises(OptionError, match="option 'url' is required by the webhook sink"):
        SinkSpec("webhook", {"maxBatchSize": "50"})
    with pytest.raises(OptionError, match="maxBatchSise"):
        SinkSpec("webhook", {"url": server.ingest_url, "maxBatchSise": "50"})


def test_the_pages_complete_sink_is_the_example_program() -> None:
    (block,) = [b for b in code_blocks("writing-a-sink.md") if "class CollectorWriter" in b]
    program = (DOCS.parent / "examples" / "custom_sink.py").read_text(encoding="utf-8")
    assert block == program
    assert len(program.splitlines()) < 60


def test_the_without_spark_example_delivers_once_and_a_rerun_sends_nothing(
    tmp_path: Path, server: FaultServer
) -> None:
    (block,) = [b for b in code_blocks("spark.md") if "sink_factory" in b]
    store = "sqlite:///var/lib/orders/records.db"
    assert store in block
    namespace: dict[str, Any] = {}
    exec(block.replace(store, f"sqlite://{tmp_path / 'records.db'}"), namespace)  # noqa: S102
    rows = [{"id": f"o{i}", "amount": i} for i in range(1500)]
    first = anyio.run(namespace["deliver"], rows, server.ingest_url)
    again = anyio.run(namespace["deliver"], rows, server.ingest_url)
    assert (first.delivered, again.delivered, again.skipped) == (1500, 0, 1500)
    ids = server.applied_ids()
    assert sorted(ids) == sorted(row["id"] for row in rows)
