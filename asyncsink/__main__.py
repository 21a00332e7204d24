"""``python -m asyncsink`` (or ``asyncsink``): the demo, the call-record tool and the option
reference.

::

    asyncsink demo [--rows N] [--sink http|kinesis|elasticsearch] [--no-kill] ...
    asyncsink records list sqlite:///path/records.db
    asyncsink options [SINK] [--import MODULE] [--markdown]
                      [--write-docs [PATH] | --check-docs [PATH]]

Exit codes: 0 done, 1 failed (the demo lost or duplicated rows, a docs page is out of date),
2 bad usage (an unknown command, sink or option).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from asyncsink.sinks import sink_names

__all__ = ["main"]

_PROG = "asyncsink"


def _parser() -> argparse.ArgumentParser:
    from .demo import add_arguments

    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="A generic async sink framework for Apache Spark: the demo job, the "
        "durable call records and the option reference.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="stream rows from a local Spark session to a faulty local endpoint, kill a "
        "task on the way, and check that every row arrived (once, where the sink promises it)",
        description="Stream rows from a local Spark session to a local, fault-injecting "
        "destination, kill a task on the way, and check that every row arrived, and only "
        "once where the sink promises it. Exits 0 when "
        "nothing was lost, nor stored twice where the sink promises once.",
    )
    add_arguments(demo)
    commands.add_parser(
        "records",
        add_help=False,
        help="list, show and purge durable call records (asyncsink records --help)",
    )
    options = commands.add_parser(
        "options",
        help="list every option of a sink, with its default and meaning",
        description="List every option a sink takes (the core options and its own), with "
        "its default and meaning. Without SINK, the core options.",
    )
    builtin = ", ".join(sink_names())
    options.add_argument(
        "sink", nargs="?", metavar="SINK", help=f"{builtin}, or a sink MODULE registers"
    )
    options.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable): one whose import registers a sink with "
        "register_sink",
    )
    options.add_argument(
        "--markdown", action="store_true", help="print the sink's own options as a Markdown table"
    )
    options.add_argument(
        "--write-docs",
        "--write-readme",
        dest="write_docs",
        nargs="?",
        const="docs",
        metavar="PATH",
        help="fill the '<!-- options:NAME -->' sections of a Markdown file, or of every page "
        "under a folder (default docs), from the code",
    )
    options.add_argument(
        "--check-docs",
        "--check-readme",
        dest="check_docs",
        nargs="?",
        const="docs",
        metavar="PATH",
        help="exit 1 when the options sections under PATH (default docs) differ from the code",
    )
    return parser


def _options(args: argparse.Namespace) -> int:
    from .cli import option_docs as docs

    if args.write_docs or args.check_docs:
        path = Path(args.write_docs or args.check_docs)
        try:
            if args.write_docs:
                for page, changed in docs.update_pages(path).items():
                    print(f"{page}: updated {', '.join(changed)}")
                print(f"{path}: up to date")
                return 0
            stale = docs.stale_pages(path)
        except (OSError, ValueError) as exc:
            print(f"{_PROG} options: error: {exc}", file=sys.stderr)
            return 1
        for page, names in stale.items():
            print(f"{page}: out of date: {', '.join(names)} ({_PROG} options --write-docs)")
        if stale:
            return 1
        print(f"{path}: up to date")
        return 0
    for module in args.modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # an import error, or one the module's code raised
            print(f"{_PROG} options: cannot import {module!r}: {exc!r}", file=sys.stderr)
            return 1
    sink = args.sink.lower() if args.sink else None
    known_sinks = sink_names()
    if sink is not None and sink not in known_sinks:
        known = ", ".join(known_sinks)
        print(f"{_PROG} options: error: unknown sink {args.sink!r}; known sinks: {known} "
              "(a sink of your own: --import the module that registers it)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        text = docs.options_table(sink) if args.markdown else docs.options_text(sink)
    except ImportError as exc:
        print(f"{_PROG} options: the {sink} sink cannot be loaded: {exc}", file=sys.stderr)
        return 1
    print(text, end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] == "records":
        from .cli.records_command import main as records_main

        return records_main(arguments[1:])
    parser = _parser()
    try:
        args = parser.parse_args(arguments)
        if args.command == "demo":
            from .demo import run_from_args

            return run_from_args(args)
        return _options(args)
    except SystemExit as exc:  # --help, or a usage error argparse already reported
        return exc.code if isinstance(exc.code, int) else 2


if __name__ == "__main__":
    sys.exit(main())
