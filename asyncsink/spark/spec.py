"""What a Spark task needs to build its writer: a picklable recipe, checked on the driver.

A ``SinkSpec`` names the writer (a sink such as ``"http"``, or ``"module:Class"`` for a
custom ``AsyncSinkWriter``), carries its options as Spark strings and the durable options
that say where call records live. It is built and validated on the driver, so a bad
option fails the query before any task starts, and it is shipped to the executors, which
build a fresh writer from it for each partition.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..durable.blocking import run_blocking
from ..durable.recorder import CallRecorder
from ..encoding import JsonContract
from ..errors import DurableError, OptionError
from ..masking import mask_url
from ..options import Options, SinkOptions, option, option_specs, parse_options, raise_unknown
from ..plugins.sinks import SinkEntry, sink_entry
from ..policies.dead_letter_files import directory_scheme
from ..stores import check_store_url, default_store_url, open_store
from ..stores.urls import parse_sqlite_url
from ..writer import AsyncSinkWriter

__all__ = ["DurableOptions", "SinkSpec", "is_local_master", "master_of", "store_for_spark"]

log = logging.getLogger("asyncsink")

VERIFY_TIMEOUT_S = 120.0  # checking the record store on the driver, before any task


@dataclass(frozen=True, kw_only=True, repr=False)
class DurableOptions(Options):
    """Options of the Spark integration itself: identity and call records."""

    def __post_init__(self) -> None:
        super().__post_init__()
        sink_id = self.sink_id
        if sink_id is not None and (not sink_id.strip() or "/" in sink_id):
            raise OptionError("sinkId", sink_id, "a name that is not blank and holds no '/'")
        if self.batch_id is not None and sink_id is None:
            raise OptionError(
                "batchId",
                self.batch_id,
                "",
                message=f"option 'batchId' ({self.batch_id}) names a run of call records, "
                "which only a write with a sinkId keeps: set sinkId too, or leave batchId out",
            )
        if self.record_store is not None:
            if sink_id is None:
                raise OptionError(
                    "recordStore",
                    "",
                    "",
                    message="option 'recordStore' says where call records live, which only "
                    "a write with a sinkId keeps: set sinkId too, or leave recordStore out",
                )
            try:
                check_store_url(self.record_store)
            except ValueError as exc:
                message = f"option 'recordStore': {exc}"
                raise OptionError("recordStore", "", str(exc), message=message) from None

    @property
    def store_url(self) -> str:
        """The record store's URL: ``recordStore``, or the user's private default file."""
        return self.record_store or default_store_url()

    sink_id: str | None = option(
        None,
        kind="str",
        doc="Names the query or job; stable across restarts. Setting it turns on durable "
        "call records (no re-send on task retry or batch replay). Use one per query or job.",
    )
    record_store: str | None = option(
        None,
        kind="str",
        doc="Where call records live (with sinkId): sqlite:///path.db (one machine), "
        "postgresql://user@host/db (any cluster), dynamodb://table?region=... (AWS) or "
        "memory://name (tests). See [Record stores](record-stores.md).",
    )
    batch_id: int | None = option(
        None,
        kind="int",
        minimum=0,
        doc="Names a batch write's run. Writing again with the same sinkId and batchId "
        "skips what that run delivered, and fails if its input changed. Without it, "
        "every batch write is a new run. Not for streams.",
    )
    record_store_scope: Literal["cluster", "machine"] = option(
        "cluster",
        doc="Who must reach the record store and a deadLetter file: cluster (every "
        "executor; sqlite:// and a deadLetter file path are refused off local[...]) or "
        "machine (every executor runs on this machine). See [Record "
        "stores](record-stores.md).",
    )
    retain_batches: int = option(
        10,
        minimum=0,
        doc="After a streaming batch commits, records of batches older than this many are "
        "purged (0 keeps them).",
    )
    writer: str | None = option(
        None,
        kind="str",
        doc="For the generic data source: the writer, as module:Class (an AsyncSinkWriter "
        "subclass) or module:function (a factory taking the options and call_log=...).",
    )


@dataclass(frozen=True)
class SinkSpec:
    """A picklable recipe for a partition's writer.

    Args:
        sink: a registered sink's name (``http``, ``kinesis``, ``elasticsearch``, or one
            added with ``register_sink``) or the ``module:Class`` path of an
            ``AsyncSinkWriter`` subclass (or of a ``create_writer``-style factory).
        options: Spark string options for the writer, the core and the durable layer.
        entry: the registered sink, when it is known already (a data source carries it
            into Spark's Python workers, where the user's registrations do not exist).
    """

    sink: str
    options: Mapping[str, Any] = field(default_factory=dict)
    entry: SinkEntry | None = None

    def __post_init__(self) -> None:
        if self.entry is None:
            entry = SinkEntry(self.sink, self.sink) if ":" in self.sink else sink_entry(self.sink)
            object.__setattr__(self, "entry", entry)
        durable, rest = parse_options(DurableOptions, self.options)
        object.__setattr__(self, "durable", durable)
        object.__setattr__(self, "writer_options", rest)
        self._check_names()
        own, core = None, None
        if self._option_groups() is not None:  # checked now, on the driver; nothing is built
            own, core = self._entry.parse(rest)
        object.__setattr__(self, "reads_mappings", self._entry.takes_mappings(own))
        contract = getattr(own, "contract", None) if self._entry.json_rows else None
        json_contract = contract if isinstance(contract, JsonContract) else None
        object.__setattr__(self, "json_contract", json_contract)
        keys = core.ordering_key.split(",") if core is not None else []
        object.__setattr__(self, "key_fields", tuple(k.strip() for k in keys if k.strip()))

    durable: DurableOptions = field(init=False, repr=False, compare=False)
    writer_options: Mapping[str, Any] = field(init=False, repr=False, compare=False)
    reads_mappings: bool = field(init=False, repr=False, compare=False)
    """Whether the writer takes a dict of a row's fields as it takes the ``Row`` (its
    ``takes_mappings``): rows read through Arrow are then handed over as dicts."""
    json_contract: JsonContract | None = field(init=False, repr=False, compare=False)
    """The JSON contract the writer's entries follow, for a sink whose entries are the
    rows' JSON (``SinkEntry.json_rows``): nested columns may then come as JSON text."""
    key_fields: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The fields of ``orderingKey``, read by column: they stay out of JSON text."""

    def for_spark(self) -> SinkSpec:
        """This spec, checked for Spark's many worker processes.

        With a ``sinkId``, the record store every process of the job opens is pinned here
        (``store_for_spark``), and a SQLite file is opened once, so that a file that cannot
        serve fails the job before any task starts.

        Raises:
            OptionError: ``recordStore`` is in memory (each worker would hold records of
                its own, and a task retried in another would not see them), or its SQLite
                file cannot be opened as a record store.
        """
        if self.durable.sink_id is None:
            return self
        store = self.durable.record_store
        if store and store.lower().startswith("memory:"):
            raise OptionError(
                "recordStore",
                store,
                "",
                message=f"option 'recordStore': {store!r} keeps call records in one Python "
                "process, but Spark runs tasks in several (a retried task would not see "
                "them, and would send again what they say was delivered): use sqlite:// "
                "(one machine), postgresql:// (any cluster) or dynamodb:// (AWS)",
            )
        pinned = store_for_spark(self.durable.store_url)
        object.__setattr__(self, "durable", dataclasses.replace(self.durable, record_store=pinned))
        return self

    @property
    def dead_letter_directory(self) -> str | None:
        """The ``deadLetter`` option when it is a directory URL (see
        ``asyncsink.policies.dead_letter_files``), else ``None``."""
        target = self._dead_letter()
        return target if target is not None and directory_scheme(target) else None

    def _dead_letter(self) -> str | None:
        found = [v for k, v in self.options.items() if k.lower() in ("deadletter", "dead_letter")]
        return found[0] if found and isinstance(found[0], str) and found[0].strip() else None

    def check_master(self, where: Any) -> None:
        """Refuse a record store, or a ``deadLetter`` file, that only this machine holds
        when the Spark master runs executors elsewhere. Each executor would keep records
        of its own: a task retried on another executor would send again what the first
        attempt delivered, and the driver's seal would not reach them. Dead letters would
        lie scattered over the executors' disks, where nobody looks.

        ``where`` is the master URL, or a DataFrame or session to read it from (its conf
        ``spark.master``, which a Spark Connect client and the Connect server's
        ``foreachBatch`` see as well). A master that is not known is not refused.

        Only ``local`` and ``local[...]`` keep every task on this machine;
        ``local-cluster[...]`` and every cluster manager do not. ``recordStoreScope=machine``
        says that every executor reaches the same SQLite file, and the same dead-letter
        file, after all.

        Raises:
            OptionError: the store is a SQLite file, or ``deadLetter`` a file path, and
                the master is not local.
        """
        if self.durable.record_store_scope == "machine":
            return
        master = where if where is None or isinstance(where, str) else master_of(where)
        if master is None or is_local_master(master):
            return
        letter = self._dead_letter()
        if letter is not None and not directory_scheme(letter):
            raise OptionError(
                "deadLetter",
                "",
                "",
                message=f"option 'deadLetter': {letter!r} is a file on each machine, but "
                f"master {master!r} runs executors on other machines: each would write "
                "its own file there, where nobody looks. Give a directory every executor "
                "reaches (file:///shared/mount/..., s3://..., gs://..., abfss://..., "
                "hdfs://...); if every executor runs on this machine, set "
                "recordStoreScope=machine",
            )
        self._check_store_master(master)

    def _check_store_master(self, master: str) -> None:
        durable = self.durable
        url = durable.store_url
        if durable.sink_id is None or not url.lower().startswith("sqlite:"):
            return
        given = any(key.lower() == "recordstore" for key in self.options)
        what = f"{mask_url(url)!r}" if given else f"the default record store {mask_url(url)!r}"
        raise OptionError(
            "recordStore",
            "",
            "",
            message=f"option 'recordStore': {what} is a SQLite file on each machine, but "
            f"master {master!r} runs executors on other machines: each would keep records "
            "of its own (a task retried elsewhere would send again what was delivered, and "
            "the driver's completion would not reach them). Use postgresql://... (any "
            "cluster) or dynamodb://... (AWS); if every executor runs on this machine or "
            "opens this same file (not over NFS), set recordStoreScope=machine",
        )

    @property
    def rate_capped(self) -> bool:
        """Whether a rate cap is set (``maxRequestsPerSecond``...) and left to the driver
        to split (no ``rateCapShares``)."""
        keys = {key.lower() for key in self.options}
        if not keys & set(_CAPS) or "ratecapshares" in keys:
            return False
        caps = [str(v).strip() for k, v in self.options.items() if k.lower() in _CAPS]
        return not all(cap in ("", "0", "0.0") for cap in caps)

    def with_rate_shares(self, shares: int | None) -> SinkSpec:
        """This spec with ``rateCapShares`` set to ``shares`` (the tasks that can run at
        once), when a rate cap is set and the user left ``rateCapShares`` out; ``None``
        (not known): 1, and a warning, so that the cap is never exceeded."""
        if not self.rate_capped:
            return self
        if shares is None:
            log.warning(
                "the rate caps (maxRequestsPerSecond...) hold per task here: the number of "
                "tasks that run at once is not known; set rateCapShares to split them"
            )
            shares = 1
        options = {**self.options, "rateCapShares": str(max(1, shares))}
        return dataclasses.replace(self, options=options, entry=self.entry)

    def for_stream(self) -> SinkSpec:
        """This spec, checked for a streaming query.

        Raises:
            OptionError: ``batchId`` is set: a stream's runs and batches are its query's id
                and its micro-batch ids, so it would be ignored.
        """
        if self.durable.batch_id is not None:
            raise OptionError(
                "batchId",
                self.durable.batch_id,
                "",
                message=f"option 'batchId' ({self.durable.batch_id}) names the run of a batch "
                "write; a stream's records are named by its query's id and its micro-batch "
                "ids (restarting on the same checkpoint skips what was delivered): leave "
                "batchId out",
            )
        return self

    def build(
        self, call_log: CallRecorder | None = None, dead_letter: Any = None
    ) -> AsyncSinkWriter[Any, Any]:
        """A new writer for one partition (not opened yet); ``dead_letter``, when given,
        is its dead-letter target in place of the ``deadLetter`` option.

        Raises:
            OptionError: an option is unknown, missing or invalid.
            ValueError, ImportError: the sink cannot be found.
        """
        options = self.writer_options
        if dead_letter is not None:
            own = ("deadletter", "dead_letter")
            options = {k: v for k, v in options.items() if k.lower() not in own}
            options["deadLetter"] = dead_letter
        writer: AsyncSinkWriter[Any, Any] = self._entry.build(options, call_log=call_log)
        return writer

    @property
    def _entry(self) -> SinkEntry:
        assert self.entry is not None  # set by __post_init__
        return self.entry

    def _check_names(self) -> None:
        """Refuse an option no group of this sink knows, naming all those it knows (the
        writer's, the sink's own and the Spark integration's) and the closest one.

        Raises:
            OptionError: an unknown option (its value is never shown).
        """
        groups = self._option_groups()
        if groups is None:
            return  # a factory of the user's: it checks its own options
        known = {
            name.lower()
            for group in groups
            for spec in option_specs(group)
            for name in (spec.name, spec.spark_name)
        }
        unknown = {key: value for key, value in self.options.items() if key.lower() not in known}
        if unknown:
            raise_unknown(unknown, groups, where=f"sink {self.sink!r}")

    def _option_groups(self) -> list[type] | None:
        """The option groups the sink reads, or ``None`` for a factory that reads its own."""
        own = self._entry.load_options()
        if own is not None:
            return [SinkOptions, own, DurableOptions]
        writer = self._entry.load_writer()
        if isinstance(writer, type) and issubclass(writer, AsyncSinkWriter):
            return [SinkOptions, DurableOptions]
        return None

    def __repr__(self) -> str:
        return f"SinkSpec({self.sink!r}, sink_id={self.durable.sink_id!r})"


def store_for_spark(url: str) -> str:
    """The record store URL for every process of a Spark job, checked from the driver.

    A SQLite path is made absolute here: relative, each process would resolve it against
    its own working directory (the driver's may change after the Spark session started),
    and the driver could complete scopes in another file than the tasks recorded them in.
    Every store is then opened through ``open_store`` and asked to ``verify`` itself, as a
    task would open it: a SQLite file that cannot serve (a directory, a file that is not a
    record store, one that cannot be created) fails here, naming the option, and so does
    a PostgreSQL store's unknown host, refused login or missing table.

    Raises:
        OptionError: the SQLite file cannot be opened as a record store, or the store
            fails its check.
    """
    if url.lower().startswith("sqlite://"):
        raw, _ = parse_sqlite_url(url)
        query = url.partition("?")[2]
        url = f"sqlite://{Path(raw).absolute()}" + (f"?{query}" if query else "")
    _verify(url)
    return url


def is_local_master(master: str) -> bool:
    """Whether Spark ``master`` runs every task in this process: ``local`` or
    ``local[...]`` (``local-cluster[...]`` starts executors of their own)."""
    master = master.strip().lower()
    return master == "local" or master.startswith("local[")


_CAPS = ("maxrequestspersecond", "maxentriespersecond", "maxbytespersecond")


def cores_of(df: Any) -> int | None:
    """How many tasks the cluster of ``df`` (a DataFrame or a session) runs at once:
    ``defaultParallelism`` in a classic session, else read from the master (``local[N]``,
    ``local-cluster[N,C,M]``) or ``spark.default.parallelism``; ``None`` when unknown."""
    session = getattr(df, "sparkSession", df)
    try:
        return int(session.sparkContext.defaultParallelism)  # classic
    except Exception:
        pass
    master = master_of(session)
    return cores_of_master(master) if master is not None else None


def cores_of_master(master: str) -> int | None:
    """The cores a master URL names, if it names them (``local[4]``, ``local[*]``,
    ``local-cluster[2,1,1024]``); ``None`` for a cluster manager."""
    import os
    import re

    master = master.strip().lower()
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\*|\d+)(?:,\d+)?\]", master)
    if found:
        return os.cpu_count() or 1 if found.group(1) == "*" else int(found.group(1))
    found = re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master)
    if found:
        return int(found.group(1)) * int(found.group(2))
    return None


def master_of(df: Any) -> str | None:
    """The Spark master of the session of ``df`` (a DataFrame or a session), classic or
    Spark Connect; ``None`` when it cannot be read."""
    session = getattr(df, "sparkSession", df)
    try:
        return str(session.sparkContext.master)  # classic
    except Exception:  # Spark Connect has no SparkContext: ask the server's conf
        pass
    try:
        master = session.conf.get("spark.master", None)
    except Exception:
        return None
    return master if isinstance(master, str) and master else None


def _verify(url: str) -> None:
    """Open the store at ``url`` and ``verify`` it, as a task would open it.

    Raises:
        OptionError: it cannot serve.
    """
    store = open_store(url)
    if not store.verifies:
        return  # nothing to check before it is used

    async def verify() -> None:
        async with store:
            await store.verify()

    try:
        run_blocking(verify, name="checking the record store", timeout=VERIFY_TIMEOUT_S)
    except (DurableError, TimeoutError) as exc:
        raise OptionError(
            "recordStore",
            "",
            "",
            message=f"option 'recordStore': the record store cannot be used: {exc}",
        ) from exc
