"""``asyncsink demo``'s command line."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .destinations import DemoUnavailable
from .run import run_demo
from .settings import DemoSettings

__all__ = ["add_arguments", "main", "run_from_args"]


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(
            f"{text} is not a fraction within [0, 1) (at 1 nothing could be delivered)"
        )
    return value


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not at least 1")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's command-line options, added to ``parser``."""
    defaults = DemoSettings()
    add = parser.add_argument
    add(
        "--sink",
        choices=("http", "kinesis", "elasticsearch"),
        default="http",
        help="where rows go: the fault-injecting HTTP endpoint (default), a local Kinesis "
        "emulator, or the local Elasticsearch emulator (both from a source checkout)",
    )
    add(
        "--rows",
        type=_positive,
        default=defaults.rows,
        help="rows to deliver, then stop (default %(default)s)",
    )
    add(
        "--throttle-rate",
        type=_rate,
        default=defaults.throttle_rate,
        help="fraction of requests throttled with 429/503 (default %(default)s)",
    )
    add(
        "--error-rate",
        type=_rate,
        default=defaults.error_rate,
        help="fraction of requests failed with 5xx (default %(default)s)",
    )
    add(
        "--partial-failure-rate",
        type=_rate,
        default=defaults.partial_failure_rate,
        help="fraction of entries failed inside accepted requests (default %(default)s)",
    )
    add(
        "--latency-ms",
        type=_non_negative,
        default=defaults.latency_ms,
        help="the endpoint's latency per request (default %(default)s)",
    )
    add("--no-kill", action="store_true", help="do not kill a task mid-partition")
    add("--no-progress", action="store_true", help="no progress bar")
    add(
        "--chart",
        type=Path,
        default=Path("asyncsink-demo.png"),
        help="draw a PNG chart of the run there (default %(default)s; needs matplotlib)",
    )
    add("--no-chart", action="store_true", help="draw no chart")


def run_from_args(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the demo as ``add_arguments`` parsed it; return the exit code."""
    out = out if out is not None else sys.stdout
    if args.throttle_rate + args.error_rate >= 1.0:
        print(
            "asyncsink demo: error: --throttle-rate and --error-rate add up to 1 or more "
            "(no request could be delivered)",
            file=sys.stderr,
        )
        return 2
    try:
        settings = DemoSettings(
            sink=args.sink,
            rows=args.rows,
            throttle_rate=args.throttle_rate,
            error_rate=args.error_rate,
            partial_failure_rate=args.partial_failure_rate,
            latency_ms=args.latency_ms,
            kill=not args.no_kill,
            progress=not args.no_progress,
            chart=None if args.no_chart else args.chart,
        )
    except ValueError as exc:
        print(f"asyncsink demo: error: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_demo(settings, out=out)
    except DemoUnavailable as exc:
        print(f"asyncsink demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("asyncsink demo: interrupted; everything it started was stopped", file=sys.stderr)
        return 130
    return report.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``asyncsink demo`` with ``argv`` (the arguments after ``demo``); the exit code."""
    parser = argparse.ArgumentParser(
        prog="asyncsink demo",
        description="Stream rows from a local Spark session to a local, fault-injecting "
        "destination, kill a task on the way, and check that every row arrived once.",
    )
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    return run_from_args(args)
