"""The Spark jobs an entry point starts, tagged so that an interrupt cancels them.

A notebook's interrupt button raises ``KeyboardInterrupt`` in the cell, in the middle of
the Spark action that runs the write. The action's jobs do not stop by themselves: the
driver keeps scheduling tasks, and executors keep sending. ``cancelled_on_interrupt``
tags the jobs it starts, and on an interrupt cancels that tag and, in a classic session,
waits until the status tracker shows none of those jobs running.

Spark kills each running task: its Python worker is ended within
``spark.python.task.killTimeout`` (2 s by default), whatever its writer was doing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["cancelled_on_interrupt"]

log = logging.getLogger("asyncsink.spark")

STOP_WAIT_S = 60.0  # how long an interrupt waits for the cancelled jobs to end


@contextmanager
def cancelled_on_interrupt(session: Any, *, connect: bool, what: str) -> Iterator[str]:
    """Tag the Spark jobs this thread starts in the block; on ``KeyboardInterrupt``,
    cancel them and wait for them to end before the interrupt goes on. Yields the tag.

    ``connect`` says whether ``session`` is a Spark Connect session, which has no status
    tracker to wait on: there the interrupt returns once the server took the cancel.
    """
    tag = f"asyncsink-{uuid.uuid4().hex[:16]}"
    if connect:
        add, cancel, remove = session.addTag, session.interruptTag, session.removeTag
        tracker = None
    else:
        # SparkContext's job tags, not the session's: an interrupt breaks the thread's
        # py4j connection, and the session's tags cannot be cancelled from the next one.
        context = session.sparkContext
        add, cancel, remove = context.addJobTag, context.cancelJobsWithTag, context.removeJobTag
        tracker = context.statusTracker()
    before = set(tracker.getActiveJobsIds()) if tracker is not None else set()
    add(tag)
    try:
        yield tag
    except KeyboardInterrupt:
        log.warning("%s: interrupted; cancelling its Spark jobs", what)
        cancel(tag)
        if tracker is not None:
            _wait_for_jobs(tracker, before, what)
        raise
    finally:
        remove(tag)


def _wait_for_jobs(tracker: Any, before: set[int], what: str) -> None:
    """Wait until none of the jobs that started since ``before`` and ran at the interrupt
    runs any more, for up to ``STOP_WAIT_S``.

    PySpark's status tracker cannot be asked for a tag's jobs, so they are told by time:
    a job another thread started meanwhile is waited for too, which only makes the wait
    longer."""
    jobs = set(tracker.getActiveJobsIds()) - before
    deadline = time.monotonic() + STOP_WAIT_S
    while jobs:
        jobs = {job for job in jobs if _running(tracker, job)}
        if jobs and time.monotonic() > deadline:
            log.warning("%s: Spark jobs %s still run %g s after the cancel", what, sorted(jobs),
                        STOP_WAIT_S)  # fmt: skip
            return
        time.sleep(0.05 if jobs else 0)


def _running(tracker: Any, job: int) -> bool:
    info = tracker.getJobInfo(job)
    return info is not None and info.status == "RUNNING"
