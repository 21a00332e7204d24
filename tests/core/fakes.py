"""An in-process fake destination for writer tests: a handler decides each request's fate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from asyncsink import AsyncSinkWriter, CallInfo, SubmitResult, current_call

Handler = Callable[[list[Any], CallInfo], Awaitable[Any] | Any]


class Destination:
    """Records what it accepted; a handler may fail requests or entries first."""

    def __init__(self, handler: Handler | None = None, *, latency: float = 0.0) -> None:
        self.handler = handler
        self.latency = latency
        self.accepted: list[Any] = []
        self.requests: list[list[Any]] = []
        self.keys: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def receive(self, entries: list[Any]) -> Any:
        call = current_call()
        self.requests.append(list(entries))
        self.keys.append(call.idempotency_key)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await anyio.sleep(self.latency)
            answer = None
            if self.handler is not None:
                answer = self.handler(entries, call)
                if isinstance(answer, Awaitable):
                    answer = await answer
            self._accept(entries, answer)
            return answer
        finally:
            self.in_flight -= 1

    def _accept(self, entries: list[Any], answer: Any) -> None:
        if isinstance(answer, SubmitResult):
            skip = set(answer.retry) | set(answer.rejected)
            self.accepted.extend(e for i, e in enumerate(entries) if i not in skip)
        elif answer:
            failed = {id(e) for e in answer}
            self.accepted.extend(e for e in entries if id(e) not in failed)
        else:
            self.accepted.extend(entries)

    def duplicates(self) -> int:
        return sum(n - 1 for n in Counter(self.accepted).values() if n > 1)


class FakeWriter(AsyncSinkWriter[Any, Any]):
    """Entries are the elements themselves; each counts ``size`` bytes."""

    def __init__(self, destination: Destination, *, size: int = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.destination = destination
        self.size = size

    def convert(self, element: Any) -> Any:
        if isinstance(element, dict) and element.get("unconvertible"):
            raise ValueError("cannot convert this one")
        return element

    def entry_size(self, entry: Any) -> int:
        if isinstance(entry, bytes):
            return len(entry)
        return self.size

    async def submit_request_entries(
        self, entries: list[Any]
    ) -> Sequence[Any] | SubmitResult | None:
        result: Any = await self.destination.receive(entries)
        return result
