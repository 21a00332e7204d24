"""Routes, fault injection and accounting of the Elasticsearch test endpoint.

Endpoints (``{index}`` and ``{id}`` are URL-decoded path segments):

=====================================  ======================================================
``GET|HEAD /``                         cluster info (an 8.x node)
``POST|PUT /_bulk``, ``/{index}/_bulk``  NDJSON bulk, optionally ``Content-Encoding: gzip``
``GET|POST /_mget``, ``/{index}/_mget``  multi-get
``GET|POST /_count``, ``/{index}/_count``  document count (the query is ignored)
``GET|HEAD /{index}/_doc/{id}``        one document
``POST|GET /_refresh``, ``/{index}/_refresh``  accepted, does nothing
``PUT|DELETE|HEAD|GET /{index}``       create (mappings ignored), delete, exists, describe
``GET /_control/stats``                :class:`EsStats` as JSON
``GET /_control/documents/{index}``    ``{id: source}``
``POST /_control/reset``               forget documents, mappings and counters
``GET|PUT /_control/faults``           read / replace :class:`EsFaults`
=====================================  ======================================================

Every response carries ``X-Elastic-Product: Elasticsearch``. A request whose ``Accept`` is
``application/vnd.elasticsearch+json; compatible-with=N`` (N in 7, 8, 9) is answered with that
content type; other values of N are refused with 400 ``media_type_header_exception``.

Flavors (``EsApp(flavor=...)``) stand in for the OpenSearch servers that cannot be installed
here, with the behaviours of theirs that a bulk client meets:

- ``"opensearch"`` (OpenSearch 2 and 3): ``GET /`` says ``"distribution": "opensearch"``
  (version 2.19.0), no ``X-Elastic-Product`` header is sent, and the Elasticsearch
  compatibility media types (``compatible-with=N``) are refused with 406, as OpenSearch
  refuses them. Bulk, multi-get, count and refresh answer as Elasticsearch does.
- ``"aoss"`` (an OpenSearch Serverless time-series or vector collection): as
  ``"opensearch"``, and every ``index`` or ``create`` bulk item that names an ``_id`` fails
  with 400 ``illegal_argument_exception`` "Document ID is not supported in create/index
  operation request"; items without ``_id`` get ids of the server's making.

With ``sigv4`` (a ``SigV4Check``), every request but the control ones must carry a valid
AWS Signature Version 4, verified with botocore from the same keys; a refused one gets 403
(400 for a wrong ``x-amz-content-sha256``) with AWS's ``{"message": "..."}`` body, as
OpenSearch Service and OpenSearch Serverless answer (see ``asyncsink.testing.sigv4``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import zlib
from collections import deque
from collections.abc import Callable
from urllib.parse import unquote

import orjson

from asyncsink.testing.sigv4 import SigV4Check, verify

from .errors import EsRequestError, error_body, index_not_found
from .http_server import DropConnection, HttpRequest, HttpResponse
from .model import EsFaults, EsStats
from .store import EsStore

__all__ = ["FLAVORS", "PRODUCT_HEADERS", "EsApp"]

FLAVORS = ("elasticsearch", "opensearch", "aoss")

_log = logging.getLogger(__name__)

PRODUCT_HEADERS = (("x-elastic-product", "Elasticsearch"),)
_COMPAT = re.compile(r"compatible-with\s*=\s*(\d+)")
_JSON = "application/json"
_AUTH_CHALLENGE = (
    ("www-authenticate", 'Basic realm="security", charset="UTF-8"'),
    ("www-authenticate", "ApiKey"),
)
_STATUS_ERRORS = {
    400: ("illegal_argument_exception", "request rejected by fault injection"),
    401: ("security_exception", "unable to authenticate with provided credentials"),
    403: ("security_exception", "action [indices:data/write/bulk] is unauthorized for user"),
    404: ("index_not_found_exception", "no such index [_injected]"),
    408: ("timeout_exception", "request timed out"),
    409: ("version_conflict_engine_exception", "version conflict"),
    413: ("content_too_long_exception", "request content too long"),
    429: ("es_rejected_execution_exception", "rejected execution of coordinating operation"),
    500: ("exception", "internal server error"),
    502: ("exception", "bad gateway"),
    503: ("unavailable_shards_exception", "primary shard is not active Timeout: [1m]"),
    504: ("timeout_exception", "gateway timeout"),
}
_INFO = {
    "name": "asyncsink-es-test",
    "cluster_name": "asyncsink-test",
    "cluster_uuid": "dGVzdC1jbHVzdGVyLXV1aWQ",
    "version": {
        "number": "8.15.0",
        "build_flavor": "default",
        "build_type": "tar",
        "build_hash": "0000000000000000000000000000000000000000",
        "build_date": "2024-08-05T10:05:34.233336849Z",
        "build_snapshot": False,
        "lucene_version": "9.11.1",
        "minimum_wire_compatibility_version": "7.17.0",
        "minimum_index_compatibility_version": "7.0.0",
    },
    "tagline": "You Know, for Search",
}
_OPENSEARCH_INFO = {
    "name": "asyncsink-opensearch-test",
    "cluster_name": "asyncsink-test",
    "cluster_uuid": "dGVzdC1jbHVzdGVyLXV1aWQ",
    "version": {
        "distribution": "opensearch",
        "number": "2.19.0",
        "build_type": "tar",
        "build_hash": "0000000000000000000000000000000000000000",
        "build_date": "2025-02-05T10:05:34.233336849Z",
        "build_snapshot": False,
        "lucene_version": "9.12.1",
        "minimum_wire_compatibility_version": "7.10.0",
        "minimum_index_compatibility_version": "7.0.0",
    },
    "tagline": "The OpenSearch Project: https://opensearch.org/",
}


class EsApp:
    """Handles the requests of one Elasticsearch test endpoint.

    Build and use it on the event loop that serves it: its state is not thread-safe.
    """

    def __init__(
        self, faults: EsFaults, *, flavor: str = "elasticsearch", sigv4: SigV4Check | None = None
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
        self.flavor = flavor
        self.sigv4 = sigv4
        self.store = EsStore()
        self._faults = faults
        self._rng = random.Random(faults.seed)
        self._fail_queue: deque[int] = deque(faults.fail_statuses)
        self._in_flight = 0
        self._reset_counters()

    def _reset_counters(self) -> None:
        self._requests = 0
        self._bulk_requests = 0
        self._mget_requests = 0
        self._responses: dict[int, int] = {}
        self._dropped = 0
        self._hung = 0
        self._max_in_flight = self._in_flight
        self._internal_errors = 0
        self._cpu_start = time.thread_time()

    @property
    def faults(self) -> EsFaults:
        """The faults in force."""
        return self._faults

    def set_faults(self, faults: EsFaults) -> None:
        """Replace the faults; reseeds the generator and restarts ``fail_statuses``."""
        self._faults = faults
        self._rng = random.Random(faults.seed)
        self._fail_queue = deque(faults.fail_statuses)

    def reset(self) -> None:
        """Forget every index and counter; reseed and restart the fault queue."""
        self.store = EsStore()
        self.set_faults(self._faults)
        self._reset_counters()

    def stats(self) -> EsStats:
        """A snapshot of the counters."""
        store = self.store
        return EsStats(
            requests=self._requests,
            bulk_requests=self._bulk_requests,
            mget_requests=self._mget_requests,
            responses_by_status=dict(self._responses),
            items_by_status=dict(store.items_by_status),
            docs_by_index={name: len(idx.docs) for name, idx in store.indices.items()},
            duplicate_applications=store.duplicate_applications,
            duplicate_sources=store.duplicate_sources(),
            dropped_connections=self._dropped,
            hung_requests=self._hung,
            max_in_flight=self._max_in_flight,
            internal_errors=self._internal_errors,
            cpu_seconds=time.thread_time() - self._cpu_start,
        )

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request; raises :class:`DropConnection` to answer nothing."""
        if request.path.startswith("/_control/"):
            return self._control(request)
        self._requests += 1
        content_type = _JSON
        try:
            if self.sigv4 is not None:
                self._check_signature(request)
            content_type = _negotiate(request, opensearch=self.flavor != "elasticsearch")
            response = await self._api(request, content_type)
        except EsRequestError as exc:
            response = HttpResponse(exc.status, exc.body, content_type, exc.headers)
        except DropConnection:
            raise
        except Exception:
            _log.exception(
                "Elasticsearch test endpoint failed on %s %s", request.method, request.path
            )
            self._internal_errors += 1
            body = error_body(500, "exception", "internal error of the test server")
            response = HttpResponse(500, body, content_type)
        self._responses[response.status] = self._responses.get(response.status, 0) + 1
        return response

    async def _api(self, request: HttpRequest, content_type: str) -> HttpResponse:
        path = request.path
        parts = path.strip("/").split("/")
        if "%" in path:
            parts = [unquote(p) for p in parts]
        head = parts[0]
        index = None if head.startswith("_") else head
        action = parts[1] if index is not None and len(parts) > 1 else head
        if action in ("_bulk", "_mget") and len(parts) == (1 if index is None else 2):
            if action == "_bulk":
                self._bulk_requests += 1
            else:
                self._mget_requests += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            try:
                await self._delay_and_authenticate(request)
                _allow(request, ("POST", "PUT") if action == "_bulk" else ("GET", "POST"))
                return await self._data(request, action, index, content_type)
            finally:
                self._in_flight -= 1
        await self._delay_and_authenticate(request)
        method = request.method
        store = self.store
        if head == "" and len(parts) == 1:
            _allow(request, ("GET", "HEAD"))
            info = _INFO if self.flavor == "elasticsearch" else _OPENSEARCH_INFO
            return HttpResponse(200, orjson.dumps(info), content_type)
        if action == "_count" and len(parts) == (1 if index is None else 2):
            _allow(request, ("GET", "POST"))
            return HttpResponse(200, store.count(index), content_type)
        if action == "_refresh" and len(parts) == (1 if index is None else 2):
            _allow(request, ("GET", "POST"))
            shards = {"_shards": {"total": 2, "successful": 1, "failed": 0}}
            if index is not None and index not in store.indices:
                raise index_not_found(index)
            return HttpResponse(200, orjson.dumps(shards), content_type)
        if index is not None and len(parts) == 3 and action == "_doc":
            _allow(request, ("GET", "HEAD"))
            with_source = request.query.get("_source", "true") != "false"
            status, body = store.get(index, parts[2], with_source)
            return HttpResponse(status, body, content_type)
        if index is not None and len(parts) == 1:
            return self._index_admin(request, index, content_type)
        reason = f"no handler found for uri [{path}] and method [{method}]"
        raise EsRequestError(400, "illegal_argument_exception", reason)

    def _check_signature(self, request: HttpRequest) -> None:
        assert self.sigv4 is not None
        target = request.path
        if request.query:
            target += "?" + "&".join(f"{k}={v}" for k, v in request.query.items())
        url = f"http://{request.headers.get('host', '')}{target}"
        refused = verify(self.sigv4, request.method, url, request.headers, request.body)
        if refused is not None:
            status, message = refused
            raise EsRequestError(status, "", "", body=orjson.dumps({"message": message}))

    async def _delay_and_authenticate(self, request: HttpRequest) -> None:
        faults = self._faults
        delay = faults.latency_ms
        if faults.latency_jitter_ms:
            delay += self._rng.random() * faults.latency_jitter_ms
        if delay:
            await asyncio.sleep(delay / 1000)
        if faults.require_auth is not None:
            _check_auth(request, faults.require_auth)

    async def _data(
        self, request: HttpRequest, action: str, index: str | None, content_type: str
    ) -> HttpResponse:
        faults = self._faults
        rng = self._rng
        if self._fail_queue:
            status = self._fail_queue.popleft()
            error_type, reason = _STATUS_ERRORS.get(status, ("exception", "injected failure"))
            headers = _AUTH_CHALLENGE if status == 401 else ()
            body = error_body(status, error_type, reason)
            return HttpResponse(status, body, content_type, headers)
        if faults.timeout_rate and rng.random() < faults.timeout_rate:
            self._hung += 1
            await asyncio.sleep(faults.hang_s)
            raise DropConnection
        if faults.request_throttle_rate and rng.random() < faults.request_throttle_rate:
            error_type, reason = _STATUS_ERRORS[429]
            return HttpResponse(429, error_body(429, error_type, reason), content_type)
        if faults.request_unavailable_rate and rng.random() < faults.request_unavailable_rate:
            error_type, reason = _STATUS_ERRORS[503]
            return HttpResponse(503, error_body(503, error_type, reason), content_type)
        body = _decoded_body(request)
        if action == "_bulk":
            result = self.store.bulk(
                body, index, self._item_fault_drawer(), refuse_ids=self.flavor == "aoss"
            )
        else:
            with_source = request.query.get("_source", "true") != "false"
            result = self.store.mget(body, index, with_source)
        if faults.reset_after_apply_rate and rng.random() < faults.reset_after_apply_rate:
            self._dropped += 1
            raise DropConnection
        return HttpResponse(200, result, content_type)

    def _item_fault_drawer(self) -> Callable[[], int] | None:
        faults = self._faults
        throttle, unavailable = faults.item_throttle_rate, faults.item_unavailable_rate
        if not (throttle or unavailable):
            return None
        draw = self._rng.random

        def item_fault() -> int:
            if throttle and draw() < throttle:
                return 429
            if unavailable and draw() < unavailable:
                return 503
            return 0

        return item_fault

    def _index_admin(self, request: HttpRequest, index: str, content_type: str) -> HttpResponse:
        _allow(request, ("PUT", "DELETE", "GET", "HEAD"))
        store = self.store
        if request.method == "PUT":
            return HttpResponse(200, store.create_index(index), content_type)
        if request.method == "DELETE":
            return HttpResponse(200, store.delete_index(index), content_type)
        if index not in store.indices:
            raise index_not_found(index)
        described: dict[str, object] = {index: {"aliases": {}, "mappings": {}, "settings": {}}}
        return HttpResponse(200, orjson.dumps(described), content_type)

    def _control(self, request: HttpRequest) -> HttpResponse:
        parts = [unquote(p) for p in request.path.split("/")[2:]]
        method = request.method
        if parts == ["stats"] and method == "GET":
            return HttpResponse(200, orjson.dumps(self.stats().to_json()))
        if parts[0] == "documents" and len(parts) == 2 and method == "GET":
            return HttpResponse(200, self.store.documents(parts[1]))
        if parts == ["reset"] and method == "POST":
            self.reset()
            return HttpResponse(200, b'{"acknowledged":true}')
        if parts == ["faults"] and method == "GET":
            return HttpResponse(200, orjson.dumps(self._faults.to_json()))
        if parts == ["faults"] and method == "PUT":
            try:
                faults = EsFaults.from_json(orjson.loads(request.body))
            except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
                return HttpResponse(400, error_body(400, "illegal_argument_exception", str(exc)))
            self.set_faults(faults)
            return HttpResponse(200, b'{"acknowledged":true}')
        reason = f"no control endpoint [{method} {request.path}]"
        return HttpResponse(404, error_body(404, "resource_not_found_exception", reason))


