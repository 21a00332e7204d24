"""Session-scoped local AWS emulators for the test suite, bound to 127.0.0.1 only.

- ``dynalite_endpoint``: dynalite (npm), a DynamoDB emulator without transactions.
- ``kinesalite_endpoint``: kinesalite (npm), a Kinesis emulator.
- ``moto_endpoint``: moto's server (Python), which also runs DynamoDB transactions; it is
  served one request at a time, so each request is atomic as on the real service.

Each server listens on a free port that the server picks itself, writes it to a file the
fixture reads, is polled until it answers (bounded), and is stopped at the end of the
session. The npm packages are installed into ``tests/servers/node`` on first use.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

__all__ = ["dynalite_endpoint", "kinesalite_endpoint", "moto_endpoint"]

NODE_DIR = Path(__file__).parent / "node"
START_TIMEOUT_S = 30.0
NPM_TIMEOUT_S = 600.0

_NODE_SERVER = """
const fs = require('fs');
const server = require(process.argv[1])(JSON.parse(process.argv[2]));
server.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(process.argv[3] + '.tmp', String(server.address().port));
  fs.renameSync(process.argv[3] + '.tmp', process.argv[3]);
});
"""

_MOTO_SERVER = """
import copy, os, sys, types
from werkzeug.serving import make_server
from moto.dynamodb import models
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app,
)

# moto backs up a table once per action of a transaction, before running any of them, so
# that it can roll back; one copy per table and transaction is the same backup, and keeps
# transactions on tables of thousands of items fast. Requests run one at a time here.
transact_write_items = models.DynamoDBBackend.transact_write_items

def transact_once(self, transact_items):
    backups = {}
    def deepcopy_once(value):
        if not isinstance(value, Table):
            return copy.deepcopy(value)
        if id(value) not in backups:
            backups[id(value)] = (value, copy.deepcopy(value))
        return backups[id(value)][1]
    models.copy = types.SimpleNamespace(deepcopy=deepcopy_once)
    try:
        return transact_write_items(self, transact_items)
    finally:
        models.copy = copy

models.DynamoDBBackend.transact_write_items = transact_once
server = make_server(
    "127.0.0.1", 0, DomainDispatcherApplication(create_backend_app),
    threaded=False, request_handler=MotoRequestHandler,
)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(server.server_port))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
"""


def _ensure_node_modules() -> None:
    """Install the npm emulators once (under a file lock, for parallel test runs)."""
    wanted = [NODE_DIR / "node_modules" / name for name in ("dynalite", "kinesalite")]
    if all(path.is_dir() for path in wanted):
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("the emulator tests need Node.js and npm on PATH (deselect: -m 'not emulator')")
    with open(Path(tempfile.gettempdir()) / "asyncsink-npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(path.is_dir() for path in wanted):
            return
        result = subprocess.run(
            [npm, "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"npm install in {NODE_DIR} failed:\n{result.stdout}\n{result.stderr}")


def _run_server(
    name: str, argv: Sequence[str], workdir: Path, env: dict[str, str], probe: bytes
) -> Iterator[str]:
    """Start a server that writes its port to a file; yield its URL; stop it."""
    port_file = workdir / f"{name}.port"
    with open(workdir / f"{name}.log", "wb") as log:
        process = subprocess.Popen(
            [*argv, str(port_file)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = _wait_until_up(name, process, port_file, probe, workdir / f"{name}.log")
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_until_up(
    name: str, process: subprocess.Popen[bytes], port_file: Path, probe: bytes, log: Path
) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    url: str | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{name} exited with {process.returncode}:\n{log.read_text()}")
        if url is None and port_file.exists():
            url = f"http://127.0.0.1:{int(port_file.read_text())}"
        if url is not None and _answers(url, probe):
            return url
        time.sleep(0.05)
    pytest.fail(f"{name} did not answer within {START_TIMEOUT_S:.0f} s:\n{log.read_text()}")


def _answers(url: str, probe: bytes) -> bool:
    """True once the server sends any HTTP response to a small request."""
    request = urllib.request.Request(url, data=probe, method="POST")
    request.add_header("Content-Type", "application/x-amz-json-1.0")
    try:
        with urllib.request.urlopen(request, timeout=2):
            return True
    except urllib.error.HTTPError as error:
        error.close()
        return True
    except OSError:
        return False


def _node_server(package: str, options: str, workdir: Path) -> Iterator[str]:
    _ensure_node_modules()
    node = shutil.which("node")
    if node is None:
        pytest.fail("the emulator tests need Node.js on PATH (deselect: -m 'not emulator')")
    env = {**os.environ, "NODE_PATH": str(NODE_DIR / "node_modules")}
    module = str(NODE_DIR / "node_modules" / package)
    yield from _run_server(
        package, [node, "-e", _NODE_SERVER, module, options], workdir, env, b"{}"
    )


@pytest.fixture(scope="session")
def dynalite_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a dynalite DynamoDB emulator on 127.0.0.1 (no transactions)."""
    workdir = tmp_path_factory.mktemp("dynalite")
    yield from _node_server("dynalite", '{"createTableMs": 0}', workdir)


@pytest.fixture(scope="session")
def kinesalite_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a kinesalite Kinesis emulator on 127.0.0.1 (streams ready after 50 ms)."""
    workdir = tmp_path_factory.mktemp("kinesalite")
    yield from _node_server("kinesalite", '{"createStreamMs": 50}', workdir)


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a moto server on 127.0.0.1 (DynamoDB with transactions, Kinesis, ...)."""
    workdir = tmp_path_factory.mktemp("moto")
    argv = [sys.executable, "-c", _MOTO_SERVER]
    yield from _run_server("moto", argv, workdir, dict(os.environ), b"{}")
