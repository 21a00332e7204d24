"""What becomes of entries out of retries: the ``onRetriesExhausted`` option.

An entry the destination answered, item by item, with a retryable status (a 503 for that
entry, say) until it used all of ``maxRetries`` is *spent*. ``FailTask`` (``fail``, the
default) leaves it failed for good: the barrier raises a ``DeliveryError``, the task
fails and Spark retries it. ``DivertToDeadLetters`` (``deadLetter``) hands it to the
dead-letter target with its last error instead, and the task goes on; the dead letters'
own cap (``maxDeadLetters``) still fails a task that diverts too much.

Only entries the destination answered are ever diverted. Entries out of retries because
the destination as a whole failed (no answer, a refused connection, a timeout, a
retryable status of the whole request) fail the task under either setting: an outage
must not quietly turn a stream into dead letters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..options import SinkOptions
from .dead_letter import DeadLetters

__all__ = ["DivertToDeadLetters", "ExhaustedEntries", "FailTask", "exhausted_policy"]


class ExhaustedEntries(Protocol):
    """What a writer asks about entries the destination answered until they ran out of
    retries."""

    def spent(self, seqs: Sequence[int], entries: Sequence[Any], reason: str) -> dict[int, str]:
        """Entries ``seqs`` (with their ``entries``) are out of retries, for ``reason``:
        those settled elsewhere, by sequence number, with why; the others fail the task.

        Raises:
            BadRecordError, DeadLetterError: a record could not be settled elsewhere.
        """


class FailTask:
    """``onRetriesExhausted=fail``: entries out of retries fail the task."""

    def spent(self, seqs: Sequence[int], entries: Sequence[Any], reason: str) -> dict[int, str]:
        return {}

    def __repr__(self) -> str:
        return "FailTask()"


class DivertToDeadLetters:
    """``onRetriesExhausted=deadLetter``: entries out of retries go to ``dead_letters``,
    each with its last error."""

    def __init__(self, dead_letters: DeadLetters) -> None:
        self.dead_letters = dead_letters

    def spent(self, seqs: Sequence[int], entries: Sequence[Any], reason: str) -> dict[int, str]:
        settled: dict[int, str] = {}
        for seq, entry in zip(seqs, entries, strict=True):
            self.dead_letters.bad_record(seq, reason, entry=entry, cause="retries_exhausted")
            settled[seq] = reason
        return settled

    def __repr__(self) -> str:
        return f"DivertToDeadLetters({self.dead_letters.target!r})"


def exhausted_policy(options: SinkOptions, dead_letters: DeadLetters) -> ExhaustedEntries:
    """The policy ``onRetriesExhausted`` names."""
    if options.on_retries_exhausted == "deadLetter":
        return DivertToDeadLetters(dead_letters)
    return FailTask()
