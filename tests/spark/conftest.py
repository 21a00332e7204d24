"""One local Spark session for the whole test run (starting one takes ~10 s), and one
local Spark Connect server with a remote session on it, started when a test first asks.

Both live in this process side by side: the Connect server runs in a child process (see
``connect_server``), as ``remote("local[...]")`` would run it in this one, which would
then refuse the classic session. ``session`` gives a test each of the two in turn.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from asyncsink.testing import Faults, FaultServer

from .connect_server import ConnectServer


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")  # task retries need local[N,F]
        .appName("asyncsink-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from asyncsink.spark import register_data_sources

    register_data_sources(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server() -> Iterator[ConnectServer]:
    with ConnectServer(master="local[2,3]") as running:  # task retries need local[N,F]
        yield running


@pytest.fixture(scope="session")
def connect(connect_server: ConnectServer) -> Iterator[Any]:
    """A Spark Connect session (``pyspark.sql.connect``) on the local Connect server."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = RemoteSparkSession.builder.remote(connect_server.url).getOrCreate()
    from asyncsink.spark import register_data_sources

    register_data_sources(session)
    yield session
    session.stop()


@pytest.fixture(params=["classic", "connect"])
def session(request: pytest.FixtureRequest) -> Any:
    """The classic session, then the Connect one: a test taking it runs against both."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect")


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(Faults(latency_ms=2)) as running:
        yield running
