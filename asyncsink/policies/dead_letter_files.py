"""Dead letters as files in a directory every executor reaches: ``deadLetter`` as a URL.

::

    deadLetter=s3://bucket/letters/orders        # or file://, gs://, abfss://, hdfs://
    spark.read.json("s3://bucket/letters/orders")  # one row per dead letter

A writer keeps its dead letters in memory (``maxDeadLetterBytes`` bounds them) and, at its
barrier, writes them as one JSON-lines file through pyarrow's file systems. The file is
*staged*: written under ``_pending/``, which Spark's file sources never read (they skip
names that start with ``_``), with the task attempt in its name. It is *published* by a
move to its final name, which names the scope only (sink, run, batch, partition). In
Spark the driver publishes, once Spark committed the batch or job, the files of the
attempts Spark took, and deletes the other attempts' files of the batch; a file whose
final name exists already (a replay of a published scope) is deleted, not published
again. A writer outside Spark publishes its own file at once.

Each line holds the record as the sink would send it (``record``, or ``record_base64``
when it is not UTF-8), why it is a dead letter (``cause``, ``error_type``, ``error``,
``status``), where it comes from (``sink``, ``sink_id``, ``run``, ``batch_id``,
``partition``, ``attempt``, ``position``) and when (``time``, UTC).
"""

from __future__ import annotations

import asyncio
import base64
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from ..masking import mask_url
from .dead_letter import DeadLetter

__all__ = [
    "DeadLetterFiles",
    "LetterScope",
    "StagedLetters",
    "directory_scheme",
    "discard",
    "publish",
]

# The URL schemes pyarrow's file systems open (``FileSystem.from_uri``).
SCHEMES = ("file", "s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")
PENDING = "_pending"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def directory_scheme(target: str) -> str | None:
    """The scheme of ``target`` when it is a URL (``s3`` of ``s3://b/p``), else ``None``
    (a plain file path)."""
    found = _SCHEME.match(target.strip())
    return found.group(1).lower() if found else None


@dataclass(frozen=True, slots=True)
class LetterScope:
    """Whose dead letters a file holds: one task attempt of a scope.

    ``run`` names the write (a stream's query id, a batch write's ``batchId`` run, or a
    fresh id); ``attempt`` is Spark's attempt number of the task.
    """

    sink: str
    sink_id: str | None
    run: str
    batch_id: int
    partition: int
    attempt: int

    @property
    def batch_prefix(self) -> str:
        """The start of the name of every file of this scope's batch, of any partition."""
        label = _UNSAFE.sub("_", self.sink_id or self.sink)
        return f"letters-{label}-{_UNSAFE.sub('_', self.run) or '-'}-b{self.batch_id}-p"

    @property
    def stem(self) -> str:
        return f"{self.batch_prefix}{self.partition}"

    def fields(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "sink_id": self.sink_id,
            "run": self.run,
            "batch_id": self.batch_id,
            "partition": self.partition,
            "attempt": self.attempt,
        }


@dataclass(frozen=True, slots=True)
class StagedLetters:
    """What a task attempt staged, for the driver to publish: ``files`` as ``(pending,
    final)`` names in the directory, and the ``batch_prefix`` of its batch's files."""

    url: str
    batch_prefix: str
    files: tuple[tuple[str, str], ...] = ()


