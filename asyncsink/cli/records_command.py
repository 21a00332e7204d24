"""``asyncsink records``: list, inspect and purge the durable call records in a store.

::

    asyncsink records list sqlite:///var/lib/asyncsink/calls.db --sink orders
    asyncsink records show sqlite:///var/lib/asyncsink/calls.db orders 42 3 --run q-7f3a
    asyncsink records purge sqlite:///var/lib/asyncsink/calls.db orders --older-than 7d
    asyncsink records list --run q-7f3a          # the default store, one run

Scopes belong to a run of their sink (a streaming query's id, a batch write's id); the
listing shows it, ``-`` for scopes without one. ``--run`` picks one run; ``--run -``
picks the scopes without a run.

Without a store URL the user's default store is used, the one a Spark job without a
``recordStore`` option writes: ``$XDG_STATE_HOME/asyncsink/records.db`` or
``~/.local/state/asyncsink/records.db``. ``show`` reads a scope without taking it, so it
never fences a running attempt. ``purge`` deletes scopes whatever their state;
``--dry-run`` lists what would go.

Exit codes: 0 done, 1 the store failed or the scope is unknown, 2 bad usage (arguments or
store URL).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..durable.blocking import run_blocking
from ..durable.calls import FN_PREFIX, decode_fn_record
from ..durable.completion import BATCH_KEY, SUMMARY_KEY, CompletedBatch, ScopeSummary
from ..durable.records import decode_record, load_json_object, to_ranges
from ..errors import DurableError
from ..masking import mask_url
from ..stores import RecordStore, Scope, ScopeInfo, default_store_url, open_store
from ..stores.sqlite import SQLiteStore
from ..stores.sqlite_file import is_foreign

__all__ = ["main", "parse_duration"]

_PROG = "asyncsink records"
_CALL_PREFIX = "call:"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_STORE_HELP = (
    "the record store's URL: sqlite:///abs/path.db, sqlite://relative.db, "
    "postgresql://USER@HOST/DBNAME or dynamodb://TABLE?region=REGION (default: your own "
    "default store, "
    "$XDG_STATE_HOME/asyncsink/records.db or ~/.local/state/asyncsink/records.db)"
)


def parse_duration(text: str) -> float:
    """``"30m"`` -> 1800.0: a number with a unit s, m, h, d or w, in seconds.

    Raises:
        ValueError: the text is not such a duration.
    """
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 90s, 30m, 12h, 7d or 2w")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run(text: str) -> str:
    run = "" if text == "-" else text
    try:
        Scope("sink", 0, 0, run)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return run


def _add_run(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--run", metavar="RUN", type=_run, help=f"{what} ('-' for the scopes without a run)"
    )


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Inspect and purge the durable call records asyncsink keeps per Spark "
        "task scope (sink, run, batch, partition).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser(
        "list",
        help="list the scopes in a store",
        description="List the scopes in a store: their run, epoch (attempts that took "
        "the scope), whether it completed, how many records it holds and when it was last "
        "written.",
    )
    listing.add_argument("store", metavar="STORE_URL", nargs="?", help=_STORE_HELP)
    listing.add_argument("--sink", metavar="ID", help="only the scopes of this sink id")
    _add_run(listing, "only the scopes of this run")

    show = commands.add_parser(
        "show",
        help="show the decoded records of one scope",
        description="Show the records of one scope: each request of the sink's call log "
        "(call id, status, entry ranges, acknowledged entries) and each durable call of "
        "user code. Records that cannot be decoded are shown with the reason. Reading "
        "does not take the scope, so a running attempt is not disturbed.",
    )
    show.add_argument("store", metavar="STORE_URL", nargs="?", help=_STORE_HELP)
    show.add_argument("sink", metavar="SINK_ID", help="the sink id (query or job name)")
    show.add_argument("batch", metavar="BATCH", type=_count, help="the batch id")
    show.add_argument("partition", metavar="PARTITION", type=_count, help="the partition id")
    show.add_argument(
        "--run", metavar="RUN", type=_run, default="", help="the run of the scope (default: none)"
    )

    purge = commands.add_parser(
        "purge",
        help="delete the scopes of a sink",
        description="Delete scopes of a sink with all their records, whatever their state. "
        "A purged scope is unknown afterwards: if Spark replayed its batch, its entries "
        "would be sent again, so keep the batches Spark may still replay.",
    )
    purge.add_argument("store", metavar="STORE_URL", nargs="?", help=_STORE_HELP)
    purge.add_argument("sink", metavar="SINK_ID", help="the sink id whose scopes to delete")
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--before-batch", metavar="N", type=_count, help="the scopes of batches below N"
    )
    which.add_argument(
        "--older-than",
        metavar="DURATION",
        type=_duration,
        help="the scopes not written for DURATION (like 30m, 12h, 7d)",
    )
    which.add_argument("--all", action="store_true", help="every scope of the sink (or run)")
    _add_run(purge, "only the scopes of this run (default: of every run)")
    purge.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted; delete nothing"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``asyncsink records`` with ``argv`` (the arguments after ``records``; default
    ``sys.argv[1:]``) and return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already reported by argparse
        return exc.code if isinstance(exc.code, int) else 2
    if args.store is None:
        try:
            args.store = default_store_url()
        except DurableError as exc:
            return _error(f"cannot open the default store: {exc}", 2)
    try:
        store = _open(args.store)
    except (ValueError, ImportError) as exc:
        return _error(f"cannot open the store: {exc}", 2)
    if isinstance(store, SQLiteStore):
        problem = _not_a_record_file(store.path)
        if problem:
            return _error(f"cannot open the store: {problem}", 2)
    command: Callable[[RecordStore, argparse.Namespace], Coroutine[Any, Any, int]] = {
        "list": _list,
        "show": _show,
        "purge": _purge,
    }[args.command]

    async def run() -> int:
        async with store:
            return await command(store, args)

    try:
        code = run_blocking(run, name=f"asyncsink records {args.command}")
        sys.stdout.flush()  # here, where a reader gone away can be told from a failure
    except (DurableError, ValueError) as exc:
        return _error(str(exc), 1)
    except BrokenPipeError:  # the reader went away (`| head`): what it read was shown
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
        os.close(devnull)
        return 0
    return code


def _open(url: str) -> RecordStore:
    """The store at ``url``, as the commands read it: a DynamoDB or PostgreSQL table that
    does not exist is an error, not created (a mistyped name would otherwise list no
    scopes), unless the URL says ``create_table`` itself.

    Raises:
        ValueError, ImportError: as ``open_store``.
    """
    scheme = url.partition("://")[0].lower()
    if scheme in _TABLE_STORES and "create_table=" not in url.lower():
        url += ("&" if "?" in url else "?") + "create_table=false"
    return open_store(url)


_TABLE_STORES = ("dynamodb", "postgresql", "postgres")


def _not_a_record_file(path: Path) -> str | None:
    """Why the file at ``path`` is no record store to read, or ``None``: it does not
    exist, or it is another program's SQLite database (opening it as a store would
    switch it to WAL and add the store's tables). Read without writing a byte."""
    if not path.is_file():
        return f"no SQLite file at {str(path)!r}"
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as conn:
            foreign = is_foreign(conn)
    except sqlite3.Error as exc:
        return f"{str(path)!r} cannot be read as SQLite: {exc}"
    if foreign:
        return f"{str(path)!r} is another program's SQLite database, not a record store"
    return None


