"""The attributes of every data point: which sink, which job, which destination, and
where it was counted.

- ``asyncsink.sink.name``: the sink (``http``, ``kinesis``, ``elasticsearch``, or a
  custom writer's class name);
- ``asyncsink.sink.id``: the ``sinkId`` option, when set;
- ``asyncsink.destination.name``: host and path, a stream or an index, never a
  credential (``AsyncSinkWriter.destination_name``);
- ``asyncsink.report``: ``committed`` for figures the Spark driver records once Spark
  committed a micro-batch or job (each entry counted once), ``live`` for what a writer
  records as it runs (tasks Spark later retried included). Sum one of the two, never both;
- ``error.type`` (semantic conventions): on failed requests and their durations, reported
  live: ``timeout``, or the error's class name;
- ``asyncsink.dead_letter.cause``: on dead-lettered entries, why: ``bad_record``,
  ``rejected``, ``retries_exhausted`` or ``ordering``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..masking import MASK, mask_url

__all__ = ["COMMITTED", "LIVE", "Attributes", "sink_attributes"]

Attributes = Mapping[str, str]

COMMITTED = "committed"
LIVE = "live"

SINK = "asyncsink.sink.name"
SINK_ID = "asyncsink.sink.id"
DESTINATION = "asyncsink.destination.name"
REPORT = "asyncsink.report"
ERROR_TYPE = "error.type"
CAUSE = "asyncsink.dead_letter.cause"


def sink_attributes(sink: str, destination: str, sink_id: str | None) -> dict[str, str]:
    """The attributes naming a writer's sink, job and destination (the destination is
    masked once more: a name with a query or userinfo loses them)."""
    attributes = {SINK: sink, DESTINATION: _bare(destination)}
    if sink_id is not None:
        attributes[SINK_ID] = sink_id
    return attributes


def _bare(destination: str) -> str:
    """``destination`` without anything ``mask_url`` would mask: userinfo, query, fragment."""
    masked = mask_url(destination)
    if MASK not in masked:
        return masked
    head, _, rest = masked.rpartition(MASK + "@")
    return (head + rest).split("?", 1)[0].split("#", 1)[0].replace(MASK, "")
