"""What the side-by-side benchmarks share: their input, their rounds, their comparison
rows and their profiles.

- ``make_entries``: the same rows for every benchmark (~85 bytes of JSON each);
- ``rotating_rounds``: a warm-up run of each side, then rounds in rotating order, so that
  no side always runs first (or right after another);
- ``comparison``: asyncsink against a baseline: the ratio of the medians, and the median
  of each round's ratio (its sides ran back to back) as a check on noise;
- ``process_cpu``, ``profile_cpu`` and ``print_profile``: CPU time, of another process
  (the endpoint) or of one profiled run, and where it goes.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
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


def comparison(
    name: str, unit: str, ours: Sequence[float], theirs: Sequence[float], target: float
) -> dict[str, Any]:
    """One row of ``run_all``'s table from each side's rate in every round."""
    ratio = statistics.median(ours) / statistics.median(theirs)
    paired = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return {
        "name": name,
        "unit": unit,
        "asyncsink": round(statistics.median(ours)),
        "baseline": round(statistics.median(theirs)),
        "ratio": round(ratio, 3),
        "paired_ratio": round(paired, 3),
        "target": target,
        "met": ratio >= target,
    }


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
