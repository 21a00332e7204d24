"""One local Spark session for the whole test run (starting one takes ~10 s)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from asyncsink.testing import Faults, FaultServer


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


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(Faults(latency_ms=2)) as running:
        yield running
