"""``ElasticsearchWriter``: rows indexed in bulk, safe to re-send, and ``create_writer``."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, cast
from urllib.parse import quote

import httpx
import orjson

from asyncsink.errors import FatalError, RetryableError
from asyncsink.request import CallInfo, SubmitResult, current_call
from asyncsink.writer.sink_contract import Reconcile

from ..registry import SinkEntry
from ..web.classify import error_for_transport, parse_retry_after, request_of
from ..web.clients import ClientSettings
from ..web.transport import Answer, Timeout, Transport
from ..web.writer import HttpClientWriter, gzip_compress
from .actions import BulkEntry, EntryBuilder, bulk_body, document_id
from .hosts import HostPool
from .options import ElasticsearchOptions
from .results import error_for_response, held_by_mget, read_bulk_items

__all__ = ["ElasticsearchWriter", "create_writer"]

log = logging.getLogger("asyncsink.elasticsearch")

_REFRESH_URL_NAMES = 3000  # characters of index names per _refresh request


class ElasticsearchWriter(HttpClientWriter[Any, BulkEntry]):
    """Indexes rows (Spark ``Row`` objects, mappings, dataclasses) with ``_bulk`` requests.

    Each row becomes one bulk operation (``index``, ``create``, ``update`` as an upsert,
    or ``delete``; see ``ElasticsearchOptions``). Requests are cut by ``maxBatchSize``
    documents and ``maxBatchSizeInBytes`` bytes of NDJSON, each document counted with
    its action line.

    Re-sending is safe: every document has an ``_id``, mapped from the row (``idField``)
    or derived from the task's scope and the row's position in it (``document_id``), so a
    re-sent document overwrites itself instead of becoming a second one, whether the
    re-send comes from a lost answer, a timeout or a replayed Spark task (with durable
    call records). With derived ids, a call an earlier attempt left unfinished is settled
    by asking the index which of its documents it holds (``_mget``) instead of re-sending.

    With ``versionField``, each index and delete carries the row's version, and a 409
    answer to one means the index holds that version or a newer one: the document counts
    as delivered and as ``skipped_stale``, and is not retried. Order then does not
    matter: the newest version wins, and a deleted document stays deleted.

    Only the documents that failed are retried (429 items throttle the writer); documents
    Elasticsearch refuses (mapping errors) are bad records: the task fails naming their
    position, or they go to the ``deadLetter`` target. Authentication, authorization and
    missing-index errors fail the task at once, with a message that shows no credential.

    Every request, to any node, goes through one transport (see
    ``asyncsink.sinks.web.transport``): the event loop's shared one for the writer's
    settings, or the one its ``client`` or ``transport`` arguments give (see
    ``HttpClientWriter``; a given client is left open). While open, its credentials are
    kept out of the log records of httpx, httpcore, hpack, aiohttp and asyncsink (see
    ``asyncsink.sinks.web.writer``). With ``refresh``, the written indices are refreshed
    once everything was delivered, before the scope is recorded as complete.

    Args:
        es: the cluster, index, operation and connection options.
        client: an ``httpx.AsyncClient`` to use instead of opening one; not closed here.
        transport: an httpx transport for the client the writer opens (tests, proxies),
            or a ``Transport`` to send through (see ``asyncsink.sinks.web.transport``).
        **kwargs: ``options``, ``call_log`` and the rest of ``AsyncSinkWriter``'s arguments.
    """

    takes_mappings = True  # a dict of a row's fields converts as the Row does
    sink_name = "elasticsearch"
    reconciliation = Reconcile.BY_CALL  # _mget of the call's document ids

    logger_names: ClassVar[tuple[str, ...]] = (log.name,)

    def __init__(
        self,
        es: ElasticsearchOptions,
        *,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | Transport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(secrets=es.secrets(), client=client, transport=transport, **kwargs)
        self.es = es
        self._build = EntryBuilder(es)
        self._hosts = HostPool(es.host_urls)
        # None: each item answers the operation its row named (``operationField``).
        self._operation = es.operation if es.operation_field is None else None
        path = "/_bulk" if es.index_field else f"/{quote(es.index or '', safe='')}/_bulk"
        if es.pipeline:
            path += "?pipeline=" + quote(es.pipeline, safe="")
        self._bulk_path = path
        version = es.compatibility_version
        json_type = "application/json"
        ndjson_type = "application/x-ndjson"
        if version is not None:
            json_type = f"application/vnd.elasticsearch+json; compatible-with={version}"
            ndjson_type = f"application/vnd.elasticsearch+x-ndjson; compatible-with={version}"
        self._auth = es.signer(self._redact)
        self._hints = self._auth.hints() if self._auth is not None else None
        auth = es.auth_headers()
        self._json_headers = {"content-type": json_type, "accept": json_type, **auth}
        self._bulk_headers = {"content-type": ndjson_type, "accept": json_type, **auth}
        if es.gzip:
            self._bulk_headers["content-encoding"] = "gzip"
        read = self.options.request_timeout_ms / 1000
        self._timeouts = Timeout(connect=es.connect_timeout_ms / 1000, read=read)
        # An unfinished call can be looked up only by ids derived from its sequence
        # numbers, in one known index, on the default routing.
        self._can_reconcile = (
            es.id_field is None
            and not es.auto_ids
            and es.index_field is None
            and es.routing_field is None
            and es.operation in ("index", "create")
        )

    # ------------------------------------------------------------------ the contract

    def convert(self, element: Any) -> BulkEntry:
        """The bulk entry of a row.

        Raises:
            EntryEncodingError: a value cannot be encoded as JSON (the field is named).
            ValueError, TypeError: the id, index or routing field is missing or unusable.
        """
        return self._build(element)

    def convert_all(self, elements: Sequence[Any]) -> Sequence[BulkEntry]:
        """The bulk entries of a run: the documents of an Arrow record batch's rows
        encoded a column at a time (see ``EntryBuilder.build_all``), else one by one."""
        built = self._build.build_all(elements)
        return built if built is not None else super().convert_all(elements)

    def entry_size(self, entry: BulkEntry) -> int:
        """Bytes the entry adds to a bulk body: action line, source line and newlines (for
        a derived id, the longest it can be)."""
        return entry.size

    def serialize_entry(self, entry: Any) -> bytes:
        """The document's JSON source, for content digests and dead letters."""
        if isinstance(entry, BulkEntry):
            return entry.source
        return super().serialize_entry(entry)

    async def submit_request_entries(self, entries: list[BulkEntry]) -> SubmitResult | None:
        """One ``_bulk`` request; the documents to retry or reject come from its items.

        Raises:
            ThrottledError: 429 or 503 for the whole request.
            RetryableError: 408 or 5xx, a timeout, or no node could be connected to.
            FatalError: 401, 403, 404, 413 or another refusal; see ``asyncsink.sinks.elasticsearch.
                results``.
        """
        call = current_call()
        body = bulk_body(entries, call.scope, call.seqs)
        size = len(body)
        if self.es.gzip:
            body = await gzip_compress(body)
        # The core gives up on the request after requestTimeoutMs.
        answer = await self._request(
            "POST",
            self._bulk_path,
            body,
            self._bulk_headers,
            within=self.options.request_timeout_ms / 1000,
        )
        if not 200 <= answer.status <= 299:
            raise error_for_response(
                answer.response(), self._redact, body_size=size, hints=self._hints
            )
        return read_bulk_items(
            answer.content,
            self._operation,
            len(entries),
            self._redact,
            retry_after=parse_retry_after(answer.headers.get("retry-after")),
            hints=self._hints,
            versioned=self.es.versioned,
        )

    async def reconcile(self, call: CallInfo) -> Collection[int] | None:
        """The documents of an unfinished call the index holds, by ``_mget`` of their
        derived ids; ``None`` (re-send the call as it was, with the same ids) when ids
        are mapped from rows, indices or routing come from rows, or the operation is an
        update or delete, and when the lookup fails."""
        if not self._can_reconcile or not call.seqs:
            return None
        ids = [document_id(call.scope, seq) for seq in call.seqs]
        path = f"/{quote(self.es.index or '', safe='')}/_mget?_source=false"
        try:
            body = orjson.dumps({"ids": ids})
            answer = await self._request("POST", path, body, self._json_headers)
        except (RetryableError, FatalError) as exc:
            log.warning("%s: cannot look up call %d: %s", call.scope, call.call_id, exc)
            return None
        if answer.status != 200:
            problem = error_for_response(answer.response(), self._redact, hints=self._hints)
            log.warning("%s: cannot look up call %d: %s", call.scope, call.call_id, problem)
            return None
        return held_by_mget(answer.content, call.seqs, ids=ids)

    # ------------------------------------------------------------------ requests

    async def _request(
        self,
        method: str,
        path: str,
        content: bytes,
        headers: Mapping[str, str],
        *,
        within: float | None = None,
    ) -> Answer:
        """Send to the next node in turn; on a failed connection, to the next one.
        ``within``: the caller gives up after that many seconds (see ``_exchange``).

        Raises:
            RetryableError: no node could be connected to, or the request got no answer.
            FatalError: the request cannot be sent (a TLS certificate was refused...).
        """
        pool = self._hosts
        failures: list[str] = []
        last: httpx.HTTPError | None = None
        for host in pool.order():
            try:
                answer = await self._exchange(method, host + path, headers, content, within=within)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                problem = error_for_transport(exc, request_of(exc), self._redact)
                if isinstance(problem, FatalError):
                    raise problem from exc
                known = pool.is_sitting_out(host)  # this outage was logged already
                pause = pool.failed(host)
                failures.append(f"{host}: {problem}")
                if not known:
                    log.warning(
                        "cannot connect to %s; skipping it for %g s: %s", host, pause, problem
                    )
                last = exc
                continue
            except httpx.HTTPError as exc:
                raise error_for_transport(exc, request_of(exc), self._redact) from exc
            pool.succeeded(host)
            return answer
        raise RetryableError(
            f"no Elasticsearch node could be connected to ({'; '.join(failures)})"
        ) from last

    async def _refresh(self) -> None:
        """Refresh the indices written to (``refresh`` option).

        Raises:
            RetryableError, ThrottledError, FatalError: the refresh failed.
        """
        if self.es.index_field is None:
            names = [self.es.index or ""]
        else:
            names = sorted(self._build.indices | ({self.es.index} if self.es.index else set()))
        groups: list[list[str]] = []
        length = 0
        for name in names:
            if not groups or length > _REFRESH_URL_NAMES:
                groups.append([])
                length = 0
            groups[-1].append(quote(name, safe=""))
            length += len(groups[-1][-1]) + 1
        for group in groups:
            path = f"/{','.join(group)}/_refresh"
            answer = await self._request("POST", path, b"", self._json_headers)
            if not 200 <= answer.status <= 299:
                raise error_for_response(answer.response(), self._redact, hints=self._hints)

    # ------------------------------------------------------------------ lifecycle

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Flush (the barrier), refresh if asked, then close; on an exception, cancel what
        is in flight instead. A failed refresh fails the exit, before the scope is marked
        complete, so that a retried task refreshes again."""
        if exc is None and self.es.refresh:
            try:
                await self.flush()
                if self._build.indices or self.es.index:
                    await self._refresh()
            except BaseException as error:
                await super().__aexit__(type(error), error, error.__traceback__)
                raise
        await super().__aexit__(exc_type, exc, tb)

    def _first_url(self) -> str:
        return self.es.host_urls[0]

    def destination_name(self) -> str:
        """The first host and the index (``indexField`` when each row names its own)."""
        index = self.es.index or f"{{{self.es.index_field}}}"
        return f"{super().destination_name().rstrip('/')}/{index}"

    def _client_settings(self) -> ClientSettings:
        es = self.es
        return ClientSettings.for_urls(
            es.host_urls,
            tls_verify=es.tls_verify,
            ca_bundle=es.ca_bundle,
            connections=self.options.max_in_flight_requests + 1,
            client_cert=es.client_certificate(),
        )


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> ElasticsearchWriter:
    """An ``ElasticsearchWriter`` from one mapping of Spark options (string values, names
    matched case-insensitively): the writer's ``SinkOptions`` and the
    ``ElasticsearchOptions``. ``kwargs`` go to ``ElasticsearchWriter`` (``call_log``,
    ``client``, ``transport``).

    Raises:
        OptionError: an unknown option (named, with the known ones), a missing ``hosts``,
            no ``index`` nor ``indexField``, or an invalid value.
    """
    entry = SinkEntry("elasticsearch", ElasticsearchWriter, ElasticsearchOptions)
    return cast(ElasticsearchWriter, entry.build(options, **kwargs))
