"""A sink of your own: format("asyncsink-collector") POSTs JSON arrays to an endpoint."""

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from asyncsink import AsyncSinkWriter, FatalError, Reconcile, RetryableError, current_call
from asyncsink.masking import mask_url
from asyncsink.options import Options, option
from asyncsink.sinks import register_sink


@dataclass(frozen=True, kw_only=True, repr=False)
class CollectorOptions(Options):
    endpoint: str = option(kind="str", doc="URL each batch is POSTed to.")  # required
    status_url: str = option("", doc="URL of a call's status; {key} is its key.")


class CollectorWriter(AsyncSinkWriter[Any, bytes]):
    takes_mappings = True  # rows read through Arrow arrive as dicts
    reconciliation = Reconcile.BY_CALL  # it has a reconcile: a lost call is asked about

    def __init__(self, own: CollectorOptions, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # options=..., call_log=...
        self.own = own

    def describe_destination(self) -> str:  # for logs and errors: never a secret
        return f"collector at {mask_url(self.own.endpoint)}"

    def convert(self, row: Any) -> bytes:
        return orjson.dumps(row if isinstance(row, dict) else row.asDict(recursive=True))

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        headers = {"Idempotency-Key": current_call().idempotency_key}
        async with httpx.AsyncClient(timeout=30) as client:
            body = b"[" + b",".join(entries) + b"]"
            answer = await client.post(self.own.endpoint, content=body, headers=headers)
        if answer.status_code >= 400:  # 429 and 5xx are worth a retry; the rest is fatal
            retry = answer.status_code == 429 or answer.status_code >= 500
            raise (RetryableError if retry else FatalError)(f"HTTP {answer.status_code}")

    async def reconcile(self, call: Any) -> list[int] | None:  # what a lost call delivered
        if not self.own.status_url:
            return None  # cannot tell: the call is sent again with its key
        url = self.own.status_url.format(key=call.idempotency_key)
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.get(url)
        done = answer.status_code == 200 and answer.json().get("state") == "completed"
        return list(call.seqs) if done else [] if answer.status_code == 404 else None


def register() -> None:  # before register_data_sources(spark); executors import this module
    register_sink("collector", "custom_sink:CollectorWriter", "custom_sink:CollectorOptions")
