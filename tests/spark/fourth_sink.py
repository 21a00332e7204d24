"""A sink from outside the package: JSON arrays POSTed with httpx, registered by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from asyncsink import AsyncSinkWriter, RetryableError, SinkOptions, current_call
from asyncsink.options import Options, option, parse_options


@dataclass(frozen=True, kw_only=True, repr=False)
class PostOptions(Options):
    url: str = option(kind="str", doc="Where each batch is POSTed.")


class PostWriter(AsyncSinkWriter[Any, bytes]):
    takes_mappings = True

    def __init__(self, post: PostOptions, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = post.url

    def convert(self, row: Any) -> bytes:
        return orjson.dumps(row if isinstance(row, dict) else row.asDict())

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        headers = {"Idempotency-Key": current_call().idempotency_key}
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                self.url,
                content=b"[" + b",".join(entries) + b"]",
                headers={**headers, "Content-Type": "application/json"},
            )
        if answer.status_code >= 300:
            raise RetryableError(f"HTTP {answer.status_code}")


def create_writer(options: Mapping[str, Any], **kwargs: Any) -> PostWriter:
    post, rest = parse_options(PostOptions, options)
    return PostWriter(post, options=SinkOptions.from_options(rest), **kwargs)
