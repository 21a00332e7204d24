"""A streaming job to an HTTP endpoint, with a bearer token and dead letters.

Run it: python examples/http_stream.py
It starts a local endpoint and a local Spark session, streams a folder of JSON files
to the endpoint, and writes rows too large to send to a dead-letter file.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from asyncsink.spark import foreach_batch


def run(spark: Any, url: str, token: str, workdir: Path) -> dict[int, Any]:
    """Stream ``workdir/in`` to ``url``; return each micro-batch's statistics."""
    events = spark.readStream.schema("id STRING, user STRING, note STRING").json(
        str(workdir / "in")
    )
    batches: dict[int, Any] = {}
    sink = foreach_batch(
        "http",
        {
            "url": url,
            "bearerToken": token,
            "maxRecordSizeInBytes": "1kb",  # larger rows are bad records
            "deadLetter": str(workdir / "dead-letters.jsonl"),
            "recordStore": f"sqlite://{workdir / 'records.db'}",  # one machine
        },
        sink_id="events-to-api",
        checkpoint_location=str(workdir / "checkpoint"),  # Spark Connect reads the query id there
        on_batch=lambda batch_id, stats: batches.update({batch_id: stats}),
    )
    query = (
        events.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return batches


def write_input(folder: Path, rows: int) -> None:
    """A file of ``rows`` events, one of them too large for the endpoint."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"id": f"e{i}", "user": f"u{i % 7}", "note": "ok"} for i in range(rows)]
    lines[3]["note"] = "x" * 5000
    (folder / "events.json").write_text("\n".join(json.dumps(line) for line in lines))


def main() -> int:
    from pyspark.sql import SparkSession

    from asyncsink.testing import FaultServer

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    workdir = Path(tempfile.mkdtemp())
    write_input(workdir / "in", 1000)
    with FaultServer(require_auth="Bearer s3cret") as server:
        batches = run(spark, server.ingest_url, "s3cret", workdir)
        print(sum(s.delivered for s in batches.values()), "rows delivered")
        print(server.stats().entries_received, "rows received by the endpoint")
    print((workdir / "dead-letters.jsonl").read_text().count("\n"), "dead letter(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
