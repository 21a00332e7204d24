"""Dead letters of a Spark write kept in a directory (``deadLetter`` as a URL).

Each task attempt stages the file of its own letters (``task_letters``), and returns
what it staged to the driver with its result. Once Spark committed the batch or job,
the driver publishes the files of the attempts Spark took, and deletes the rest of the
batch's staged files (``publish_letters``): attempts that failed after their barrier,
and speculative copies. A write that failed, and that nothing will replay, has its
staged files deleted (``discard_letters``). See ``asyncsink.policies.dead_letter_files``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..masking import mask_url
from ..policies.dead_letter_files import (
    DeadLetterFiles,
    LetterScope,
    StagedLetters,
    discard,
    publish,
)
from .spec import SinkSpec

__all__ = ["discard_letters", "publish_letters", "task_letters"]

log = logging.getLogger("asyncsink.spark")


def task_letters(spec: SinkSpec, run: str, batch_id: int) -> DeadLetterFiles | None:
    """The dead-letter target of the running task attempt, or ``None`` when
    ``deadLetter`` is not a directory URL."""
    url = spec.dead_letter_directory
    if url is None:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    scope = LetterScope(spec.sink, spec.durable.sink_id, run, batch_id, partition, attempt)
    return DeadLetterFiles(url, scope)


def publish_letters(letters: Iterable[StagedLetters | None]) -> None:
    """Spark committed the tasks that staged ``letters``: publish them.

    Raises:
        OSError: the directory cannot be written (the staged files stay, and a replay of
            the batch publishes its own).
    """
    staged = [one for one in letters if one is not None]
    if not staged:
        return
    url = staged[0].url
    try:
        published, deleted = publish(staged)
    except Exception as exc:  # pyarrow may quote the URL, credentials in its query too
        message = str(exc).replace(url, mask_url(url))
        raise OSError(
            f"publishing the dead letters in {mask_url(url)} failed: "
            f"{type(exc).__name__}: {message}; they stay staged, and a replay of the "
            "batch publishes its own"
        ) from None
    log.info(
        "dead letters in %s: %d files published, %d staged files of other attempts deleted",
        mask_url(url),
        published,
        deleted,
    )


def discard_letters(spec: SinkSpec, run: str, batch_id: int) -> None:
    """A write that nothing will replay failed: delete its staged dead letters. Best
    effort: a failure is logged (staged files are never read by Spark)."""
    url = spec.dead_letter_directory
    if url is None:
        return
    prefix = LetterScope(spec.sink, spec.durable.sink_id, run, batch_id, 0, 0).batch_prefix
    try:
        discard(url, prefix)
    except Exception as exc:
        log.warning("the staged dead letters of a failed write could not be deleted: %s", exc)
