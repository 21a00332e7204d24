"""The chaos suite shares the test run's one Spark session (see ``tests/spark/conftest.py``)."""

from tests.spark.conftest import spark  # noqa: F401
