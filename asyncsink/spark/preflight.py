"""A check, on the driver, that Spark's Python workers can import asyncsink.

Spark starts its Python workers with the interpreter named by the conf
``spark.pyspark.python``, else the ``PYSPARK_PYTHON`` environment variable, else
``python3`` from ``PATH``. When that is not the Python asyncsink is installed in, every
task fails with a bare ``ModuleNotFoundError: No module named 'asyncsink'``, once the job
has started. In local mode (``local[...]``, ``local-cluster[...]``) the workers run on
this machine, so the driver can ask that interpreter first, and fail with what to set.

The answer is cached per interpreter for the life of the process, and a SparkContext
found fit is not looked at again (its workers' interpreter is fixed when it starts): the
entry points call ``check_workers`` for every job and micro-batch at no cost after the
first (reading a context's conf alone takes tens of milliseconds of calls into the JVM).

A Spark Connect session has no ``SparkContext``, and its workers run on the server, out of
sight: the check is skipped there, and a log line says so once per process.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import weakref
from typing import Any

from ..errors import SparkSetupError
from .connect import is_connect

__all__ = ["check_workers"]

log = logging.getLogger("asyncsink.spark")

_IMPORT_CHECK = "import asyncsink.sinks"  # the sinks install inside asyncsink
_PYTHON_FILES = (".py", ".zip", ".egg")  # what addPyFile ships (listFiles holds them)
_answers: dict[str, tuple[bool, str] | None] = {}  # interpreter -> (certain, problem)
_lock = threading.Lock()
_checked: weakref.WeakSet[Any] = weakref.WeakSet()  # contexts already checked
_said_connect = False  # whether the skip under Spark Connect was logged


def check_workers(spark: Any) -> None:
    """Fail now if Spark's Python workers cannot import asyncsink, when that can be told
    from the driver: in local mode, by running the interpreter they will run. Elsewhere,
    or when it cannot be told for sure (the interpreter is not found here, or the job
    ships Python files of its own), a warning says what to check.

    Args:
        spark: a ``SparkSession``, a ``DataFrame`` or a ``SparkContext``; under Spark
            Connect (no ``SparkContext``), and for anything else, nothing is checked.

    Raises:
        SparkSetupError: the workers' interpreter cannot import asyncsink, with what to
            set instead.
    """
    if is_connect(spark):
        _skipped_under_connect()
        return
    context = _context(spark)
    if context is None or context in _checked:
        return
    if not str(context.master).startswith("local"):
        _checked.add(context)
        return
    for python, source in _worker_pythons(context):
        answer = _answer(python, source)
        if answer is None:
            continue
        certain, problem = answer
        if certain and not _ships_python_files(context):
            raise SparkSetupError(problem)
        log.warning("%s", problem)
    _checked.add(context)


def _skipped_under_connect() -> None:
    global _said_connect
    with _lock:
        if _said_connect:
            return
        _said_connect = True
    log.info(
        "Spark Connect session: the check that Spark's Python workers can import asyncsink "
        "is skipped (they run on the server, out of this process's sight); asyncsink must "
        "be installed in the server's Python, where the data sources and foreachBatch run"
    )


def _context(spark: Any) -> Any:
    """The classic ``SparkContext`` behind ``spark``, or ``None``."""
    from pyspark.sql import Column

    for path in (("sparkSession", "sparkContext"), ("sparkContext",), ()):
        target = spark
        try:
            for name in path:
                target = getattr(target, name)
        except Exception:
            continue
        # A DataFrame gives a Column for a column's name: never take one for a context.
        if isinstance(target, Column) or is_connect(target):
            continue
        if hasattr(target, "master") and hasattr(target, "getConf"):
            return target
    return None


def _worker_pythons(context: Any) -> list[tuple[str, str]]:
    """The interpreters the workers may run, each with where it comes from."""
    found: list[tuple[str, str]] = []
    conf = context.getConf()
    for key in ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON"):
        if conf.get(key):
            found.append((conf.get(key), f"the conf {key}"))
    python = getattr(context, "pythonExec", None) or os.environ.get("PYSPARK_PYTHON")
    if python and python != "python3":
        found.append((python, "PYSPARK_PYTHON"))
    if not found:
        found.append(("python3", "python3 on PATH, as PYSPARK_PYTHON is not set"))
    return found


def _answer(python: str, source: str) -> tuple[bool, str] | None:
    with _lock:
        if python not in _answers:
            _answers[python] = _ask(python, source)
        return _answers[python]


def _ask(python: str, source: str) -> tuple[bool, str] | None:
    """``None`` if ``python`` imports asyncsink, else whether that is certain and why."""
    fix = (
        f"set PYSPARK_PYTHON={sys.executable} before the SparkSession starts (or the conf "
        "spark.pyspark.python), or install asyncsink into that interpreter"
    )
    executable = shutil.which(python)
    if executable is None:
        return False, (
            f"Spark's Python workers run {python!r} ({source}), which is not found here; "
            f"if the tasks fail with ModuleNotFoundError, {fix}"
        )
    if os.path.abspath(executable) == os.path.abspath(sys.executable):
        return None
    try:
        result = subprocess.run(
            [executable, "-c", _IMPORT_CHECK],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"cannot tell whether {python!r} ({source}) imports asyncsink: {exc}"
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines()
    reason = lines[-1] if lines else f"exit status {result.returncode}"
    return True, (
        f"Spark's Python workers run {python!r} ({source}), which cannot import "
        f"asyncsink ({reason}): {fix}"
    )


def _ships_python_files(context: Any) -> bool:
    """Whether the job sends Python files to its workers (``--py-files``,
    ``addPyFile``), which may hold asyncsink: the check then only warns."""
    if context.getConf().get("spark.submit.pyFiles"):
        return True
    return any(path.lower().endswith(_PYTHON_FILES) for path in context.listFiles)