def _error(message: str, code: int) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return code


# ---------------------------------------------------------------------- commands


async def _list(store: RecordStore, args: argparse.Namespace) -> int:
    scopes = [
        info
        for info in await store.scopes(args.sink)
        if args.run is None or info.scope.run == args.run
    ]
    if not scopes:
        print("no scopes" + _of(args.sink, args.run))
        return 0
    _print_scopes(scopes)
    return 0


def _of(sink: str | None, run: str | None) -> str:
    """`` of sink 'x', run 'y'``: what a listing or purge was limited to."""
    limits = [] if sink is None else [f"sink {sink!r}"]
    if run is not None:
        limits.append(f"run {run!r}" if run else "no run")
    return f" of {', '.join(limits)}" if limits else ""


def _print_scopes(scopes: Sequence[ScopeInfo]) -> None:
    rows = [
        [f"{info.scope.sink_id}/{info.scope.batch_id}/{info.scope.partition_id}",
         info.scope.run or "-", str(info.epoch), "yes" if info.completed else "no",
         str(info.record_count), _when(info.updated_at)]
        for info in scopes
    ]  # fmt: skip
    head = ["scope", "run", "epoch", "completed", "records", "updated (UTC)"]
    _table(head, rows, right={2, 4})


async def _show(store: RecordStore, args: argparse.Namespace) -> int:
    try:
        scope = Scope(args.sink, args.batch, args.partition, args.run)
    except ValueError as exc:
        return _error(str(exc), 2)
    state = await store.load(scope)
    if state is None:
        runs = sorted(
            info.scope.run or "-"
            for info in await store.scopes(args.sink)
            if (info.scope.batch_id, info.scope.partition_id) == (args.batch, args.partition)
        )
        held = (
            f"; batch {args.batch}, partition {args.partition} is held with --run " if runs else ""
        )
        where = mask_url(args.store)
        return _error(f"no scope {scope} in {where}{held}{' or '.join(runs)}", 1)
    status = "COMPLETED" if state.completed else "not completed"
    print(f"scope {scope}: epoch {state.epoch}, {status}, {len(state.records)} records")
    if not state.records:
        print("(no records" + (": dropped when the scope completed)" if state.completed else ")"))
        return 0
    calls, fns, other = [], [], []
    for key, data in sorted(state.records.items()):
        if key == SUMMARY_KEY:
            print(f"summary: {_summary(data)}")
        elif key == BATCH_KEY:
            print(f"batch: {_batch(data)}")
        elif key.startswith(_CALL_PREFIX):
            calls.append(_call_row(key, data))
        elif key.startswith(FN_PREFIX):
            fns.append(_fn_row(key, data))
        else:
            other.append([key, _printable(data)])
    if calls:
        print("\nsink requests:")
        head = ["call", "status", "entries", "count", "acked", "rejected", "detail"]
        _table(head, calls, right={0, 3, 4, 5}, indent=2)
    if fns:
        print("\ndurable calls:")
        _table(["call", "status", "function", "detail"], fns, right={0}, indent=2)
    if other:
        print("\nother records:")
        _table(["key", "value"], other, indent=2)
    return 0


