"""A local Spark Connect server in a process of its own, for the Connect tests.

``remote("local[...]")`` starts the server inside the calling process, which then cannot
hold a classic session too (and every later session there becomes a Connect one). The
tests run both, so the server runs here, in a child process, as the server a
``remote("local[...]")`` client starts for itself: a classic session with Spark's Connect
plugin. The child serves until its standard input closes.

    python -m tests.spark.connect_server MASTER PORT
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


class ConnectServer:
    """Start a Connect server (``start()`` returns once it listens), stop it with ``stop()``.

    Args:
        master: the server's Spark master (``local[2,3]``: task retries need ``local[N,F]``).
        start_timeout_s: how long ``start()`` waits for the port to accept connections.
    """

    def __init__(self, master: str = "local[2,3]", start_timeout_s: float = 180.0) -> None:
        self.master = master
        self.start_timeout_s = start_timeout_s
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None
        # The server's output (its foreachBatch workers print each batch) goes to a file.
        self.log = tempfile.NamedTemporaryFile(prefix="asyncsink-connect-", suffix=".log")

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> ConnectServer:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        # the credentials a cluster's role would give: DynamoDB record stores on the
        # emulators take them from the server's environment
        env.setdefault("AWS_ACCESS_KEY_ID", "testing")
        env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
        for name in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
            env.pop(name, None)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.connect_server", self.master, str(self.port)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=_ROOT,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while not _listening(self.port):
            if self._process.poll() is not None:
                code = self._process.returncode
                raise RuntimeError(f"the Connect server exited ({code}):\n{self.output()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the Connect server did not listen in {self.start_timeout_s}s:\n"
                    + self.output()
                )
            time.sleep(0.2)
        return self

    def output(self, lines: int = 40) -> str:
        """The last lines the server printed."""
        with open(self.log.name, errors="replace") as text:
            return "".join(text.readlines()[-lines:])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            self.log.close()
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.log.close()

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _serve(master: str, port: int) -> None:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName("asyncsink-connect-tests")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", str(port))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        sys.stdin.read()  # serve until the parent closes our standard input (or dies)
    finally:
        session.stop()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
