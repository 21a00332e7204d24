"""Run every benchmark, print one table of results, write a JSON summary and a chart.

    .venv/bin/python benchmarks/run_all.py [--quick] [--only http,spark,memory]

Each benchmark runs in its own process, one after the other, and prints its own details
as it goes; then one table gathers every comparison (asyncsink vs the code a user would
otherwise write, the ratio, the target and whether it was met), once as plain text and
once as a Markdown table ready to paste into the README. Results go to
``benchmarks/results/`` (not versioned): ``summary.json`` and ``chart.png``.
``--quick`` runs every benchmark at a small size (a smoke test of the benchmarks, not
figures to quote). The machine's load average is printed with the table: the benchmarks
share the machine's CPUs with whatever else runs. Exits 1, after a ``FAILED:`` line per
cause, when a benchmark failed or a target was missed; 0 only when every target was met.

Adding a benchmark: a script in this folder that takes ``--quick`` and ``--json PATH`` and
writes to PATH an object with ``benchmark``, ``title``, ``config``, ``results`` and
``comparisons``, a list of ``{"name", "unit", "asyncsink", "baseline", "ratio",
"target", "met"}`` (``baseline`` and ``ratio`` may be null for an absolute goal, such as
the memory one; ``target`` and ``met`` null for a row given for information; with
``"lower_is_better": true`` the target is a ceiling on the ratio, as for CPU per entry;
``sides.comparison`` builds such rows); then list it in ``BENCHMARKS``. A listed script
that does not exist yet is reported as skipped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str
    what: str
    args: tuple[str, ...] = ()


BENCHMARKS = (
    Benchmark(
        "http",
        "bench_http.py",
        "HTTP sink vs hand-written aiohttp and httpx+anyio loops and a requests loop",
    ),
    Benchmark(
        "spark-0ms",
        "bench_spark.py",
        "Spark event rows, 0 ms: asyncsink vs to_json + mapInArrow + aiohttp",
        ("--latency-ms", "0", "--sides", "asyncsink,source,durable,peer,peer_null"),
    ),
    Benchmark(
        "spark",
        "bench_spark.py",
        "Spark event rows, 20 ms: asyncsink vs the hand-written peer and requests loops",
    ),
    Benchmark(
        "spark-flat",
        "bench_spark.py",
        "Spark flat rows, 20 ms: asyncsink vs requests loops and null sinks",
        ("--schema", "flat"),
    ),
    Benchmark(
        "spark-sinks", "bench_spark_sinks.py", "Spark event rows to HTTP, Kinesis, Elasticsearch"
    ),
    Benchmark("memory", "bench_memory.py", "peak RSS, 1M vs 10M entries"),
    Benchmark(
        "spark-memory", "bench_spark_memory.py", "Python worker peak RSS, 1M vs 10M event rows"
    ),
    Benchmark("kinesis", "bench_kinesis.py", "Kinesis sink vs a boto3 put_records loop"),
    Benchmark(
        "elasticsearch",
        "bench_elasticsearch.py",
        "Elasticsearch sink vs elasticsearch.helpers.async_streaming_bulk",
    ),
)


def run_one(benchmark: Benchmark, quick: bool) -> dict[str, Any]:
    """Run one benchmark script (its output goes straight to ours); its JSON summary."""
    with tempfile.TemporaryDirectory(prefix="asyncsink-bench-") as tmp:
        out = Path(tmp) / f"{benchmark.name}.json"
        command = [sys.executable, str(HERE / benchmark.script), *benchmark.args]
        command += ["--json", str(out)]
        if quick:
            command.append("--quick")
        started = time.monotonic()
        done = subprocess.run(command, check=False)
        elapsed = time.monotonic() - started
        # A script may exit 1 after writing its results, for a target it missed.
        if done.returncode not in (0, 1) or not out.exists():
            raise RuntimeError(f"{benchmark.script} exited with status {done.returncode}")
        summary: dict[str, Any] = orjson.loads(out.read_bytes())
    summary["seconds"] = round(elapsed, 1)
    return summary


def _value(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MB" or abs(value) < 100:
        return f"{value:,.2f} {unit}" if abs(value) < 10 else f"{value:,.1f} {unit}"
    return f"{value:,.0f} {unit}"


def _ratio(row: dict[str, Any]) -> str:
    return "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"


def _target(row: dict[str, Any]) -> str:
    if row["target"] is None:
        return "-"
    if row["ratio"] is None:
        return f"< {row['target']:g} MB"
    return f"{'<=' if row.get('lower_is_better') else '>='} {row['target']:g}x"


def _met(row: dict[str, Any]) -> str:
    return {True: "yes", False: "NO", None: "info"}[row["met"]]


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def print_table(comparisons: list[dict[str, Any]]) -> None:
    print(f"\n{'comparison':<92}{'asyncsink':>18}{'baseline':>18}{'ratio':>10}{'target':>10}  met")
    for row in comparisons:
        print(
            f"{row['name']:<92}{_value(row['asyncsink'], row['unit']):>18}"
            f"{_value(row['baseline'], row['unit']):>18}{_ratio(row):>10}{_target(row):>10}  "
            f"{_met(row)}"
        )


def markdown_table(comparisons: list[dict[str, Any]]) -> str:
    lines = [
        "| comparison | asyncsink | baseline | ratio | target | met |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for row in comparisons:
        lines.append(
            f"| {row['name']} | {_value(row['asyncsink'], row['unit'])} | "
            f"{_value(row['baseline'], row['unit'])} | {_ratio(row)} | {_target(row)} | "
            f"{_met(row).lower()} |"
        )
    return "\n".join(lines)


def draw_chart(comparisons: list[dict[str, Any]], path: Path, caption: str) -> None:
    """Ratios against their targets (log scale), and absolute goals (memory) beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [row for row in comparisons if row["ratio"] is not None]
    goals = [row for row in comparisons if row["ratio"] is None]
    heights = [max(1.0, 0.45 * len(ratios) + 1.0), max(1.0, 0.45 * len(goals) + 1.0)]
    panels = [(ratios, heights[0])] + ([(goals, heights[1])] if goals else [])
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(11, sum(height for _, height in panels) + 1.0),
        gridspec_kw={"height_ratios": [height for _, height in panels]},
        squeeze=False,
    )
    good, bad = "#2e7d32", "#c62828"
    ax = axes[0][0]
    names = [row["name"] for row in ratios]
    values = [row["ratio"] for row in ratios]
    colors = [_color(row, good, bad) for row in ratios]
    ax.barh(names, values, color=colors)
    for index, row in enumerate(ratios):
        if row["target"] is not None:
            ax.plot([row["target"]] * 2, [index - 0.4, index + 0.4], color="black", lw=2)
        ax.annotate(
            f"{row['ratio']:.2f}x",
            (max(row["ratio"], row["target"] or 0), index),
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.invert_yaxis()
    ax.set_xlabel(
        "asyncsink / baseline (log scale): throughput, or CPU per entry where lower is "
        "better; black tick = target, grey = for information"
    )
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title(caption, fontsize=10)
    if goals:
        ax = axes[1][0]
        names = [row["name"] for row in goals]
        values = [row["asyncsink"] for row in goals]
        colors = [_color(row, good, bad) for row in goals]
        ax.barh(names, values, color=colors)
        for index, row in enumerate(goals):
            ax.plot([row["target"]] * 2, [index - 0.4, index + 0.4], color="black", lw=2)
            label = f"{row['asyncsink']:+.1f} {row['unit']}"
            ax.annotate(
                label,
                (max(row["asyncsink"], 0), index),
                xytext=(5, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.invert_yaxis()
        ax.set_xlim(min(0.0, *values) - 1, max(row["target"] for row in goals) * 1.2)
        ax.set_xlabel("MB; black tick = limit")
        ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _color(row: dict[str, Any], good: str, bad: str) -> str:
    return {True: good, False: bad, None: "#9e9e9e"}[row["met"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--results", type=Path, default=RESULTS, help="output folder")
    args = parser.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else None
    if wanted is not None:
        unknown = wanted - {b.name for b in BENCHMARKS}
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    machine = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"{machine['platform']}, Python {machine['python']}, {load_line()}", flush=True)
    summaries: dict[str, Any] = {}
    skipped: list[str] = []
    failed: dict[str, str] = {}
    started = time.monotonic()
    for benchmark in BENCHMARKS:
        if wanted is not None and benchmark.name not in wanted:
            continue
        if not (HERE / benchmark.script).exists():
            skipped.append(benchmark.name)
            continue
        print(f"\n=== {benchmark.name}: {benchmark.what}", flush=True)
        try:
            summaries[benchmark.name] = run_one(benchmark, args.quick)
        except RuntimeError as exc:
            failed[benchmark.name] = str(exc)
            print(f"!!! {benchmark.name} failed: {exc}", flush=True)
    comparisons = [
        {"benchmark": name, **row}
        for name, summary in summaries.items()
        for row in summary["comparisons"]
    ]
    when = dt.datetime.now(dt.UTC).replace(microsecond=0)
    caption = (
        f"asyncsink benchmarks{' (quick sizes)' if args.quick else ''}: "
        f"{machine['cpus']} CPUs, Python {machine['python']}, {when:%Y-%m-%d}"
    )
    print(f"\n=== summary: {caption}, {time.monotonic() - started:.0f} s, {load_line()}")
    print_table(comparisons)
    print("\nMarkdown:\n")
    print(markdown_table(comparisons))
    for name in skipped:
        script = next(b.script for b in BENCHMARKS if b.name == name)
        print(f"\nskipped {name}: benchmarks/{script} does not exist yet")
    missed = [row for row in comparisons if row["met"] is False]
    machine["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    summary = {
        "generated": when.isoformat(),
        "quick": args.quick,
        "machine": machine,
        "comparisons": comparisons,
        "benchmarks": summaries,
        "skipped": skipped,
        "failed": failed,
        "missed": [row["name"] for row in missed],
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if comparisons:
        draw_chart(comparisons, args.results / "chart.png", caption)
    chart = f" and {args.results / 'chart.png'}" if comparisons else ""
    print(f"\nwrote {args.results / 'summary.json'}{chart}")
    for name, reason in failed.items():
        print(f"FAILED: benchmark {name}: {reason}")
    for row in missed:
        got = _ratio(row) if row["ratio"] is not None else _value(row["asyncsink"], row["unit"])
        print(f"FAILED: target missed: {row['name']}: {got}, target {_target(row)}")
    if failed or missed:
        print(
            f"FAILED: {len(missed)} of {sum(row['met'] is not None for row in comparisons)} "
            f"targets missed, {len(failed)} benchmarks failed"
        )
        return 1
    print(f"every target met ({len(comparisons)} comparisons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
