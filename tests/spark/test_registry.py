"""A sink registered from outside the package is a first-class sink: foreach_batch,
foreach_partition and format("asyncsink-<name>") all find it by name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from asyncsink import OptionError
from asyncsink.plugins import sinks as registry
from asyncsink.sinks import register_sink, sink_names
from asyncsink.spark import foreach_batch, register_data_sources
from asyncsink.testing import FaultServer

from .test_spark import assert_exactly_once, rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def poster(spark: Any) -> Iterator[str]:
    """The sink ``poster``, registered for this module's tests only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "_SINKS", registry._SINKS.copy())
        register_sink(
            "poster", "tests.spark.fourth_sink:create_writer", "tests.spark.fourth_sink:PostOptions"
        )
        register_data_sources(spark)
        yield "poster"


def test_a_registered_sink_writes_through_foreach_batch(
    poster: str, spark: Any, server: FaultServer
) -> None:
    sink = foreach_batch(poster, {"url": server.ingest_url, "maxBatchSize": "100"})
    sink(rows(spark, 900), 0)
    assert_exactly_once(server, 900)
    assert sink.statistics[0].delivered == 900
    assert "poster" in sink_names()


def test_a_registered_sink_is_a_data_source(poster: str, spark: Any, server: FaultServer) -> None:
    rows(spark, 700).write.format(f"asyncsink-{poster}").option("url", server.ingest_url).option(
        "sinkId", "poster-ds"
    ).mode("append").save()
    assert_exactly_once(server, 700)


def test_a_registered_sink_checks_its_options_on_the_driver(poster: str) -> None:
    with pytest.raises(OptionError, match="urll"):
        foreach_batch(poster, {"urll": "http://127.0.0.1:9/x"})
    with pytest.raises(ValueError, match="already registered"):
        register_sink("poster", "tests.spark.fourth_sink:PostWriter")
