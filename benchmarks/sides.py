"""What the side-by-side benchmarks share: their input, their rounds, their comparison
rows and their profiles.

- ``make_entries``: the same rows for every benchmark (~85 bytes of JSON each);
- ``rotating_rounds``: a warm-up run of each side, then rounds in rotating order, so that
  no side always runs first (or right after another);
- ``SideProcess``: one side in a process of its own, kept for all its rounds, which times
  each run itself and measures its CPU time (user + system) during the run: its own, and
  that of the processes it started (a Spark side's JVM and Python workers);
- ``comparison``: asyncsink against a baseline: the ratio of the medians, and the median,
  minimum and maximum of each round's ratio (its sides ran back to back) as a check on
  noise; a target is a floor for rates and a ceiling for costs (``lower_is_better``);
  ``print_comparisons`` prints such rows;
- ``spread`` and ``load_average``: a median with its minimum and maximum, and the machine's
  load, as the tables print them;
- ``process_cpu``, ``profile_cpu`` and ``print_profile``: CPU time, of another process
  (the endpoint) or of one profiled run, and where it goes.
"""

from __future__ import annotations

import cProfile
import gc
import multiprocessing
import os
import pstats
import resource
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import orjson

T = TypeVar("T")


def make_entries(count: int) -> list[dict[str, Any]]:
    """Entries of about 85 bytes of JSON each, with a unique ``id``."""
    return [
        {
            "id": f"e-{i:09d}",
            "seq": i,
            "customer": f"customer-{i % 9973:04d}",
            "amount": round((i * 37) % 100_000 / 100, 2),
            "ok": i % 7 != 0,
        }
        for i in range(count)
    ]


def make_wide_entries(count: int) -> list[dict[str, Any]]:
    """Entries of about 160 bytes of JSON each: ``make_entries`` with a region and a note."""
    entries = make_entries(count)
    for i, entry in enumerate(entries):
        entry["region"] = ("eu-west-1", "us-east-2", "ap-south-1")[i % 3]
        entry["note"] = f"order {i % 100_003} placed via web checkout, priority {i % 5}"
    return entries


def side_label(side: str, labels: Mapping[str, str]) -> str:
    """What a side is called: ``labels[side]``, or for ``fixedN`` asyncsink at N in flight."""
    if side.startswith("fixed"):
        return f"asyncsink, fixed {side[5:]} in flight"
    return labels[side]


def mean_json_size(entries: Sequence[Any]) -> float:
    """The mean size in bytes of the JSON of the first thousand entries."""
    sample = entries[:1000]
    return sum(len(orjson.dumps(entry)) for entry in sample) / max(1, len(sample))


def rotating_rounds(
    sides: Sequence[str], rounds: int, run: Callable[[str], T], warm: Callable[[str], Any]
) -> dict[str, list[T]]:
    """``warm`` each side once, then ``run`` every side ``rounds`` times, the order rotating
    by one side each round; each side's results, in round order."""
    for side in sides:
        warm(side)
    runs: dict[str, list[T]] = {side: [] for side in sides}
    for index in range(rounds):
        shift = index % len(sides)
        for side in [*sides[shift:], *sides[:shift]]:
            runs[side].append(run(side))
    return runs


@dataclass(frozen=True)
class SideRun:
    """One run of a side, as its own process measured it."""

    sent: int
    seconds: float  # wall clock
    cpu_seconds: float  # the side's process: user + system time
    details: Mapping[str, float] = field(default_factory=dict)  # the runner's own figures


Runner = Callable[..., int | tuple[int, Mapping[str, float]]]


