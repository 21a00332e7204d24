"""The prose of the docs stays short: no sentence over 40 words, and a typical (median)
sentence under 25 words in every file. Option descriptions, the source of
``python -m asyncsink options SINK`` and of the docs' option tables, stay under 40 words.

What counts as prose, and how it is read:

- Pages: ``README.md``, ``CONTRIBUTING.md``, ``benchmarks/README.md`` and every page
  under ``docs/``.
- Skipped whole: fenced code blocks (``` or ~~~, indented ones too), HTML comments,
  headings, ``:::`` API-reference lines with their indented options, link definitions
  (``[name]: url``), admonition markers (``!!! note "Title"``; the admonition's body is
  prose), and the generated option tables between ``<!-- options:NAME -->`` markers
  (their cells are the option descriptions, checked from the code instead).
- A paragraph ends at a blank line, a heading, a fence, a table or a new list item.
  List markers (``-``, ``*``, ``+``, ``1.``) are dropped, so each item is a paragraph.
- Other tables: the separator row is skipped; each cell is read as text of its own and
  held to the 40-word limit, but cells do not count toward a file's median (they are
  fragments, not sentences).
- Inline: ``[text](target)`` reads as ``text``; HTML tags and emphasis markers go;
  an inline code span counts as one word, whatever it holds.
- A sentence ends at ``.``, ``?`` or ``!`` (with any closing quote or bracket) followed
  by a space, whatever comes next (a sentence may start with ``asyncsink`` or a code
  span), or at the end of its paragraph. An ellipsis and the abbreviations ``e.g.``,
  ``i.e.``, ``etc.``, ``vs.``, ``cf.`` and ``approx.`` end nothing; a colon or a
  semicolon ends nothing either.
- A word is a whitespace-separated token with a letter or a digit in it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from asyncsink.cli.option_docs import option_groups
from asyncsink.sinks import sink_names

ROOT = Path(__file__).resolve().parent.parent
MAX_WORDS = 40
TYPICAL_WORDS = 25

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}#{1,6}(\s|$)")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
ADMONITION = re.compile(r"^\s*(?:!!!|\?\?\?\+?)\s")
LINK_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s")
API_REFERENCE = re.compile(r"^\s*:::\s")
TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
OPTIONS_OPEN = re.compile(r"^<!-- options:[a-z0-9_-]+ -->")
OPTIONS_CLOSE = re.compile(r"^<!-- /options:[a-z0-9_-]+ -->")

CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]")
AUTOLINK = re.compile(r"<(https?://[^>]+)>")
HTML_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
EMPHASIS = re.compile(r"(\*\*|__|\*|(?<!\w)_(?=\w)|(?<=\w)_(?!\w))")
ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|approx)\.", re.I)
SENTENCE_END = re.compile(r"(?<=[^.][.?!])[\"')\]]*\s+")
CODE = "\x00"  # a code span, one word
DOT = "\x01"  # an abbreviation's dot
LINE = re.compile("\x02(\\d+)\x02")  # where a line of a paragraph starts


def pages() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md", *docs]


@dataclass(frozen=True)
class Sentence:
    line: int
    text: str
    in_table: bool

    @property
    def words(self) -> int:
        return count_words(self.text)

    def start(self, n: int = 8) -> str:
        words = self.text.replace(CODE, "`…`").replace(DOT, ".").split()
        return " ".join(words[:n]) + (" …" if len(words) > n else "")


def plain(text: str) -> str:
    """Inline Markdown reduced to what a reader reads; code spans become one token."""
    text = CODE_SPAN.sub(f" {CODE} ", text)
    text = LINK.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)
    text = AUTOLINK.sub(r"\1", text)
    text = HTML_TAG.sub(" ", text)
    text = EMPHASIS.sub("", text)
    return ABBREVIATIONS.sub(lambda m: m.group(1) + DOT, text)


def count_words(text: str) -> int:
    return sum(1 for token in text.split() if token == CODE or re.search(r"[^\W_]", token))


def split_sentences(text: str, line: int, *, in_table: bool = False) -> Iterator[Sentence]:
    """The sentences of a paragraph, each with the line it starts on (``text`` may mark
    where its lines start, as ``paragraph_text`` does)."""
    for part in SENTENCE_END.split(plain(text)):
        if (leading := re.match(f"\\s*{LINE.pattern}", part)) is not None:
            line = int(leading.group(1))
        words = LINE.sub(" ", part)
        if count_words(words):
            yield Sentence(line, " ".join(words.split()), in_table)
        if marks := LINE.findall(part):
            line = int(marks[-1])


def paragraph_text(lines: list[tuple[int, str]]) -> str:
    return " ".join(f"\x02{number}\x02 {text}" for number, text in lines)


def table_cells(row: str) -> list[str]:
    row = row.strip().removeprefix("|").removesuffix("|")
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row)]


def sentences(text: str) -> Iterator[Sentence]:
    """Every sentence of a Markdown page, by the rules of this module's docstring.

    Raises:
        ValueError: a fence, comment or options section runs to the end of the page,
            which would hide the rest of the page from the checks.
    """
    paragraph: list[tuple[int, str]] = []
    fence: str | None = None
    skipping_html = skipping_options = in_api_reference = False

    def flush() -> Iterator[Sentence]:
        if paragraph:
            yield from split_sentences(paragraph_text(paragraph), paragraph[0][0])
            paragraph.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if in_api_reference and stripped and line[0].isspace():
            continue  # the YAML options of a ``:::`` line
        in_api_reference = API_REFERENCE.match(line) is not None
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if skipping_options:
            skipping_options = not OPTIONS_CLOSE.match(stripped)
            continue
        if skipping_html:
            skipping_html = "-->" not in stripped
            continue
        if (match := FENCE.match(line)) is not None:
            yield from flush()
            fence = match.group(1)
            continue
        if OPTIONS_OPEN.match(stripped):
            yield from flush()
            skipping_options = True
            continue
        if stripped.startswith("<!--"):
            yield from flush()
            skipping_html = "-->" not in stripped
            continue
        if (
            not stripped
            or HEADING.match(line)
            or ADMONITION.match(line)
            or LINK_DEFINITION.match(line)
            or API_REFERENCE.match(line)
        ):
            yield from flush()
            continue
        if stripped.startswith("|"):
            yield from flush()
            if not TABLE_SEPARATOR.match(stripped):
                for cell in table_cells(stripped):
                    yield from split_sentences(cell, number, in_table=True)
            continue
        if LIST_ITEM.match(line):
            yield from flush()
            line = LIST_ITEM.sub("", line, count=1)
        paragraph.append((number, line.strip()))
    yield from flush()
    if fence is not None or skipping_options or skipping_html:
        raise ValueError("a code fence, comment or options section is never closed")


def long_sentences(found: list[Sentence]) -> list[str]:
    return [f"line {s.line}: {s.words} words: {s.start()}" for s in found if s.words > MAX_WORDS]


def median_words(found: list[Sentence]) -> float:
    lengths = [s.words for s in found if not s.in_table]
    return statistics.median(lengths) if lengths else 0.0


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_no_sentence_runs_over_40_words(page: Path) -> None:
    found = list(sentences(page.read_text(encoding="utf-8")))
    too_long = long_sentences(found)
    assert not too_long, f"{page.relative_to(ROOT)}:\n" + "\n".join(too_long)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_a_typical_sentence_is_under_25_words(page: Path) -> None:
    median = median_words(list(sentences(page.read_text(encoding="utf-8"))))
    assert median < TYPICAL_WORDS, f"{page.relative_to(ROOT)}: median sentence {median} words"


def option_descriptions() -> dict[str, str]:
    """``group title: option`` -> its description, for the core options and every sink."""
    found = {}
    for sink in [None, *sink_names()]:
        try:
            groups = option_groups(sink)
        except ImportError:
            continue  # a sink whose extra is missing here; CI installs every extra
        for group in groups:
            for spec in group.specs:
                found[f"{group.options_class.__qualname__}.{spec.spark_name}"] = spec.doc
    return found


def test_every_sink_and_the_core_have_option_descriptions() -> None:
    names = {key.partition(".")[0] for key in option_descriptions()}
    assert {"SinkOptions", "DurableOptions"} <= names
    assert len(names) >= 2 + len(sink_names())


def test_option_descriptions_stay_under_40_words() -> None:
    too_long = {
        name: count_words(plain(doc))
        for name, doc in option_descriptions().items()
        if count_words(plain(doc)) >= MAX_WORDS
    }
    assert not too_long, f"option descriptions of 40 words or more: {too_long}"


def test_the_reader_splits_sentences_and_skips_what_is_not_prose() -> None:
    page = "\n".join(
        [
            "# A heading of many words that is not a sentence at all",
            "",
            "First sentence, e.g. this one, with `a long code span` in it. Second one...",
            "goes on [a link](https://example.com/a/b) here. Third starts on line four.",
            "",
            "```python",
            "x = 'code is skipped. Entirely.'",
            "```",
            "<!-- a comment. Skipped. -->",
            '!!! note "A title"',
            "    Admonition text.",
            "- a list item. Another",
            "- second item",
            "",
            "| a | b |",
            "|---|---|",
            "| cell one | cell two. Two sentences. |",
            "<!-- options:core -->",
            "| generated | table |",
            "<!-- /options:core -->",
            "::: asyncsink.sinks.register_sink",
            "    options:",
            "      heading: asyncsink.sinks.register_sink",
        ]
    )
    found = [(s.line, s.words, s.in_table) for s in sentences(page)]
    assert found == [
        (3, 9, False),
        (3, 7, False),
        (4, 5, False),
        (11, 2, False),
        (12, 3, False),
        (12, 1, False),
        (13, 2, False),
        (15, 1, True),
        (15, 1, True),
        (17, 2, True),
        (17, 2, True),
        (17, 2, True),
    ]


@pytest.mark.parametrize("opening", ["```bash", "<!-- a comment", "<!-- options:core -->"])
def test_an_unclosed_block_fails_rather_than_hiding_the_rest(opening: str) -> None:
    with pytest.raises(ValueError, match="never closed"):
        list(sentences(f"Some prose.\n\n{opening}\n{'word ' * 60}.\n"))