def _summary(data: bytes) -> str:
    """What a completed scope keeps: how many entries it was given, and by whom."""
    try:
        entries, digest = ScopeSummary.decode(data)
        by = load_json_object(data).get("completed_by")
    except ValueError as exc:
        return f"CORRUPT, cannot be decoded: {_clip(str(exc))}"
    return f"{entries} entries, digest {digest}" + (f", completed by {by}" if by else "")


def _batch(data: bytes) -> str:
    """What partition 0's scope keeps of its completed batch."""
    try:
        partitions = CompletedBatch.decode(data).partitions
    except ValueError as exc:
        return f"CORRUPT, cannot be decoded: {_clip(str(exc))}"
    return f"completed with {partitions} partition{'s' if partitions != 1 else ''}"


def _call_row(key: str, data: bytes) -> list[str]:
    number = key[len(_CALL_PREFIX) :].lstrip("0") or "0"
    try:
        record = decode_record(data)
    except ValueError as exc:
        return [number, "CORRUPT", "", "", "", "", f"cannot be decoded: {exc}"]
    detail = record.error or ""
    if record.status == "SUCCEEDED" and len(record.acked) < len(record.seqs):
        detail = detail or f"{len(record.seqs) - len(record.acked)} to retry"
    return [
        str(record.call_id), record.status, _ranges(record.seqs), str(len(record.seqs)),
        str(len(record.acked)), str(len(record.rejected)), _clip(detail),
    ]  # fmt: skip


def _fn_row(key: str, data: bytes) -> list[str]:
    number = key[len(FN_PREFIX) :].lstrip("0") or "0"
    try:
        record = decode_fn_record(data)
    except ValueError as exc:
        return [number, "CORRUPT", "", f"cannot be decoded: {exc}"]
    detail = ""
    if record.error is not None:
        detail = f"{record.error.get('type')}: {record.error.get('message', '')}"
    return [str(record.index), record.status, record.function, _clip(detail)]


def _ranges(seqs: Sequence[int], shown: int = 4) -> str:
    ranges = to_ranges(seqs)
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:shown])
    return text + (f" (+{len(ranges) - shown} ranges)" if len(ranges) > shown else "")


def _printable(data: bytes) -> str:
    try:
        return _clip(orjson.dumps(orjson.loads(data)).decode())
    except orjson.JSONDecodeError:
        return f"<{len(data)} bytes>"


async def _purge(store: RecordStore, args: argparse.Namespace) -> int:
    before, older, run = args.before_batch, args.older_than, args.run
    if args.dry_run:
        cutoff = None if older is None else time.time() - older
        doomed = [
            info
            for info in await store.scopes(args.sink)
            if (run is None or info.scope.run == run)
            and (before is None or info.scope.batch_id < before)
            and (cutoff is None or info.updated_at < cutoff)
        ]
        if doomed:
            _print_scopes(doomed)
        print(f"would purge {len(doomed)} scopes{_of(args.sink, run)} (dry run)")
        return 0
    count = await store.purge(args.sink, run=run, before_batch=before, older_than_s=older)
    print(f"purged {count} scopes{_of(args.sink, run)}")
    return 0


# ---------------------------------------------------------------------- output


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clip(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(
    head: list[str], rows: list[list[str]], *, right: Collection[int] = (), indent: int = 0
) -> None:
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print(" " * indent + "  ".join(cells).rstrip())
