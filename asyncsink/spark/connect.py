"""Telling a Spark Connect session or DataFrame from a classic one.

Under Spark Connect there is no ``SparkContext``, no ``df.rdd`` and no JVM handle, and a
``foreachBatch`` function runs in a Python process on the server. Every path that needs
one of them asks ``is_connect`` first. It tests the object's class: duck typing lies on a
Connect DataFrame, where any attribute (``df.master``, ``df.sparkContext``) is a column.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_connect", "remote_only"]

_CONNECT_CLASSES = (
    ("pyspark.sql.connect.dataframe", "DataFrame"),
    ("pyspark.sql.connect.session", "SparkSession"),
)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (a DataFrame or a SparkSession) belongs to a Spark Connect session.

    A class that is not imported yet has no instances: the Connect modules (which need
    grpc) are never imported here.
    """
    for module_name, class_name in _CONNECT_CLASSES:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(spark, getattr(module, class_name)):
            return True
    return False


def remote_only() -> bool:
    """Whether this Python process runs Spark Connect sessions only: PySpark marks it so
    once a ``SparkSession.builder.remote(...)`` session started (no classic session can
    start in it after that), and in the server's ``foreachBatch`` worker."""
    module = sys.modules.get("pyspark.sql.utils")
    return bool(module is not None and module.is_remote())
