"""The demo's run: destination, Spark session, streaming query, report."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from ..stats import WriterStatistics
from .chart import BatchPoint, write_chart
from .destinations import DemoUnavailable, Destination, destination_for
from .events import event_columns
from .settings import DemoReport, DemoSettings, KillInfo, plural
from .writer import KILL_AT_OPTION, KILL_MARKER_OPTION, SINK_OPTION

__all__ = ["run_demo"]

SINK_ID = "asyncsink-demo"


class _Batches:
    """The ``foreachBatch`` function: delivers each micro-batch until ``rows`` are in.

    Batches after the last row are left alone (the source keeps producing empty ones);
    the early batch chosen for the kill runs with the kill options.
    """

    def __init__(
        self,
        settings: DemoSettings,
        options: dict[str, str],
        marker: Path,
        out: TextIO,
    ) -> None:
        from ..spark import foreach_batch

        self.settings = settings
        self.marker = marker
        self.out = out
        self.total = WriterStatistics()
        self.rows_done = 0
        self.batches = 0
        self.last_batch: int | None = None
        self.done_at: float | None = None
        self.kill_batch: int | None = None
        self.done = threading.Event()
        self.points: list[BatchPoint] = []  # for the chart
        self.started = time.monotonic()
        self._batch_started = self.started
        self._lock = threading.Lock()
        factory = "asyncsink.demo:create_demo_writer"
        self.sink = foreach_batch(factory, options, sink_id=SINK_ID, on_batch=self._on_batch)
        killing = {**options, KILL_AT_OPTION: str(settings.kill_at_request),
                   KILL_MARKER_OPTION: str(marker)}  # fmt: skip
        self.killing_sink = foreach_batch(
            factory, killing, sink_id=SINK_ID, on_batch=self._on_batch
        )
        self.bar: Any = None
        self._shown = 0

    def start_progress(self) -> None:
        """Show a progress bar on a terminal (else one line per micro-batch)."""
        if not self.settings.progress or not self.out.isatty():
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        try:
            columns = os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError):
            columns = 0
        sizing: dict[str, Any] = {"dynamic_ncols": True} if columns else {"ncols": 80}
        self.bar = tqdm(total=self.settings.rows, unit="rows", unit_scale=True, file=self.out,
                        desc="delivered", **sizing)  # fmt: skip

    def show(self, live: int | None) -> None:
        """Move the bar to what the destination holds now (between micro-batches)."""
        with self._lock:
            self._advance(max(self.rows_done, min(live or 0, self.settings.rows)))

    def _advance(self, rows: int) -> None:
        if self.bar is not None and rows > self._shown:
            self.bar.update(rows - self._shown)
            self._shown = rows

    def __call__(self, df: Any, batch_id: int) -> None:
        self._batch_started = time.monotonic()
        if self.done.is_set():
            return
        kill_due = (
            self.settings.kill
            and not self.marker.exists()
            and (self.batches >= 1 or self.settings.rows <= self.settings.rows_per_batch)
        )
        if kill_due:
            self.kill_batch = batch_id
            self.killing_sink(df, batch_id)
        else:
            self.sink(df, batch_id)

    def _on_batch(self, batch_id: int, stats: WriterStatistics) -> None:
        rows = stats.delivered + stats.skipped + stats.dead_lettered
        now = time.monotonic()
        with self._lock:
            if rows:
                seconds = now - self._batch_started
                killed = self.kill_batch == batch_id and self.marker.exists()
                self.points.append(BatchPoint.of(stats, end_s=now - self.started,
                                                 seconds=seconds, killed=killed))  # fmt: skip
            self.total += stats
            self.rows_done += rows
            if rows:
                self.batches += 1
            if self.kill_batch == batch_id and self.marker.exists():
                self._say(
                    f"batch {batch_id}: a task was killed mid-partition; Spark ran it again, "
                    f"and the retry skipped {plural(stats.skipped, 'entry', 'entries')} already "
                    f"delivered, settled {plural(stats.reconciled, 'call')} left pending by "
                    f"looking them up and re-sent {stats.resent_calls:,}"
                )
            if self.bar is not None:
                self._advance(self.rows_done)
            elif self.settings.progress and rows:
                self._say(f"batch {batch_id}: {self.rows_done:,} of {self.settings.rows:,} rows")
            if self.rows_done >= self.settings.rows:
                self.last_batch = batch_id
                self.done_at = time.monotonic()
                self.done.set()

    def _say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.out)
        else:
            print(text, file=self.out, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _start_spark(workdir: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = workdir / "log4j2.properties"
    log4j.write_text(
        # warn, the level Spark gives an interactive driver, so that it does not announce it
        "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
        "logger.hadoop.name = org.apache.hadoop\nlogger.hadoop.level = error\n"
        # the killed task is expected: its stack traces would only hide the report
        "logger.executor.name = org.apache.spark.executor.Executor\n"
        "logger.executor.level = off\n"
        "logger.tasks.name = org.apache.spark.scheduler.TaskSetManager\n"
        "logger.tasks.level = off\n"
    )
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")  # task retries need local[N,F]
        .appName("asyncsink-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _read_kill(marker: Path, batch_id: int | None) -> KillInfo | None:
    try:
        data = orjson.loads(marker.read_bytes())
    except FileNotFoundError:
        return None
    return KillInfo(
        batch_id, int(data["partition"]), int(data["attempt"]), int(data["acked"]),
        int(data["in_flight"]),
    )  # fmt: skip


def run_demo(settings: DemoSettings, *, spark: Any = None, out: TextIO | None = None) -> DemoReport:
    """Run the demo and return its report (also printed to ``out``, default stdout).

    ``spark``: an existing SparkSession to run on (left running); it needs ``local[N,F]``
    or a cluster for the killed task to be retried. Without one, a local session is
    started and stopped.

    Raises:
        DemoUnavailable: the sink or its local destination cannot run here.
    """
    out = out if out is not None else sys.stdout
    started = time.monotonic()
    if spark is None and importlib.util.find_spec("pyspark") is None:
        raise DemoUnavailable('the demo needs PySpark: pip install "asyncsink[spark]"')
    destination = destination_for(settings.sink)
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="asyncsink-demo-")))
        print(f"Starting {destination.description}...", file=out, flush=True)
        stack.callback(destination.stop)
        destination.start(settings, workdir)
        if spark is None:
            print("Starting a local Spark session (local[2,3])...", file=out, flush=True)
            spark = _start_spark(workdir)
            stack.callback(spark.stop)
        report = _stream(settings, spark, destination, workdir, out, stack)
    report = replace(report, wall_s=time.monotonic() - started)
    print(report.render(), file=out, flush=True)
    return report


def _stream(
    settings: DemoSettings,
    spark: Any,
    destination: Destination,
    workdir: Path,
    out: TextIO,
    stack: contextlib.ExitStack,
) -> DemoReport:
    options = {
        **destination.sink_options(),
        SINK_OPTION: destination.name,
        "recordStore": f"sqlite:///{workdir / 'records.db'}",
        "maxBatchSize": str(settings.max_batch_size),
        "maxInFlightRequests": str(settings.max_in_flight),
        "initialBackoffMs": "20",
        "maxBackoffMs": "1000",
        "requestTimeoutMs": "10s",
    }
    marker = workdir / "killed.json"
    batches = _Batches(settings, options, marker, out)
    stack.callback(batches.close)
    source = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", settings.rows_per_batch)
        .option("numPartitions", settings.partitions)
        .load()
        .where(f"value < {settings.rows}")
        .selectExpr("concat('r', value) AS id", "value", *event_columns("value"))
    )
    print(streaming_line(settings), file=out, flush=True)
    query = (
        source.writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .start()
    )
    stream_start = batches.started = time.monotonic()
    stack.callback(_stop_query, query)
    batches.start_progress()
    error = _wait(query, batches, destination, settings.timeout_s)
    streaming_s = (batches.done_at or time.monotonic()) - stream_start
    _stop_query(query)
    batches.close()
    delivery = destination.check(settings.rows)
    if settings.chart is not None:
        print(write_chart(batches.points, settings.chart), file=out, flush=True)
    return DemoReport(
        sink=destination.name,
        rows=settings.rows,
        batches=batches.batches,
        writers=batches.total,
        stored=delivery.stored,
        duplicates=delivery.duplicates,
        lost=delivery.lost,
        unexpected=delivery.unexpected,
        idempotent=destination.idempotent,
        guarantee=destination.guarantee,
        settled_by=destination.settled_by,
        resent_as=destination.resent_as,
        kill=_read_kill(marker, batches.kill_batch),
        kill_requested=settings.kill,
        destination_lines=delivery.lines,
        streaming_s=streaming_s,
        error=error,
    )


def streaming_line(settings: DemoSettings) -> str:
    """What the demo says as the query starts. The call records live in the demo's
    temporary folder, deleted on the way out, so no path is shown for them."""
    kill = "killing one task once, " if settings.kill else ""
    return (
        f"Streaming {settings.rows:,} rows ({settings.rows_per_batch:,} per micro-batch, "
        f"{kill}durable call records in a temporary SQLite file, deleted at the end)..."
    )


def _wait(query: Any, batches: _Batches, destination: Destination, timeout_s: float) -> str | None:
    """Wait until every row is delivered and its batch committed; the error if not."""
    deadline = time.monotonic() + timeout_s
    while not batches.done.wait(0.25):
        batches.show(destination.live_count())
        if not query.isActive:
            failure = query.exception()
            return f"the streaming query stopped: {failure}" if failure else "the query stopped"
        if time.monotonic() > deadline:
            return f"the rows were not delivered within {timeout_s:g} s"
    while time.monotonic() < deadline:  # the batch's offsets are committed after it ran
        progress = query.lastProgress
        if progress is not None and progress.get("batchId", -1) >= (batches.last_batch or 0):
            break
        if not query.isActive:
            break
        time.sleep(0.1)
    return None


def _stop_query(query: Any) -> None:
    if query.isActive:
        query.stop()
