"""The option reference, generated from the option classes themselves.

Every option is declared once, with its default and its documentation, on a frozen
options class (see ``asyncsink.options``). This module turns those declarations into the
text ``python -m asyncsink options`` prints and into the Markdown tables of the docs
pages (``docs/options.md`` and each sink's page), which sit between markers::

    <!-- options:core -->
    | option | default | meaning |
    ...
    <!-- /options:core -->

``core`` holds the writer's ``SinkOptions`` and the Spark integration's ``DurableOptions``;
each sink (``http``, ``kinesis``, ``elasticsearch``) has a section of its own options.
``update_pages`` rewrites those sections in every page under a folder; ``stale_pages``
names the ones that no longer match the code (the test suite fails on them).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from asyncsink.sinks import sink_names, sink_options

from ..options import OptionSpec, SinkOptions, option_specs
from ..spark.spec import DurableOptions

__all__ = [
    "CORE",
    "OptionGroup",
    "format_default",
    "option_groups",
    "options_table",
    "options_text",
    "readme_sections",
    "pages",
    "render_readme",
    "stale_pages",
    "stale_sections",
    "update_pages",
    "update_readme",
]

CORE = "core"
"""The section name of the options every sink shares."""

_MiB = 1024 * 1024
_KiB = 1024
_SECTION = re.compile(
    r"(?P<open><!-- options:(?P<name>[a-z0-9_-]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /options:(?P=name) -->)",
    re.S,
)


@dataclass(frozen=True, slots=True)
class OptionGroup:
    """One options class as the reference shows it: a title and the class."""

    title: str
    options_class: type

    @property
    def specs(self) -> tuple[OptionSpec, ...]:
        """The group's options, in declaration order."""
        return option_specs(self.options_class)


def option_groups(sink: str | None) -> list[OptionGroup]:
    """The option groups a sink takes: the core ones, then the sink's own.

    ``None`` (or ``"core"``) gives the core groups alone.

    Raises:
        ValueError: no sink has that name.
        ImportError: the sink's module cannot be imported (the message says why).
    """
    groups = [
        OptionGroup("Writer (buffering, retries, bad records)", SinkOptions),
        OptionGroup("Spark integration and durable call records", DurableOptions),
    ]
    if sink is None or sink == CORE:
        return groups
    name = sink.lower()
    own = sink_options(name)
    return [*groups, OptionGroup(f"The {name} sink", own)] if own is not None else groups


def _own_group(sink: str | None) -> list[OptionGroup]:
    groups = option_groups(sink)
    return groups if sink is None or sink == CORE else groups[2:]


def format_default(spec: OptionSpec) -> str:
    """An option's default as the reference shows it: sizes in KiB/MiB, booleans in
    lower case, ``(none)`` for no value, ``***`` for a secret's value."""
    value = spec.default
    if spec.required:
        return "(required)"
    if spec.name == "record_store" and value is None:
        return "a SQLite file private to the user"
    if value is None:
        return "(none)"
    if spec.secret:
        return "***"
    if isinstance(value, bool):
        return "true" if value else "false"
    if spec.kind == "size" and isinstance(value, int) and value:
        for unit, size in (("MiB", _MiB), ("KiB", _KiB)):
            if value % size == 0:
                return f"{value // size} {unit}"
        return str(value)
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Mapping | list | tuple):
        return f"`{orjson.dumps(value).decode()}`"
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "\\<").replace("\n", " ")


def options_table(sink: str | None) -> str:
    """A Markdown table (``option | default | meaning``) of a sink's own options, or of
    the core options (``None`` or ``"core"``), ending with a newline.

    Raises:
        ValueError, ImportError: see ``option_groups``.
    """
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for group in _own_group(sink):
        for spec in group.specs:
            default = format_default(spec)
            lines.append(f"| {spec.spark_name} | {_cell(default)} | {_cell(spec.doc)} |")
    return "\n".join(lines) + "\n"


