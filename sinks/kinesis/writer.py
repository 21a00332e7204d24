"""``KinesisWriter``: delivers rows to an Amazon Kinesis data stream with PutRecords.

PutRecords has no idempotency key. With durable call records (``sinkId``), a retried task
skips what the lost attempt saw acknowledged and, by default (``reconcileByReading``),
settles the calls it left without an answer by reading the shards
(``asyncsink.sinks.kinesis.reconcile``): each row is then stored once, unless a scan runs out of
its budget (that call is re-sent as it was, and counted). Within one attempt, a request
that timed out on the client may still have been stored, and its re-send stores its
records again: there delivery is at least once, and consumers should tolerate duplicates.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Self, cast

from asyncsink.durable.call_log import CallLog
from asyncsink.errors import DestinationError
from asyncsink.masking import mask_url
from asyncsink.options import SinkOptions
from asyncsink.request import CallInfo, SubmitResult, current_call
from asyncsink.writer import AsyncSinkWriter
from asyncsink.writer.sink_contract import Reconcile

from ..aws.errors import scrub, shown_cause
from ..registry import SinkEntry
from ..web.redact import mask_in_logs, unmask_in_logs
from .answers import read_put_records
from .clients import ClientSettings, get_client
from .converter import KinesisEntry, RecordConverter, as_mapping
from .errors import never_connected, translate_error
from .options import KinesisOptions
from .options import sink_options_for_kinesis as _sink_options
from .put_records import install, put_records
from .reconcile import ReconcileSettings, StreamScan, acknowledged_detail

__all__ = ["KinesisWriter", "create_writer"]

log = logging.getLogger("asyncsink.kinesis")

# botocore's and aiobotocore's loggers that show requests (headers with the access key id
# and the session token) at DEBUG: a logger's filter sees only its own records.
BOTOCORE_LOGGERS = (
    "asyncsink.kinesis",
    "botocore.auth",
    "botocore.endpoint",
    "botocore.hooks",
    "botocore.httpsession",
    "botocore.parsers",
    "botocore.retryhandler",
    "aiobotocore.endpoint",
    "aiobotocore.httpsession",
    "aiobotocore.hooks",
)


class KinesisWriter(AsyncSinkWriter[Any, KinesisEntry]):
    """Writes Spark ``Row`` objects, dicts or other mappings to a Kinesis data stream.

    Each element becomes one record (see ``KinesisOptions`` for the payload and the
    partition key). Requests respect the PutRecords limits (500 records and 5 MiB by
    default, at most 10 MiB); a record above the stream's maximum size is a bad record.
    Records that fail inside a request (their ``ErrorCode``) are retried on their own
    and shrink the in-flight window; ``ProvisionedThroughputExceededException`` counts as
    throttling. Whole-request failures are retried when transient and fail the writer at
    once when retrying cannot help (see ``asyncsink.sinks.kinesis.errors``).

    The writer uses its process's shared client for its event loop (``asyncsink.sinks.kinesis.
    clients``) unless ``client`` is given, which then belongs to the caller. Every client
    gets its records the same way (``asyncsink.sinks.kinesis.put_records``): a botocore
    client the sink's hooks are installed on, a test double the records as they are.

    With a ``call_log`` and ``reconcile_by_reading`` (the default), each answer's result
    detail keeps the highest sequence number stored per shard, and the calls an earlier
    attempt left without an answer are looked up in the stream before anything of them
    is sent again (``reconcile_entries``; see ``asyncsink.sinks.kinesis.reconcile``).

    Args:
        kinesis: the stream and how rows become records.
        options: buffering hints and retry policy; the Kinesis defaults if omitted.
        call_log: durable call records for this writer's scope.
        client: an aiobotocore Kinesis client to use instead of the shared one.

    Raises:
        OptionError: an option exceeds a PutRecords limit.
    """

    takes_mappings = True  # a dict of a row's fields converts as the Row does
    sink_name = "kinesis"
    reconciliation = Reconcile.BY_ENTRIES  # reads the stream for lost calls' records

    def __init__(
        self,
        kinesis: KinesisOptions,
        *,
        options: SinkOptions | None = None,
        call_log: CallLog | None = None,
        client: Any = None,
    ) -> None:
        super().__init__(
            options=_sink_options(kinesis, options), call_log=call_log, ordering=kinesis.ordering()
        )
        self.kinesis = kinesis
        self._convert = RecordConverter(kinesis)
        self._given_client = client
        self._client = client
        if client is not None:
            install(client)  # the shared clients have the hooks already
        self._stream_parameters = kinesis.stream_parameters
        self._secrets = kinesis.secrets
        timeout = self.options.request_timeout_ms / 1000
        self._settings = ClientSettings(
            region=kinesis.effective_region,
            endpoint_url=kinesis.endpoint_url,
            aws_access_key_id=kinesis.aws_access_key_id,
            aws_secret_access_key=kinesis.aws_secret_access_key,
            aws_session_token=kinesis.aws_session_token,
            identity=kinesis.identity if kinesis.aws_role_arn else None,
            connect_timeout=min(10.0, timeout),
            read_timeout=timeout + 1.0,
            max_pool_connections=max(10, self.options.max_in_flight_requests),
        )
        self._stream_scan: StreamScan | None = None
        if call_log is not None and kinesis.reconcile_by_reading:
            settings = ReconcileSettings(
                request_timeout=timeout,
                clock_skew=kinesis.reconcile_clock_skew_ms / 1000,
                time_budget=kinesis.reconcile_time_budget_ms / 1000,
                byte_budget=kinesis.reconcile_byte_budget,
            )
            self._stream_scan = StreamScan(
                self._current_client, self._stream_parameters, kinesis.stream, settings
            )
        self._sent = 0  # calls with a lower id have been handed to PutRecords

    @property
    def stream_scan(self) -> StreamScan | None:
        """What settles lost attempts' calls by reading the stream (its ``reports`` say
        what each scan cost); ``None`` without call records or ``reconcileByReading``."""
        return self._stream_scan

    @property
    def client(self) -> Any:
        """The aiobotocore client last used (``None`` until the writer is opened)."""
        return self._client

    async def __aenter__(self) -> Self:
        mask_in_logs(self._secrets, BOTOCORE_LOGGERS)
        try:
            await self._current_client()  # fails now on a missing region or credentials
            return await super().__aenter__()
        except BaseException:
            unmask_in_logs(self._secrets)
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            unmask_in_logs(self._secrets)

    async def _current_client(self) -> Any:
        """The given client, else the shared one (looked up per request, so that a
        ``close_clients()`` between requests is followed by a fresh client)."""
        if self._given_client is not None:
            return self._given_client
        try:
            self._client = await get_client(self._settings)
        except Exception as exc:
            error = self._translate(exc)
            if error is None:
                raise
            raise error from self._shown_cause(exc)
        return self._client

    # ------------------------------------------------------------------ the contract

    def convert(self, element: Any) -> KinesisEntry:
        """The Kinesis record for a ``Row``, dict or mapping (see ``KinesisOptions``)."""
        return self._convert(element, self.entry_position)

    def convert_all(self, elements: Sequence[Any]) -> Sequence[KinesisEntry]:
        """The records of a run: at once for plain dicts under the common options (see
        ``RecordConverter.convert_all``), else one element at a time."""
        entries = self._convert.convert_all(elements)
        return entries if entries is not None else super().convert_all(elements)

    def entry_size(self, entry: KinesisEntry) -> int:
        """Data plus UTF-8 partition key, as Kinesis counts a record against its limits."""
        return entry.size

    def serialize_entry(self, entry: Any) -> bytes:
        """The record's data (for content digests and dead letters); for an element that
        could not be converted, its JSON form when it has one."""
        if isinstance(entry, KinesisEntry):
            return entry.data
        try:
            return self._convert.json(as_mapping(entry))
        except (TypeError, ValueError):
            return super().serialize_entry(entry)

    async def submit_request_entries(
        self, entries: list[KinesisEntry]
    ) -> Sequence[KinesisEntry] | SubmitResult | None:
        """One PutRecords request; records that failed in it are returned for retry.

        Raises:
            ThrottledError, RetryableError, FatalError: the whole request failed.
            RetryableError: the answer does not say which records were stored (see
                ``asyncsink.sinks.kinesis.answers``).
        """
        reading = self._stream_scan is not None
        if reading:
            call_id = current_call().call_id
            if call_id >= self._sent:
                self._sent = call_id + 1
        client = await self._current_client()
        try:
            response = await put_records(client, entries, self._stream_parameters)
        except Exception as exc:
            error = self._translate(exc)
            if error is None:
                raise
            raise error from self._shown_cause(exc)
        answer = read_put_records(response, len(entries), self.kinesis.stream)
        if answer.unexpected:
            log.warning(
                "Kinesis stream %r: records failed with unexpected error codes, retrying them: %s",
                self.kinesis.stream,
                self._scrub("; ".join(answer.unexpected)),
            )
        if not reading:
            return answer.result
        detail = acknowledged_detail(response["Records"], self._sent)
        if answer.result is None:
            return SubmitResult(detail=detail)
        return dataclasses.replace(answer.result, detail={**answer.result.detail, **detail})

    async def reconcile_entries(
        self, call: CallInfo, entries: list[KinesisEntry]
    ) -> Collection[int] | None:
        """The entries of ``call``, left without an answer by an earlier attempt, that the
        stream holds, found by reading the shards they map to; ``None`` when that cannot
        be told within the scan's budget, or without ``reconcileByReading``."""
        if self._stream_scan is None:
            return None
        return await self._stream_scan.held(call, entries, self.recorded_results())

    def may_have_landed(self, error: BaseException | None) -> bool:
        """Whether a PutRecords request that failed with ``error`` may have stored its
        records all the same: not when no connection opened, nor when the answer refused
        it (a throttle, a client error); yes when no answer came, or when the answer was
        a server-side failure (a 5xx, ``InternalFailure``, ``ServiceUnavailable``: from
        Kinesis, or from a gateway in front of it), which may come after the records were
        stored. With call records the writer then reads the stream for them before
        sending them again."""
        cause = error.__cause__ if error is not None else None
        if cause is not None and never_connected(cause):
            return False
        return super().may_have_landed(error)

    def _translate(self, exc: Exception) -> DestinationError | None:
        error = translate_error(exc, self.kinesis.stream)
        if error is None:
            return None
        message = self._scrub(str(error))
        if message != str(error):
            error = type(error)(message, retry_after=error.retry_after, status=error.status)
        return error

    def _shown_cause(self, exc: BaseException) -> BaseException:
        """What the writer's error is raised from (see ``asyncsink.sinks.aws.errors``)."""
        return shown_cause(exc, self._secrets)

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def destination_name(self) -> str:
        """The stream's name."""
        return self.kinesis.stream

    def describe_destination(self) -> str:
        """The stream, and the endpoint it is reached at (masked) or its region."""
        kinesis = self.kinesis
        where = mask_url(kinesis.endpoint_url) if kinesis.endpoint_url else kinesis.effective_region
        return f"Kinesis stream {kinesis.stream!r} at {where}"

    def __repr__(self) -> str:
        base = super().__repr__()
        return f"{base[:-1]} stream={self.kinesis.stream!r}>"


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> KinesisWriter:
    """A ``KinesisWriter`` from one mapping of Spark options (string values, names
    matched case-insensitively), holding both the Kinesis options (``KinesisOptions``)
    and the writer's (``SinkOptions``, with the Kinesis defaults).

    Values may also be Python objects (a ``partitionKeyFn`` callable, a ``deadLetter``
    callable). ``kwargs`` go to ``KinesisWriter`` (``call_log``, ``client``).

    Raises:
        OptionError: an unknown option (named, with the known ones), an invalid value, or
            a value above a PutRecords limit.
    """
    entry = SinkEntry("kinesis", KinesisWriter, KinesisOptions)
    return cast(KinesisWriter, entry.build(options, **kwargs))