class SideProcess:
    """A benchmark side in a process of its own, spawned once and kept for its rounds.

    ``runner(*args, *extra, entries)`` delivers ``entries`` and returns how many it
    delivered, or that and a mapping of figures of its own (``SideRun.details``, such as
    records re-sent); ``args`` are given here, ``extra`` to each ``run``. The runner must
    be importable by the spawned process (a module-level function of the script). The
    process builds its input itself (``inputs(count)``: by default ``make_entries``, the
    same for every side), times each run and takes its CPU time from
    ``resource.getrusage`` of its own process and its ended children, plus the CPU time
    of its live descendants (``descendants_cpu``: a Spark side's JVM and Python workers),
    so neither the parent, the endpoint nor another side is counted. A run that raises
    ends the process and raises ``RuntimeError`` here with the side's name and the error.
    """

    def __init__(
        self,
        name: str,
        runner: Runner,
        *args: Any,
        inputs: Callable[[int], Sequence[Any]] = make_entries,
    ) -> None:
        self.name = name
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_side_main,
            args=(runner, args, inputs, child),
            name=f"side-{name}",
            daemon=True,
        )
        self._process.start()
        child.close()

    def run(self, count: int, *extra: Any) -> SideRun:
        """Deliver the first ``count`` entries once, ``extra`` passed to the runner before
        them; what the side's process measured."""
        self._conn.send((count, extra))
        try:
            kind, *answer = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"{self.name}: the side's process died") from None
        if kind != "ok":
            raise RuntimeError(f"{self.name}: {answer[0]}")
        return SideRun(*answer)

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send(None)
            except OSError:
                pass
            self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        self._conn.close()

    def __enter__(self) -> SideProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _side_main(
    runner: Runner,
    args: tuple[Any, ...],
    inputs: Callable[[int], Sequence[Any]],
    conn: Connection,
) -> None:
    entries: Sequence[Any] = []
    try:
        while (message := conn.recv()) is not None:
            count, extra = message
            if len(entries) < count:
                entries = inputs(count)
            batch = entries[:count]
            gc.collect()
            # The /proc scans fall outside the span measured: before it, then after it.
            before = descendants_cpu(os.getpid()) + _tree_rusage()
            started = time.perf_counter()
            done = runner(*args, *extra, batch)
            seconds = time.perf_counter() - started
            cpu = _tree_rusage() + descendants_cpu(os.getpid()) - before
            sent, details = done if isinstance(done, tuple) else (done, {})
            conn.send(("ok", sent, seconds, cpu, dict(details)))
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def comparison(
    name: str,
    unit: str,
    ours: Sequence[float],
    theirs: Sequence[float],
    target: float | None,
    *,
    lower_is_better: bool = False,
) -> dict[str, Any]:
    """One row of ``run_all``'s table from each side's figure in every round.

    ``target`` is the least ratio asyncsink / baseline that meets it (a rate), or with
    ``lower_is_better`` the most (a cost, such as CPU per entry); ``None`` for a row
    given for information, which is neither met nor missed.
    """
    ratio = statistics.median(ours) / statistics.median(theirs)
    paired = [a / b for a, b in zip(ours, theirs, strict=True)]
    met = None if target is None else (ratio <= target if lower_is_better else ratio >= target)
    return {
        "name": name,
        "unit": unit,
        "asyncsink": _rounded(statistics.median(ours)),
        "baseline": _rounded(statistics.median(theirs)),
        "ratio": round(ratio, 3),
        "paired_ratio": round(statistics.median(paired), 3),
        "paired_min": round(min(paired), 3),
        "paired_max": round(max(paired), 3),
        "target": target,
        "lower_is_better": lower_is_better,
        "met": met,
    }


def print_comparisons(rows: Sequence[dict[str, Any]], width: int = 80) -> None:
    """``comparison`` rows as a table: the ratio of the medians, the median (min-max) of
    the rounds' ratios, the target and whether it was met."""
    header = f"{'ratio':>8}{'paired: median (min-max)':>26}{'target':>9}  met"
    print(f"\n{'comparison':<{width}}{header}")
    for row in rows:
        paired = f"{row['paired_ratio']:.2f}x ({row['paired_min']:.2f}-{row['paired_max']:.2f})"
        if row["target"] is None:
            target, verdict = "-", "(for information)"
        else:
            sign = "<=" if row["lower_is_better"] else ">="
            target, verdict = f"{sign}{row['target']:g}x", "yes" if row["met"] else "NO"
        print(f"{row['name']:<{width}}{row['ratio']:>7.2f}x{paired:>26}{target:>9}  {verdict}")


def _rounded(value: float) -> float:
    return round(value) if abs(value) >= 100 else round(value, 3)


