"""``python -m asyncsink``: the option reference, help, usage errors and delegation."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from asyncsink.__main__ import main
from asyncsink.docs import options_table
from asyncsink.options import SinkOptions, option_specs
from asyncsink.spark import DurableOptions
from sinks import SHIMS, shim_options


def importable(sink: str) -> bool:
    try:
        importlib.import_module(SHIMS[sink][0].partition(":")[0])
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("sink", sorted(SHIMS))
def test_options_lists_every_option_of_a_sink(
    sink: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if not importable(sink):
        pytest.skip(f"the {sink} sink's module is not importable here")
    assert main(["options", sink]) == 0
    listed = set(re.findall(r"^  (\S+)  \[default: ", capsys.readouterr().out, re.M))
    groups = (SinkOptions, DurableOptions, shim_options(sink))
    assert listed == {spec.spark_name for group in groups for spec in option_specs(group)}


def test_options_without_a_sink_lists_the_core_options_and_the_sinks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["options"]) == 0
    out = capsys.readouterr().out
    for spec in (*option_specs(SinkOptions), *option_specs(DurableOptions)):
        assert f"  {spec.spark_name}  [default: " in out
    assert f"Sinks: {', '.join(sorted(SHIMS))}" in out


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
    assert main(["demo", "--throttle-rate", "1.5"]) == 2
    assert "not a fraction within [0, 1]" in capsys.readouterr().err
    assert main(["demo", "--rows", "0"]) == 2
    assert "not at least 1" in capsys.readouterr().err


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
