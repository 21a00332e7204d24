"""Client instructions per entry, counted by valgrind: figures that noise cannot move.

Wall-clock and CPU-time ratios move from run to run on a shared machine (its speed
drifts within minutes); the instructions one run executes do not: the same run counts
the same to about 0.1%, whatever else the machine does. This benchmark counts them for
the HTTP sides of ``bench_http.py`` (asyncsink with its defaults, asyncsink with durable
records on SQLite, the hand-written aiohttp loop) against the fault-injecting endpoint at
0 ms, in a process of its own and not counted, and prints each side's instructions per
entry and its ratio to the aiohttp loop: the way to judge a change to the request path.

Each side runs in a process of its own under ``valgrind --tool=callgrind``: two warm-up
runs, then the run counted. Counting is on only inside that run: it runs inside one call
of ``math.fsum`` (a C function nothing in the run calls), and callgrind counts only
inside it (``--toggle-collect=math_fsum``), so imports, warm-up and start-up are left
out. Under valgrind the client runs about fifty times slower than it would, so the
endpoint always answers at once: the count is of the client's work, not of its waits.

    .venv/bin/python benchmarks/bench_instructions.py [--entries N]
        [--sides asyncsink,durable,aiohttp] [--json PATH]

Needs valgrind (Debian: ``apt-get install valgrind``). Takes about 30 s a side for the
default 50,000 entries.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sides import load_average, machine, make_entries, write_summary

from asyncsink.testing import Faults, FaultServer

SIDES = ("asyncsink", "durable", "aiohttp")
BASELINE = "aiohttp"
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def counted_run(side: str, url: str, entries: int) -> None:
    """In the child: two warm-up runs of ``side``, then one inside ``math.fsum``."""
    import bench_http

    run = bench_http.RUNNERS[side]
    rows = make_entries(entries)
    for _ in range(2):
        run(url, rows)
    delivered = math.fsum(run(url, rows) for _ in range(1))
    if delivered != entries:
        raise SystemExit(f"{side}: delivered {delivered:,.0f} of {entries:,} entries")


def count(side: str, server: FaultServer, entries: int) -> int:
    """The instructions of one counted run of ``side``, in a child under callgrind."""
    with tempfile.TemporaryDirectory(prefix="asyncsink-callgrind-") as folder:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=math_fsum",
            f"--callgrind-out-file={Path(folder) / 'out'}",
            sys.executable,
            __file__,
            "--child",
            side,
            server.ingest_url,
            str(entries),
        ]
        server.reset()
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{side}: the counted run failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000, help="entries per run")
    parser.add_argument("--sides", default=",".join(SIDES), help="sides to count")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, url, entries = args.child
        counted_run(side, url, int(entries))
        return {}
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    sides = [side for side in args.sides.split(",") if side]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        raise SystemExit(f"unknown sides {unknown}: choose from {', '.join(SIDES)}")
    print(
        f"{args.entries:,} entries, 0 ms endpoint, client instructions of one run counted "
        f"by callgrind; {load_average()} (a count does not depend on it)",
        flush=True,
    )
    counts: dict[str, int] = {}
    with FaultServer(keep_ids=False) as server:
        server.set_faults(Faults(latency_ms=0))
        for side in sides:
            counts[side] = count(side, server, args.entries)
            print(f"  {side:<10} {counts[side]:>15,} instructions", flush=True)
    print(f"\n{'side':<12}{'instructions/entry':>20}{'vs ' + BASELINE:>14}")
    base = counts.get(BASELINE)
    for side, total in counts.items():
        ratio = f"{total / base:.2f}x" if base else "-"
        print(f"{side:<12}{total / args.entries:>20,.0f}{ratio:>14}")
    summary = {
        "benchmark": "instructions",
        "title": "Client instructions per entry at 0 ms, counted by callgrind",
        "config": {"entries": args.entries, **machine()},
        "results": {side: {"instructions": total} for side, total in counts.items()},
        "comparisons": [],
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
