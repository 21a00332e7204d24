"""A TCP proxy on 127.0.0.1 that plays a server whose keep-alive timeout fires late.

A server closes a keep-alive connection once it has been idle for its timeout; a busy one
(a single-threaded emulator, an endpoint under load) closes it late, when a client may
already have sent the next request on it, and that request is reset. The proxy makes the
race certain: the first bytes a client sends on a connection that has been idle for
``idle_s`` or longer (since the last bytes of an answer went back) are not forwarded, and
the connection is reset (``SO_LINGER`` 0, so the client reads ``ECONNRESET``).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from types import TracebackType


class IdleResettingProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``; ``resets`` counts the
    connections reset for being reused after ``idle_s``. Use as a context manager."""

    def __init__(self, target_port: int, idle_s: float) -> None:
        self.target_port = target_port
        self.idle_s = idle_s
        self.resets = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> IdleResettingProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.port = started.result(timeout=10)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        answered: float | None = None  # when the last bytes of an answer went back

        async def answers() -> None:
            nonlocal answered
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
                answered = time.monotonic()
            writer.close()

        relay = asyncio.create_task(answers())
        try:
            while data := await reader.read(65536):
                if answered is not None and time.monotonic() - answered >= self.idle_s:
                    self.resets += 1
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                up_writer.write(data)
                await up_writer.drain()
        except ConnectionError:
            pass
        finally:
            relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)
            for stream in (up_writer, writer):
                stream.close()
                try:
                    await stream.wait_closed()
                except (ConnectionError, asyncio.CancelledError):
                    pass
