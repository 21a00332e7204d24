"""A fault proxy in front of moto's server for the SQS, DynamoDB and Firehose sinks.

moto answers every batch whole. The proxy forwards each request and, on a schedule drawn
from a seeded random generator, answers some batch requests in the API's own shapes:

- ``throttle``: refused whole, without reaching moto (SQS ``RequestThrottled``, DynamoDB
  ``ProvisionedThroughputExceededException``, Firehose ``ServiceUnavailableException``);
- ``partial``: a part of the batch is forwarded, the rest reported failed as the API
  reports it (SQS ``Failed`` entries, DynamoDB ``UnprocessedItems``, Firehose
  ``ErrorCode`` records with ``FailedPutCount``);
- ``lost``: forwarded whole, then answered ``InternalFailure`` (HTTP 500): the batch is
  stored but the client cannot know, and sends it again.

Other requests (reads, table and queue set-up) pass unchanged. ``counts`` says what was
injected. It listens on 127.0.0.1 and stops when its ``with`` block ends.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["AwsFaultProxy"]

_THROTTLE = {
    "AmazonSQS": ("AWS.SimpleQueueService.RequestThrottled", "RequestThrottled"),
    "DynamoDB_20120810": ("ProvisionedThroughputExceededException",) * 2,
    "Firehose_20150804": ("ServiceUnavailableException",) * 2,
}
_BATCHES = {
    "AmazonSQS.SendMessageBatch",
    "DynamoDB_20120810.BatchWriteItem",
    "Firehose_20150804.PutRecordBatch",
}


def _split(target: str, body: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], Any]:
    """The part of a batch to forward, and what tells the answer about the rest."""
    if target.endswith("SendMessageBatch"):
        entries = body["Entries"]
        kept = [entry for entry in entries if rng.random() < 0.6]
        dropped = [entry for entry in entries if entry not in kept]
        return {**body, "Entries": kept}, dropped
    if target.endswith("BatchWriteItem"):
        kept_items: dict[str, Any] = {}
        unprocessed: dict[str, Any] = {}
        for table, requests in body["RequestItems"].items():
            for request in requests:
                side = kept_items if rng.random() < 0.6 else unprocessed
                side.setdefault(table, []).append(request)
        return {**body, "RequestItems": kept_items}, unprocessed
    failed = [rng.random() >= 0.6 for _ in body["Records"]]
    kept_records = [r for r, fail in zip(body["Records"], failed, strict=True) if not fail]
    return {**body, "Records": kept_records}, failed


def _is_empty(part: dict[str, Any]) -> bool:
    return not (part.get("Entries") or part.get("RequestItems") or part.get("Records"))


def _merge(target: str, answer: dict[str, Any], dropped: Any) -> dict[str, Any]:
    """The answer of a batch of which only a part was forwarded."""
    if target.endswith("SendMessageBatch"):
        failed = [
            {
                "Id": entry["Id"],
                "SenderFault": False,
                "Code": "InternalError",
                "Message": "injected",
            }
            for entry in dropped
        ]
        return {**answer, "Failed": [*answer.get("Failed", []), *failed]}
    if target.endswith("BatchWriteItem"):
        unprocessed = answer.setdefault("UnprocessedItems", {})
        for table, requests in dropped.items():
            unprocessed.setdefault(table, []).extend(requests)
        return answer
    forwarded = iter(answer.get("RequestResponses", []))
    responses = [
        {"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "injected"}
        if fail
        else next(forwarded)
        for fail in dropped
    ]
    count = sum(1 for r in responses if "ErrorCode" in r)
    return {**answer, "FailedPutCount": count, "RequestResponses": responses}


class AwsFaultProxy:
    """Forwards to ``upstream`` (moto's server); injects faults into batch requests with
    the given rates (each a probability per batch request), from ``seed``."""

    def __init__(
        self,
        upstream: str,
        *,
        throttle: float = 0.1,
        partial: float = 0.2,
        lost: float = 0.05,
        seed: int = 7,
    ) -> None:
        self.upstream = urlsplit(upstream)
        self.rates = {"throttle": throttle, "partial": partial, "lost": lost}
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.hook: Callable[[str, dict[str, Any]], None] | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> AwsFaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(
            self.upstream.hostname, self.upstream.port, timeout=30
        )
        try:
            headers = {**headers, "Content-Length": str(len(body))}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            kept = {
                k: v
                for k, v in response.getheaders()
                if k.lower()
                in ("content-type", "x-amzn-requestid", "x-amz-crc32", "x-amzn-query-error")
            }
            return response.status, kept, response.read()
        finally:
            connection.close()

    def decide(self, target: str) -> str | None:
        if target not in _BATCHES:
            return None
        with self.lock:
            draw = self.rng.random()
            for fault, rate in self.rates.items():
                if draw < rate:
                    self.counts[fault] += 1
                    return fault
                draw -= rate
        return None

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        target = headers.get("X-Amz-Target", "")
        fault = self.decide(target)
        service = target.split(".")[0]
        if fault == "throttle":
            code, query = _THROTTLE[service]
            error = {"__type": code, "message": "Rate exceeded (injected)"}
            extra = {"x-amzn-query-error": f"{query};Sender"} if service == "AmazonSQS" else {}
            return (
                400,
                {"Content-Type": "application/x-amz-json-1.0", **extra},
                json.dumps(error).encode(),
            )
        if fault == "partial":
            with self.lock:
                part, dropped = _split(target, json.loads(body), self.rng)
            if _is_empty(part):
                status, out, answer = 200, {"Content-Type": "application/x-amz-json-1.0"}, b"{}"
            else:
                status, out, answer = self.forward(method, path, headers, json.dumps(part).encode())
            if status == 200:
                answer = json.dumps(_merge(target, json.loads(answer), dropped)).encode()
                out.pop("x-amz-crc32", None)
            return status, out, answer
        status, out, answer = self.forward(method, path, headers, body)
        if fault == "lost" and status == 200:
            error = {"__type": "InternalFailure", "message": "injected after storing"}
            return 500, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(error).encode()
        return status, out, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "content-length"}
                status, out, answer = proxy.handle(self.command, self.path, headers, body)
                self.send_response(status)
                for name, value in out.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                try:
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):  # a killed writer
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any

        return Handler
