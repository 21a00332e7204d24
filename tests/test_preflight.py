"""Spark's Python workers run an interpreter that cannot import asyncsink: in local mode the
driver finds out before any task starts, and says what to set, instead of every task
failing with a bare ModuleNotFoundError."""

from __future__ import annotations

import logging
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncsink import SparkSetupError
from asyncsink.spark import foreach_partition, preflight
from asyncsink.spark.preflight import check_workers


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class Context:
    """What the check reads of a ``SparkContext``."""

    def __init__(self, master: str, python: str = "python3", **conf: str) -> None:
        self.master = master
        self.pythonExec = python
        self.conf = Conf(conf)
        self.listFiles: list[str] = []  # noqa: N815 - Spark's name

    def getConf(self) -> Conf:  # noqa: N802 - Spark's name
        return self.conf


class DataFrame:
    """A DataFrame that fails the test if a job were started from it."""

    def __init__(self, context: Context) -> None:
        self.sparkSession = type("Session", (), {"sparkContext": context})()

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a Spark job was started (df.{name})")


@pytest.fixture(autouse=True)
def fresh_answers() -> Iterator[None]:
    preflight._answers.clear()
    yield
    preflight._answers.clear()


class CountingContext(Context):
    """Counts how often its conf is read (each read is many calls into the JVM)."""

    reads = 0

    def getConf(self) -> Conf:  # noqa: N802 - Spark's name
        self.reads += 1
        return self.conf


def test_a_context_found_fit_is_not_read_again() -> None:
    context = CountingContext("local[2]", python=sys.executable)
    check_workers(context)
    reads = context.reads
    assert reads > 0
    for _ in range(5):
        check_workers(context)
    assert context.reads == reads


def test_a_context_found_unfit_is_checked_again(bare_python: Path) -> None:
    context = CountingContext("local[2]", python=str(bare_python))
    for _ in range(2):
        with pytest.raises(SparkSetupError):
            check_workers(context)


@pytest.fixture
def bare_python(tmp_path: Path) -> Path:
    """An interpreter without asyncsink; it counts how often it is asked."""
    script = tmp_path / "python-without-asyncsink"
    script.write_text(
        "#!/bin/sh\n"
        f"echo asked >> {tmp_path / 'asked'}\n"
        "echo \"ModuleNotFoundError: No module named 'asyncsink'\" >&2\n"
        "exit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_worker_python_without_asyncsink_fails_on_the_driver_saying_what_to_set(
    bare_python: Path,
) -> None:
    with pytest.raises(SparkSetupError) as caught:
        check_workers(Context("local[2]", python=str(bare_python)))
    message = str(caught.value)
    assert str(bare_python) in message and "(PYSPARK_PYTHON)" in message
    assert "No module named 'asyncsink'" in message
    assert f"set PYSPARK_PYTHON={sys.executable}" in message


def test_the_conf_names_the_workers_python_too(bare_python: Path) -> None:
    context = Context("local-cluster[2,1,1024]", **{"spark.pyspark.python": str(bare_python)})
    with pytest.raises(SparkSetupError, match="the conf spark.pyspark.python"):
        check_workers(context)


def test_the_answer_is_asked_once_per_process(bare_python: Path) -> None:
    for _ in range(3):
        with pytest.raises(SparkSetupError):
            check_workers(Context("local[2]", python=str(bare_python)))
    assert (bare_python.parent / "asked").read_text().count("asked") == 1


def test_foreach_partition_fails_before_any_job(bare_python: Path) -> None:
    df = DataFrame(Context("local[2]", python=str(bare_python)))
    with pytest.raises(SparkSetupError):
        foreach_partition(df, "http", {"url": "http://127.0.0.1:8080/in"})


def test_the_drivers_own_python_and_remote_clusters_are_not_asked(bare_python: Path) -> None:
    check_workers(Context("local[2]", python=sys.executable))
    check_workers(Context("yarn", python=str(bare_python)))
    check_workers(Context("spark://host:7077", python=str(bare_python)))
    check_workers(object())  # no SparkContext to read
    assert not (bare_python.parent / "asked").exists()


def test_what_cannot_be_told_for_sure_only_warns(
    bare_python: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shipped = Context("local[2]", python=str(bare_python))
    shipped.listFiles = ["spark://driver:7078/files/deps.zip"]  # may hold asyncsink
    with caplog.at_level(logging.WARNING, "asyncsink.spark"):
        check_workers(shipped)
        check_workers(Context("local[2]", python="/nowhere/bin/python3"))
    assert "cannot import asyncsink" in caplog.text
    assert "'/nowhere/bin/python3' (PYSPARK_PYTHON), which is not found here" in caplog.text
