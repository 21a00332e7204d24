"""``python -m asyncsink``: the option reference, help, usage errors, delegation, and the
demo's parts that need no Spark (its writer, its report, its settings)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from asyncsink import AsyncSinkError, OptionError, SinkOptions, WriterStatistics
from asyncsink.__main__ import main
from asyncsink.cli.option_docs import options_table
from asyncsink.demo import DemoReport, DemoSettings, KillInfo
from asyncsink.demo.destinations import _DESTINATIONS
from asyncsink.demo.run import streaming_line
from asyncsink.options import option_specs
from asyncsink.sinks import sink_entry, sink_names, sink_options
from asyncsink.spark import DurableOptions


def importable(sink: str) -> bool:
    try:
        importlib.import_module(str(sink_entry(sink).writer).partition(":")[0])
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("sink", sink_names())
def test_options_lists_every_option_of_a_sink(
    sink: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if not importable(sink):
        pytest.skip(f"the {sink} sink's module is not importable here")
    assert main(["options", sink]) == 0
    listed = set(re.findall(r"^  (\S+)  \[default: ", capsys.readouterr().out, re.M))
    groups = (SinkOptions, DurableOptions, sink_options(sink))
    assert listed == {spec.spark_name for group in groups for spec in option_specs(group)}


def test_options_without_a_sink_lists_the_core_options_and_the_sinks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["options"]) == 0
    out = capsys.readouterr().out
    for spec in (*option_specs(SinkOptions), *option_specs(DurableOptions)):
        assert f"  {spec.spark_name}  [default: " in out
    assert f"Sinks: {', '.join(sink_names())}" in out


def test_options_show_secrets_as_secrets_and_required_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["options", "HTTP"]) == 0  # sink names are case-insensitive
    out = capsys.readouterr().out
    assert "  bearerToken  [default: (none)] (secret)" in out
    assert "  url  [default: (required)]" in out


def test_options_markdown_prints_the_readme_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "http", "--markdown"]) == 0
    assert capsys.readouterr().out == options_table("http")


def test_unknown_sink_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "unknown sink 'nosuch'" in err and "http" in err


def test_demo_refuses_an_unknown_sink_and_bad_values_before_starting_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--sink", "nosuch"]) == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
    for rate in ("1.5", "1"):
        assert main(["demo", "--partial-failure-rate", rate]) == 2
        assert "not a fraction within [0, 1)" in capsys.readouterr().err
    assert main(["demo", "--rows", "0"]) == 2
    assert "not at least 1" in capsys.readouterr().err
    assert main(["demo", "--throttle-rate", "0.5", "--error-rate", "0.5"]) == 2
    assert "--throttle-rate and --error-rate add up to 1 or more" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["--help"], "usage: asyncsink [-h] COMMAND"),
        (["demo", "--help"], "usage: asyncsink demo"),
        (["options", "--help"], "usage: asyncsink options"),
        (["records", "--help"], "usage: asyncsink records"),
    ],
)
def test_help_exits_0_everywhere(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(usage)


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_records_is_delegated_with_its_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    assert main(["records", "list", f"sqlite:///{missing}"]) == 2
    assert "no SQLite file" in capsys.readouterr().err


def test_check_and_write_readme(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- options:core -->\n<!-- /options:core -->\n")
    assert main(["options", "--check-readme", str(readme)]) == 1
    assert "out of date: core" in capsys.readouterr().out
    assert main(["options", "--write-readme", str(readme)]) == 0
    assert main(["options", "--check-readme", str(readme)]) == 0
    assert "maxBatchSize" in readme.read_text()


def test_check_and_write_docs_cover_every_page_of_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sinks").mkdir()
    page = tmp_path / "sinks" / "http.md"
    page.write_text("# http\n<!-- options:http -->\n<!-- /options:http -->\n")
    (tmp_path / "index.md").write_text("# no tables here\n")
    assert main(["options", "--check-docs", str(tmp_path)]) == 1
    assert "http.md: out of date: http" in capsys.readouterr().out
    assert main(["options", "--write-docs", str(tmp_path)]) == 0
    assert main(["options", "--check-docs", str(tmp_path)]) == 0
    assert "| url | (required) |" in page.read_text()


def test_python_dash_m_runs_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "asyncsink", "options", "--markdown"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == options_table(None)


# ---------------------------------------------------------------------------- the demo's parts


def test_demo_writer_outside_a_spark_task_is_the_plain_shim_writer(tmp_path: Path) -> None:
    from asyncsink.demo import create_demo_writer
    from asyncsink.sinks.http import HttpWriter

    options = {"DEMOSINK": "http", "url": "http://127.0.0.1:9/ingest", "maxBatchSize": "7",
               "demoKillAtRequest": "2", "demoKillMarker": str(tmp_path / "m")}  # fmt: skip
    writer = create_demo_writer(options)
    assert type(writer) is HttpWriter and writer.options.max_batch_size == 7
    assert "submit_request_entries" not in vars(writer)  # not armed: no task to kill
    with pytest.raises(OptionError, match="maxBatchSise"):
        create_demo_writer({"url": "http://127.0.0.1:9/ingest", "maxBatchSise": "7"})


class Killed(Exception):
    """Stands in for the end of the process in ``os._exit``."""


def test_armed_writer_dies_once_as_its_nth_request_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncsink.demo import writer as demo_writer
    from tests.core.fakes import Destination, FakeWriter

    codes: list[int] = []

    def exit_now(code: int) -> None:
        codes.append(code)
        raise Killed

    monkeypatch.setattr(os, "_exit", exit_now)
    marker = tmp_path / "killed.json"

    async def run(writer: FakeWriter) -> None:
        async with writer:
            for i in range(100):
                await writer.write(i)

    options = SinkOptions(max_batch_size=10, max_in_flight_requests=2)
    first = FakeWriter(Destination(latency=0.01), size=1, options=options)
    demo_writer._arm(first, 5, marker, 0)
    with pytest.raises(AsyncSinkError):
        anyio.run(run, first)
    assert codes == [1]
    detail = orjson.loads(marker.read_bytes())
    assert detail["partition"] == 0 and detail["attempt"] == 0
    # killed as the answer to request 5 or later arrived: before it was counted
    assert detail["acked"] >= 4 and detail["acked"] + detail["in_flight"] + 1 == detail["started"]

    again = FakeWriter(Destination(), size=1, options=SinkOptions(max_batch_size=10))
    demo_writer._arm(again, 1, marker, 0)  # the marker exists: no second kill
    anyio.run(run, again)
    assert codes == [1] and again.statistics().delivered == 100


def report(**changes: Any) -> DemoReport:
    values: dict[str, Any] = {
        "sink": "http", "rows": 10, "batches": 2, "writers": WriterStatistics(delivered=10),
        "stored": 10, "duplicates": 0, "lost": 0, "unexpected": 0, "idempotent": True,
        "kill": KillInfo(1, 0, 0, 3, 1), "kill_requested": True, "streaming_s": 2.0,
    }  # fmt: skip
    values.update(changes)
    return DemoReport(**values)


def test_demo_report_fails_on_loss_and_on_duplicates_where_the_sink_promises_none() -> None:
    assert report().exit_code == 0
    assert "OK: every row was delivered, and none was stored twice." in report().render()
    assert report(lost=1).exit_code == 1
    assert report(unexpected=1).exit_code == 1
    assert report(duplicates=2, stored=12).exit_code == 1
    at_least_once = report(duplicates=2, stored=12, idempotent=False)
    assert at_least_once.exit_code == 0
    assert "2 rows stored twice, as at-least-once" in at_least_once.render()
    failed = report(error="the streaming query stopped: boom")
    assert failed.exit_code == 1 and "FAILED: the streaming query stopped" in failed.render()


def test_demo_report_says_what_each_sink_guarantees() -> None:
    http, kinesis = _DESTINATIONS["http"], _DESTINATIONS["kinesis"]  # not started
    exactly = report(guarantee=http.guarantee, writers=WriterStatistics(resent_calls=2)).render()
    assert "\n  guarantee        each row stored once" in exactly
    exactly = " ".join(exactly.split())  # the report wraps its lines
    assert "re-sent unchanged (same idempotency key)" in exactly
    read = report(
        sink="kinesis",
        idempotent=kinesis.idempotent,
        guarantee=kinesis.guarantee,
        settled_by=kinesis.settled_by,
        resent_as=kinesis.resent_as,
        writers=WriterStatistics(reconciled=3, resent_calls=1),
    ).render()
    assert "\n  guarantee        each row stored once: PutRecords takes no idempotency" in read
    read = " ".join(read.split())
    assert "same idempotency key" not in read
    assert (
        "4 calls left pending by a lost attempt: 3 settled by reading the stream's shards, "
        "1 re-sent as they were (no idempotency key: stored twice if they had landed)"
    ) in read
    assert read.endswith("OK: every row was delivered, and none was stored twice.")
    twice = report(sink="kinesis", idempotent=kinesis.idempotent, duplicates=1, stored=11)
    assert twice.exit_code == 1, "a duplicate in Kinesis fails the demo now"


def test_demo_shows_no_path_it_deletes_on_the_way_out() -> None:
    line = streaming_line(DemoSettings(rows=100))
    assert "temporary SQLite file, deleted at the end" in line
    assert "/" not in line and "records.db" not in line


def test_demo_report_names_the_kill_and_the_figures() -> None:
    text = report().render()
    assert re.search(r"^  lost rows +0$", text, re.M)
    words = " ".join(text.split())
    assert (
        "batch 1, partition 0, attempt 0, with 3 requests answered before (each recorded soon "
        "after its answer), one more answered but not yet recorded, and 1 in flight" in words
    )
    assert "5 rows/s" in words  # 10 rows in 2 s
    assert max(len(line) for line in text.splitlines()) <= 96
    assert "none: no partition sent enough requests" in report(kill=None).render()


def test_demo_report_counts_one_of_a_kind_in_the_singular() -> None:
    one = " ".join(
        report(writers=WriterStatistics(retried=1, skipped=1), unexpected=1).render().split()
    )
    assert "1 entry sent again after a failure" in one
    assert "1 entry already delivered, not re-sent" in one
    assert "1 row that was never written" in one
    many = " ".join(report(writers=WriterStatistics(retried=2, skipped=3)).render().split())
    assert "2 entries sent again" in many and "3 entries already delivered" in many


def test_demo_settings_are_checked_and_pick_the_kill_point() -> None:
    with pytest.raises(ValueError, match="rows"):
        DemoSettings(rows=0)
    with pytest.raises(ValueError, match="throttle_rate"):
        DemoSettings(throttle_rate=1.5)
    settings = DemoSettings()
    assert settings.rows_per_batch == 5000 and settings.kill_at_request == 10
    small = DemoSettings(rows=3000)
    assert small.rows_per_batch == 1000 and small.kill_at_request == 5  # after a full window


def test_options_lists_a_sink_an_imported_module_registers(tmp_path: Path) -> None:
    (tmp_path / "my_webhook.py").write_text(
        "from dataclasses import dataclass\n"
        "from asyncsink.options import Options, option\n"
        "from asyncsink.sinks import register_sink\n\n"
        "@dataclass(frozen=True, kw_only=True, repr=False)\n"
        "class WebhookOptions(Options):\n"
        "    url: str = option(doc='Where the rows go.')\n"
        "    tenant_code: str = option('main', doc='The tenant to post as.')\n\n"
        "register_sink('webhook', 'my_webhook:create', WebhookOptions)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    command = [sys.executable, "-m", "asyncsink", "options", "webhook"]
    unknown = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2
    assert "--import the module that registers it" in unknown.stderr
    listed = subprocess.run(
        [*command, "--import", "my_webhook"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert "tenantCode" in listed.stdout and "The tenant to post as." in listed.stdout
    missing = subprocess.run(
        [*command, "--import", "no_such_module"], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert missing.returncode == 1 and "cannot import 'no_such_module'" in missing.stderr
