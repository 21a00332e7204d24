"""The record store a Spark job may use, decided on the driver before any task starts: no
per-machine SQLite file on a cluster (unless told it is shared), and a PostgreSQL store
that cannot serve is refused with what is wrong and without its password."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from asyncsink.errors import OptionError
from asyncsink.spark import SinkSpec
from asyncsink.spark.spec import is_local_master, master_of
from tests.core.test_connections import closed_port
from tests.servers.postgres import PostgresServer

URL = "http://127.0.0.1:9/in"


class _Context:
    def __init__(self, master: str) -> None:
        self.master = master


class _ClassicSession:
    def __init__(self, master: str) -> None:
        self.sparkContext = _Context(master)


class _Conf:
    def __init__(self, master: str | None) -> None:
        self._master = master

    def get(self, key: str, default: Any = None) -> Any:
        assert key == "spark.master"
        return self._master if self._master is not None else default


class _ConnectSession:
    """Like a Spark Connect session: no SparkContext, a conf read from the server."""

    def __init__(self, master: str | None) -> None:
        self.conf = _Conf(master)

    @property
    def sparkContext(self) -> Any:  # noqa: N802 - Spark's name
        raise RuntimeError("[NOT_IMPLEMENTED] sparkContext() is not implemented.")


class _Frame:
    def __init__(self, session: Any) -> None:
        self.sparkSession = session


def _spec(tmp_path: Path, **options: str) -> SinkSpec:
    return SinkSpec("http", {"url": URL, "sinkId": "orders", **options}).for_spark()


def test_only_local_masters_keep_every_task_on_this_machine() -> None:
    for master in ("local", "local[2]", "local[*]", "local[2,3]", " LOCAL[4] "):
        assert is_local_master(master), master
    for master in ("local-cluster[2,1,1024]", "spark://h:7077", "yarn", "k8s://https://k",
                   "mesos://h:5050", "localhost"):  # fmt: skip
        assert not is_local_master(master), master


def test_the_master_is_read_from_classic_and_connect_sessions() -> None:
    assert master_of(_Frame(_ClassicSession("yarn"))) == "yarn"
    assert master_of(_Frame(_ConnectSession("spark://h:7077"))) == "spark://h:7077"
    assert master_of(_ConnectSession("local[2]")) == "local[2]"
    assert master_of(_Frame(_ConnectSession(None))) is None
    assert master_of(object()) is None


@pytest.mark.parametrize("session", [_ClassicSession, _ConnectSession])
def test_the_default_sqlite_store_is_refused_on_a_cluster_naming_the_cluster_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: Any
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    spec = _spec(tmp_path)
    with pytest.raises(OptionError) as caught:
        spec.check_master(_Frame(session("spark://master.internal:7077")))
    message = str(caught.value)
    assert caught.value.option == "recordStore"
    assert "the default record store" in message and "records.db" in message
    assert "spark://master.internal:7077" in message
    assert "postgresql://" in message and "dynamodb://" in message
    assert "recordStoreScope=machine" in message and "NFS" in message


def test_a_named_sqlite_store_is_refused_too_and_machine_scope_allows_it(
    tmp_path: Path,
) -> None:
    store = f"sqlite://{tmp_path}/shared.db"
    with pytest.raises(OptionError, match="shared.db' is a SQLite file on each machine"):
        _spec(tmp_path, recordStore=store).check_master(_Frame(_ClassicSession("yarn")))
    shared = _spec(tmp_path, recordStore=store, recordStoreScope="machine")
    shared.check_master(_Frame(_ClassicSession("yarn")))
    with pytest.raises(OptionError, match="recordStoreScope"):
        _spec(tmp_path, recordStore=store, recordStoreScope="everywhere")


def test_local_masters_unknown_masters_and_writes_without_sink_id_are_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    _spec(tmp_path).check_master(_Frame(_ClassicSession("local[2,3]")))
    _spec(tmp_path).check_master(_Frame(_ConnectSession(None)))
    SinkSpec("http", {"url": URL}).for_spark().check_master(_Frame(_ClassicSession("yarn")))


def test_a_cluster_store_is_not_refused_on_a_cluster(postgres_url: str) -> None:
    spec = _spec(Path("."), recordStore=f"{postgres_url}?table=t_{uuid.uuid4().hex[:10]}")
    spec.check_master(_Frame(_ClassicSession("spark://h:7077")))


PASSWORD = "dr/iv?er#@:%-Zq7drv"


@pytest.fixture(scope="module")
def role_url(postgres_server: PostgresServer) -> str:
    role = f"driver_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.admin_url(), autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(PASSWORD)
            )
        )
    with psycopg.connect(postgres_server.admin_url("records"), autocommit=True) as conn:
        conn.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
    return (
        f"postgresql://{role}:{quote(PASSWORD, safe='')}@127.0.0.1:{postgres_server.port}/records"
    )


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("login", "password authentication failed"),
        ("port", "refused"),
        ("host", "no-such-host.invalid"),
        ("table", "does not exist"),
        ("schema", "does not match the schema"),
    ],
)
def test_a_postgresql_store_that_cannot_serve_fails_on_the_driver(
    role_url: str, postgres_server: PostgresServer, case: str, reason: str
) -> None:
    table = f"t_{uuid.uuid4().hex[:10]}"
    if case == "schema":
        with psycopg.connect(role_url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table}_scopes (sink_id text)")
            conn.execute(f"CREATE TABLE {table}_records (sink_id text)")
    store = {
        "login": role_url.replace("Zq7drv", "Zq7drvWRONG") + f"?table={table}",
        "port": role_url.replace(f":{postgres_server.port}/", f":{closed_port()}/"),
        "host": role_url.replace("127.0.0.1", "no-such-host.invalid"),
        "table": f"{role_url}?table={table}&create_table=false",
        "schema": f"{role_url}?table={table}",
    }[case]
    with pytest.raises(OptionError) as caught:
        SinkSpec("http", {"url": URL, "sinkId": "orders", "recordStore": store}).for_spark()
    message = str(caught.value)
    assert caught.value.option == "recordStore" and reason in message, message
    for form in (PASSWORD, quote(PASSWORD, safe=""), "Zq7drv"):
        assert form not in message and form not in repr(caught.value)


def test_a_data_source_registered_on_a_cluster_refuses_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncsink.sinks import sink_entry
    from asyncsink.spark.datasource import _on_master, data_source_for

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    source = _on_master(data_source_for(sink_entry("http")), "spark://h:7077")
    assert source.name() == "asyncsink-http" and source.master == "spark://h:7077"
    with pytest.raises(OptionError, match="the default record store"):
        source({"url": URL, "sinkId": "orders"})._spec()
    shared = {"url": URL, "sinkId": "orders", "recordStoreScope": "machine"}
    assert source(shared)._spec().durable.sink_id == "orders"
    local = _on_master(data_source_for(sink_entry("http")), "local[2]")
    assert local({"url": URL, "sinkId": "orders"})._spec().durable.sink_id == "orders"
