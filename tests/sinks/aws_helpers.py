"""What the SQS, DynamoDB and Firehose sink tests share: botocore clients on moto's server,
the fault proxy in front of it, the options that reach it, and a writer run to its end
or killed part of the way (as a Spark task's Python worker dies)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import anyio
import botocore.session

from asyncsink import CallLog, Scope
from asyncsink.sinks import sink_factory
from asyncsink.stores.sqlite import SQLiteStore

REGION = "us-east-1"
KEYS = {"awsAccessKeyId": "AKIAAWSSINKTEST00001", "awsSecretAccessKey": "aws-sinks"}
FAST = {
    "initialBackoffMs": "5",
    "maxBackoffMs": "50",
    "requestTimeoutMs": "30s",
    "maxRetries": "30",
    "maxTimeInBufferMs": "50",
}


def boto(service: str, endpoint: str) -> Any:
    """A plain botocore client on ``endpoint``."""
    return botocore.session.get_session().create_client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=KEYS["awsAccessKeyId"],
        aws_secret_access_key="x",
    )


def options(endpoint: str, **own: str) -> dict[str, str]:
    return {"region": REGION, "endpointUrl": endpoint, **KEYS, **FAST, **own}


async def run_writer(
    sink: str,
    settings: Mapping[str, str],
    rows: list[dict[str, Any]],
    store: str,
    *,
    sink_id: str = "t",
) -> Any:
    """Write ``rows`` through sink ``sink`` with call records in ``store`` (SQLite), to the
    barrier; returns the writer's statistics."""
    call_log = CallLog(SQLiteStore(store), Scope(sink_id, 0, 0))
    writer = sink_factory(sink)(dict(settings), call_log=call_log)
    async with writer:
        await writer.write_all(rows)
    return writer.statistics()


def killed_run(
    sink: str,
    settings: Mapping[str, str],
    rows: list[dict[str, Any]],
    store: str,
    kill_after: int,
    *,
    sink_id: str = "t",
) -> None:
    """The same in a process of its own that dies (``os._exit``) once ``kill_after``
    answers came back, before the writer records the last, with requests in flight."""
    job = {
        "sink": sink,
        "settings": dict(settings),
        "rows": rows,
        "store": store,
        "kill_after": kill_after,
        "sink_id": sink_id,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.sinks.aws_helpers", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, f"the writer did not die as planned:\n{done.stderr[-3000:]}"


async def _die_after(job: dict[str, Any]) -> None:
    call_log = CallLog(SQLiteStore(job["store"]), Scope(job["sink_id"], 0, 0))
    writer = sink_factory(job["sink"])(job["settings"], call_log=call_log)
    submit, answered = writer.submit_request_entries, []

    async def submit_then_die(entries: list[Any]) -> Any:
        result = await submit(entries)
        answered.append(1)
        if len(answered) >= job["kill_after"]:
            os._exit(3)
        return result

    writer.submit_request_entries = submit_then_die  # type: ignore[method-assign]
    async with writer:
        await writer.write_all(job["rows"])


if __name__ == "__main__":
    anyio.run(_die_after, json.loads(sys.argv[1]))
