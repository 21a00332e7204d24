"""The demo's Elasticsearch destination: the emulator lives with the tests, so the demo finds
it in the source checkout, and says what to do where there is none."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from asyncsink.__main__ import main
from asyncsink.demo import DemoSettings, DemoUnavailable
from asyncsink.demo import destinations as demo_destinations
from asyncsink.demo.destinations import destination_for
from asyncsink.sinks import sink_factory
from tests.servers import elasticsearch as emulator


def test_the_elasticsearch_demo_runs_the_emulator_of_the_checkout(tmp_path: Path) -> None:
    destination = destination_for("elasticsearch")
    assert destination.emulator is emulator  # tests/servers/elasticsearch of this checkout
    settings = DemoSettings(
        sink="elasticsearch", throttle_rate=0, error_rate=0, partial_failure_rate=0
    )
    destination.start(settings, tmp_path)
    try:
        writer = sink_factory("elasticsearch")(destination.sink_options())

        async def send() -> None:
            async with writer:
                await writer.write_all([{"id": "r0"}, {"id": "r1"}, {"id": "r2"}])

        anyio.run(send)
        delivery = destination.check(4)
    finally:
        destination.stop()
    assert (delivery.stored, delivery.duplicates, delivery.lost) == (3, 0, 1)


def test_the_elasticsearch_demo_outside_a_checkout_says_where_to_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(demo_destinations, "_checkout_root", lambda: tmp_path)
    with pytest.raises(DemoUnavailable, match="source checkout"):
        destination_for("elasticsearch")
    assert main(["demo", "--sink", "elasticsearch"]) == 2
    error = capsys.readouterr().err
    assert "Elasticsearch emulator" in error and "scripts/demo --sink elasticsearch" in error
