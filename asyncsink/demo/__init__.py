"""``python -m asyncsink demo``: a streaming job that loses a task and still delivers every
row once (HTTP with idempotency keys, Elasticsearch with derived document ids, Kinesis by
reading the shards before anything is re-sent).

The demo starts a local Spark session (``local[2,3]``, so a failed task is retried), a
local destination that injects faults (the fault server for ``http``: latency, throttling,
5xx answers and per-entry failures), and a streaming query: a ``rate-micro-batch`` source,
a deterministic projection to the rows of an event table (an id, a timestamp, a date, a
struct, an array, a map, a decimal...; ``demo.events``) and ``foreach_batch`` with
durable call records in a temporary SQLite file. In one early micro-batch the first
attempt of partition 0 kills its own Python worker (``os._exit``) just after one of its
requests was answered, before the answer is recorded: the destination holds that
request's rows while its call record still says PENDING; earlier requests were answered
(the last of them perhaps not recorded yet), others may be in flight. Spark runs the task
again; the retry skips what the call records say was delivered and re-sends the calls
left pending, unchanged and with their idempotency keys, so the endpoint answers those it
already applied from its idempotency store. Kinesis takes
no idempotency key: the retry reads the shards the pending calls' records map to and sends
only what the stream does not hold; the report says how many calls were settled that way.

When the query has delivered ``--rows`` rows it is stopped, and the demo reads back what
the destination holds and prints a report: rows, requests, retries, entries skipped,
duplicates and lost rows (both must be 0), throughput. The exit code is 0 when nothing was
lost and nothing was stored twice, 1 otherwise, 2 for bad usage or a destination that
cannot run here, 130 when interrupted. Everything started (query, Spark, destination) is
stopped on the way out.

``create_demo_writer`` is the writer factory the query runs (``asyncsink.demo:
create_demo_writer``); ``run_demo`` runs the demo from Python, optionally on an existing
SparkSession (which is then left running).
"""

from .cli import add_arguments, main, run_from_args
from .destinations import DemoUnavailable
from .run import run_demo
from .settings import DemoReport, DemoSettings, KillInfo
from .writer import create_demo_writer

__all__ = [
    "DemoReport",
    "DemoSettings",
    "DemoUnavailable",
    "KillInfo",
    "add_arguments",
    "create_demo_writer",
    "main",
    "run_demo",
    "run_from_args",
]