def options_text(sink: str | None, *, width: int = 88) -> str:
    """Every option a sink takes (the core groups and its own), for a terminal.

    Raises:
        ValueError, ImportError: see ``option_groups``.
    """
    title = "Core options" if sink is None or sink == CORE else f"Options of the {sink} sink"
    out = [
        f"{title}. Names are case-insensitive; values are strings (sizes accept 5mb, "
        "durations 2s).",
    ]
    groups = option_groups(sink)
    core_names = {spec.spark_name for group in groups[:2] for spec in group.specs}
    for index, group in enumerate(groups):
        cls = group.options_class
        out.append("")
        out.append(f"{group.title} ({cls.__module__}.{cls.__qualname__}):")
        for spec in group.specs:
            default = format_default(spec).replace("`", "")
            notes = " (secret)" if spec.secret else ""
            if index >= 2 and spec.spark_name in core_names:
                notes += " (the sink's own, in place of the core option)"
            out.append(f"  {spec.spark_name}  [default: {default}]{notes}")
            out.extend(
                textwrap.wrap(spec.doc, width, initial_indent="      ", subsequent_indent="      ")
            )
    if sink is None or sink == CORE:
        out.append("")
        out.append(f"Sinks: {', '.join(sink_names())} (python -m asyncsink options SINK).")
    return "\n".join(out) + "\n"


def readme_sections(text: str) -> dict[str, str]:
    """The generated sections of a README: section name -> the text between its markers.

    Raises:
        ValueError: a section appears twice.
    """
    sections: dict[str, str] = {}
    for match in _SECTION.finditer(text):
        name = match.group("name")
        if name in sections:
            raise ValueError(f"the README has two '<!-- options:{name} -->' sections")
        sections[name] = match.group("body")
    return sections


def _available(names: Iterable[str]) -> dict[str, str]:
    tables = {}
    for name in names:
        try:
            tables[name] = options_table(name)
        except ImportError:
            continue  # a sink whose module is missing keeps what the README says
    return tables


def render_readme(text: str) -> str:
    """``text`` with every options section filled from the code.

    A section of a sink whose module cannot be imported is left as it is.

    Raises:
        ValueError: a section names no known sink.
    """
    sections = readme_sections(text)
    unknown = sorted(set(sections) - {CORE, *sink_names()})
    if unknown:
        raise ValueError(
            f"the README has a section for {unknown[0]!r}, which is neither 'core' nor a "
            f"sink ({', '.join(sink_names())})"
        )
    tables = _available(sections)

    def fill(match: re.Match[str]) -> str:
        table = tables.get(match.group("name"), match.group("body"))
        return match.group("open") + table + match.group("close")

    return _SECTION.sub(fill, text)


def stale_sections(text: str) -> list[str]:
    """The options sections of ``text`` that do not match the code, by name."""
    current = readme_sections(text)
    wanted = readme_sections(render_readme(text))
    return [name for name in current if current[name] != wanted[name]]


def update_readme(path: str | Path) -> list[str]:
    """Rewrite the options sections of the README at ``path``; return those that changed.

    Raises:
        OSError: the file cannot be read or written.
        ValueError: see ``render_readme``.
    """
    target = Path(path)
    text = target.read_text(encoding="utf-8")
    changed = stale_sections(text)
    if changed:
        target.write_text(render_readme(text), encoding="utf-8")
    return changed


def pages(path: str | Path) -> list[Path]:
    """The Markdown file at ``path``, or every ``*.md`` file under the folder ``path``."""
    target = Path(path)
    return sorted(target.rglob("*.md")) if target.is_dir() else [target]


def stale_pages(path: str | Path) -> dict[Path, list[str]]:
    """Page -> its options sections that do not match the code, for the pages at ``path``.

    Raises:
        OSError: a page cannot be read.
        ValueError: see ``render_readme``.
    """
    stale = {page: stale_sections(page.read_text(encoding="utf-8")) for page in pages(path)}
    return {page: names for page, names in stale.items() if names}


def update_pages(path: str | Path) -> dict[Path, list[str]]:
    """Rewrite the options sections of the pages at ``path``; return what changed.

    Raises:
        OSError: a page cannot be read or written.
        ValueError: see ``render_readme``.
    """
    changed = {page: update_readme(page) for page in pages(path)}
    return {page: names for page, names in changed.items() if names}