def _negotiate(request: HttpRequest, *, opensearch: bool = False) -> str:
    headers = request.headers
    chosen = _JSON
    for name in ("content-type", "accept"):
        value = headers.get(name)
        if value is None or "compatible-with" not in value:
            continue
        if opensearch:
            body = orjson.dumps(
                {"error": f"Content-Type header [{value}] is not supported", "status": 406}
            )
            raise EsRequestError(406, "", "", body=body)
        match = _COMPAT.search(value)
        version = match.group(1) if match else ""
        if version not in ("7", "8", "9"):
            reason = (
                f"Invalid media-type value on headers [{name}]: "
                f"compatible-with={version!r} is not supported"
            )
            raise EsRequestError(400, "media_type_header_exception", reason)
        if name == "accept":
            chosen = f"application/vnd.elasticsearch+json;compatible-with={version}"
    return chosen


def _check_auth(request: HttpRequest, expected: str) -> None:
    given = request.headers.get("authorization")
    if given is not None and given.strip() == expected:
        return
    reason = (
        f"missing authentication credentials for REST request [{request.path}]"
        if given is None
        else f"unable to authenticate with provided credentials for REST request [{request.path}]"
    )
    challenge = {"WWW-Authenticate": [value for _, value in _AUTH_CHALLENGE]}
    raise EsRequestError(
        401, "security_exception", reason, {"header": challenge}, headers=_AUTH_CHALLENGE
    )


def _allow(request: HttpRequest, methods: tuple[str, ...]) -> None:
    if request.method not in methods:
        reason = (
            f"Incorrect HTTP method for uri [{request.path}] and method [{request.method}], "
            f"allowed: [{', '.join(methods)}]"
        )
        raise EsRequestError(405, "method_not_allowed", reason)


def _decoded_body(request: HttpRequest) -> bytes:
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if not encoding or encoding == "identity":
        return request.body
    if encoding not in ("gzip", "deflate"):
        raise EsRequestError(
            400, "illegal_argument_exception", f"unsupported Content-Encoding [{encoding}]"
        )
    try:
        return zlib.decompress(request.body, 31 if encoding == "gzip" else 15)
    except zlib.error as exc:
        raise EsRequestError(
            400, "illegal_argument_exception", f"cannot decode {encoding} body: {exc}"
        ) from None