class DeadLetterFiles:
    """A dead-letter target writing JSON-lines files into the directory ``url``.

    Calling it keeps a letter in memory; ``flush`` (the writer's barrier calls it) writes
    those kept as one staged file. With ``scope`` (a Spark task) the files stay staged for
    the driver to publish (``staged``); without it, a writer outside Spark, each is
    published at once under a name of its own.
    """

    def __init__(self, url: str, scope: LetterScope | None = None) -> None:
        self.url = url
        self.scope = scope
        self._own = f"letters-{uuid.uuid4().hex}" if scope is None else None
        self._fields = scope.fields() if scope is not None else {}
        self._lines: list[bytes] = []
        self._parts = 0
        self.files: list[tuple[str, str]] = []  # (pending, final) names written

    def __call__(self, letter: DeadLetter) -> None:
        self._lines.append(letter_line(letter, self._fields))

    async def flush(self) -> None:
        """Write the letters kept since the last flush as one file (none: no file).

        Raises:
            OSError: the directory cannot be written (pyarrow's error, the URL masked);
                the letters stay unsettled (the task fails).
        """
        lines, self._lines = self._lines, []
        if not lines:
            return
        try:
            await asyncio.to_thread(self._write, lines)
        except Exception as exc:
            # pyarrow may quote the URL, and with it credentials given in its query
            message = str(exc).replace(self.url, mask_url(self.url))
            raise OSError(f"{type(exc).__name__}: {message}") from None

    def staged(self) -> StagedLetters | None:
        """The files a Spark task staged, for the driver to publish."""
        if self.scope is None:
            return None
        return StagedLetters(self.url, self.scope.batch_prefix, tuple(self.files))

    def _write(self, lines: list[bytes]) -> None:
        stem = self.scope.stem if self.scope is not None else self._own
        final = f"{stem}-{self._parts}.json"
        attempt = self.scope.attempt if self.scope is not None else 0
        pending = f"{PENDING}/{stem}-{self._parts}.a{attempt}-{uuid.uuid4().hex[:12]}.json"
        fs, root = open_directory(self.url)
        fs.create_dir(f"{root}/{PENDING}", recursive=True)
        with fs.open_output_stream(f"{root}/{pending}") as out:
            out.write(b"\n".join(lines) + b"\n")
        self._parts += 1
        if self.scope is None:
            fs.move(f"{root}/{pending}", f"{root}/{final}")
        else:
            self.files.append((pending, final))

    def __repr__(self) -> str:
        return f"DeadLetterFiles({mask_url(self.url)!r})"


def letter_line(letter: DeadLetter, scope_fields: dict[str, Any]) -> bytes:
    """One dead letter as a JSON line of the files' format (see the module)."""
    try:
        record, encoded = letter.record.decode(), None
    except UnicodeDecodeError:
        record, encoded = None, base64.b64encode(letter.record).decode()
    line = {
        "record": record,
        "record_base64": encoded,
        "cause": letter.cause,
        "error_type": letter.error_type,
        "error": letter.reason,
        "status": letter.status,
        **scope_fields,
        "position": letter.position,
        "time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }
    return orjson.dumps(line)


def open_directory(url: str) -> tuple[Any, str]:
    """The pyarrow file system of ``url`` and the directory's path on it.

    Raises:
        ImportError: pyarrow is not installed (Spark's SQL extra brings it).
        ValueError, OSError: pyarrow cannot open the URL.
    """
    try:
        from pyarrow import fs
    except ImportError as exc:
        raise ImportError(
            "deadLetter as a directory URL needs pyarrow: pip install 'asyncsink[spark]' "
            "(or pyarrow)"
        ) from exc
    filesystem, path = fs.FileSystem.from_uri(url)
    return filesystem, path.rstrip("/")


def discard(url: str, batch_prefix: str) -> int:
    """Delete every staged file of the batch ``batch_prefix`` names (a write that failed
    and that nothing replays). Returns how many.

    Raises:
        OSError: the directory cannot be read or written.
    """
    from pyarrow import fs as pafs

    filesystem, root = open_directory(url)
    selector = pafs.FileSelector(f"{root}/{PENDING}", allow_not_found=True)
    deleted = 0
    for info in filesystem.get_file_info(selector):
        if info.is_file and info.base_name.startswith(batch_prefix):
            filesystem.delete_file(info.path)
            deleted += 1
    return deleted


def publish(staged: Iterable[StagedLetters]) -> tuple[int, int]:
    """On the driver, once Spark committed: move each attempt's staged files to their
    final names (a final name that exists already keeps its file, and the staged one is
    deleted), then delete every other staged file of the same batches: attempts Spark
    did not take. Returns the files published and the staged files deleted.

    Raises:
        OSError: the directory cannot be read or written (the staged files stay).
    """
    published = deleted = 0
    by_url: dict[str, list[StagedLetters]] = {}
    for letters in staged:
        by_url.setdefault(letters.url, []).append(letters)
    for url, of_url in by_url.items():
        from pyarrow import fs as pafs

        filesystem, root = open_directory(url)
        for letters in of_url:
            for pending, final in letters.files:
                if filesystem.get_file_info(f"{root}/{final}").type != pafs.FileType.NotFound:
                    filesystem.delete_file(f"{root}/{pending}")
                    deleted += 1
                    continue
                filesystem.move(f"{root}/{pending}", f"{root}/{final}")
                published += 1
        for prefix in {letters.batch_prefix for letters in of_url}:
            deleted += discard(url, prefix)
    return published, deleted