def spread(values: Sequence[float], digits: int = 0) -> str:
    """``median (min-max)``, e.g. ``412,000 (398,100-420,300)``."""
    fmt = f",.{digits}f"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def spark_session(master: str, app: str = "asyncsink-bench") -> Any:
    """A quiet local Spark session whose Python workers run this interpreter, on the
    loopback address."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def load_average() -> str:
    """The machine's load average (1, 5 and 15 minutes) and its CPU count, for a table."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _tree_rusage() -> float:
    """CPU seconds of this process and of the children it saw end."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


def descendants_cpu(root: int) -> float:
    """CPU seconds used so far by the live descendants of process ``root``, with the
    children they saw end (Linux ``/proc``; 0 elsewhere)."""
    children: dict[int, list[int]] = defaultdict(list)
    ticks: dict[int, int] = {}
    try:
        entries = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return 0.0
    for name in entries:
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        pid = int(name)
        children[int(fields[1])].append(pid)
        ticks[pid] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    total, stack = 0, list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    """The CPU count and load average, for a benchmark's JSON summary."""
    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def process_cpu(pid: int | None) -> float:
    """CPU seconds used so far by process ``pid`` (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile_cpu(fn: Callable[..., Any], *args: Any) -> tuple[dict[Any, Any], float]:
    """Run ``fn(*args)`` under cProfile timed by CPU time (wall time, on a shared machine,
    charges other processes' turns to whichever call was running): the raw statistics
    and the total CPU seconds."""
    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(fn, *args)
    raw: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    return raw, sum(entry[2] for entry in raw.values()) or 1e-9


def print_profile(raw: dict[Any, Any], total: float) -> None:
    """Self time by file and by function, and the cumulative time of asyncsink's own
    functions, each with its share of ``total``."""
    by_file: dict[str, float] = defaultdict(float)
    for (filename, _, _), entry in raw.items():
        by_file[_short(filename)] += entry[2]
    print(f"{'self time by file':<58}{'s':>8}{'share':>8}")
    for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:15]:
        print(f"{name:<58}{seconds:>8.3f}{seconds / total:>8.1%}")
    print(f"{'self time by function':<58}{'s':>8}{'share':>8}{'calls':>10}")
    ranked = sorted(raw.items(), key=lambda kv: -kv[1][2])[:25]
    for (filename, _line, function), entry in ranked:
        where = f"{_short(filename)}:{function}"
        print(f"{where[:57]:<58}{entry[2]:>8.3f}{entry[2] / total:>8.1%}{entry[1]:>10,}")
    print(f"{'cumulative time of asyncsink and sinks functions':<58}{'s':>8}{'share':>8}")
    own = [
        (key, entry) for key, entry in raw.items() if "/asyncsink/" in key[0] or "/sinks/" in key[0]
    ]
    for (filename, _line, function), entry in sorted(own, key=lambda kv: -kv[1][3])[:20]:
        where = f"{_short(filename)}:{function}"
        print(f"{where[:57]:<58}{entry[3]:>8.3f}{entry[3] / total:>8.1%}")


def _short(filename: str) -> str:
    if filename.startswith("~") or filename.startswith("<"):
        return filename
    parts = Path(filename).parts
    for anchor in ("site-packages", "asyncsink", "sinks", "benchmarks"):
        if anchor in parts:
            index = len(parts) - 1 - parts[::-1].index(anchor)
            start = index + 1 if anchor == "site-packages" else index
            return "/".join(parts[start:])
    if "python3" in filename:
        return "stdlib/" + "/".join(parts[-2:])
    return "/".join(parts[-2:])


def write_summary(path: Path | None, summary: dict[str, Any]) -> None:
    """Write a benchmark's summary as JSON to ``path`` (if given), for ``run_all.py``."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))


def exit_on_missed(summary: dict[str, Any]) -> None:
    """Name every comparison whose target was missed, then exit 1 if any was, else 0."""
    missed = [row for row in summary["comparisons"] if row["met"] is False]
    for row in missed:
        print(f"TARGET MISSED: {row['name']}: {row['ratio']:.2f}x, target {row['target']:g}x")
    sys.exit(1 if missed else 0)
