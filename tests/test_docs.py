"""The option tables of the docs pages are generated from the code and must match it; the
docs site builds with ``mkdocs build --strict`` (no broken link, anchor or reference)."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from asyncsink.cli.option_docs import (
    format_default,
    options_table,
    readme_sections,
    render_readme,
    stale_pages,
    stale_sections,
    update_readme,
)
from asyncsink.options import Options, SinkOptions, option, option_specs
from asyncsink.sinks import sink_entry, sink_names, sink_options
from asyncsink.spark import DurableOptions

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def all_sections() -> dict[str, str]:
    sections: dict[str, str] = {}
    for page in sorted(DOCS.rglob("*.md")):
        for name, body in readme_sections(page.read_text(encoding="utf-8")).items():
            assert name not in sections, f"two pages hold the {name!r} options table"
            sections[name] = body
    return sections


def importable(sink: str) -> bool:
    module = str(sink_entry(sink).writer).partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def test_docs_tables_match_the_code() -> None:
    stale = stale_pages(DOCS)
    assert stale == {}, f"run: python -m asyncsink options --write-docs ({stale})"


def test_docs_have_a_table_for_the_core_options_and_every_sink() -> None:
    assert set(all_sections()) == {"core", *sink_names()}


@pytest.mark.parametrize("sink", sink_names())
def test_each_sink_page_holds_its_own_table(sink: str) -> None:
    page = DOCS / "sinks" / f"{sink}.md"
    assert set(readme_sections(page.read_text(encoding="utf-8"))) == {sink}


def test_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


@pytest.mark.timeout(300)
def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None, "mkdocs is not installed: pip install -e '.[dev]'"
    result = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").exists()


@pytest.mark.parametrize("sink", sink_names())
def test_every_option_of_a_sink_is_in_its_readme_table(sink: str) -> None:
    if not importable(sink):
        pytest.skip(f"the {sink} sink's module is not importable here")
    table = all_sections()[sink]
    names = {line.split("|")[1].strip() for line in table.splitlines()[2:]}
    assert names == {spec.spark_name for spec in option_specs(sink_options(sink))}


def test_core_table_lists_writer_and_durable_options_with_their_defaults() -> None:
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")[1]
        for line in options_table(None).splitlines()[2:]
    }
    expected = {spec.spark_name for spec in option_specs(SinkOptions)}
    expected |= {spec.spark_name for spec in option_specs(DurableOptions)}
    assert set(rows) == expected
    assert rows["maxBatchSize"] == "500"
    assert rows["maxBatchSizeInBytes"] == "5 MiB"
    assert rows["rateLimiting"] == "true"
    assert rows["sinkId"] == "(none)"
    assert rows["recordStore"] == "a SQLite file private to the user"  # no machine path


@dataclass(frozen=True, kw_only=True, repr=False)
class Sample(Options):
    token: str = option("hunter2", secret=True, doc="A secret with a default.")
    endpoint: str = option(doc="Required | with a pipe.")
    chunk: int = option(64 * 1024, kind="size", doc="A size.")
    odd: int = option(1000, kind="size", doc="A size in no unit.")
    mode: str = option("fast", doc="A string.")


def test_defaults_are_shown_masked_required_and_in_units() -> None:
    specs = {spec.name: spec for spec in option_specs(Sample)}
    assert format_default(specs["token"]) == "***"
    assert format_default(specs["endpoint"]) == "(required)"
    assert format_default(specs["chunk"]) == "64 KiB"
    assert format_default(specs["odd"]) == "1000"
    assert format_default(specs["mode"]) == "`fast`"


def test_table_cells_escape_pipes_and_mark_required_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncsink.cli.option_docs as docs

    monkeypatch.setattr(docs, "sink_options", lambda name: Sample)
    table = options_table("http")
    assert "| endpoint | (required) | Required \\| with a pipe. |" in table
    assert "| token | *** |" in table
    assert "hunter2" not in table


def test_update_readme_fills_stale_sections_and_leaves_the_rest(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    text = (
        "# title\n\nintro\n\n<!-- options:core -->\n| old | table |\n<!-- /options:core -->\n"
        "\nmiddle\n\n<!-- options:http -->\n<!-- /options:http -->\nend\n"
    )
    readme.write_text(text)
    assert stale_sections(text) == ["core", "http"]
    assert update_readme(readme) == ["core", "http"]
    updated = readme.read_text()
    assert updated.startswith("# title\n\nintro\n\n<!-- options:core -->\n| option |")
    assert "\nmiddle\n" in updated and updated.endswith("<!-- /options:http -->\nend\n")
    assert readme_sections(updated)["http"] == options_table("http")
    assert update_readme(readme) == []  # idempotent


def test_a_section_for_an_unknown_sink_is_an_error() -> None:
    with pytest.raises(ValueError, match="'nosuch'"):
        render_readme("<!-- options:nosuch -->\n<!-- /options:nosuch -->\n")


def test_a_section_twice_is_an_error() -> None:
    twice = "<!-- options:core -->\n<!-- /options:core -->\n" * 2
    with pytest.raises(ValueError, match="two"):
        readme_sections(twice)


def test_readme_links_point_at_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links into the docs"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []
