"""The sink registry: a writer class and its options class, the options split and checked
by the framework (required ones included) on the driver, without building a writer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from asyncsink import AsyncSinkWriter, OptionError
from asyncsink.options import Options, option
from asyncsink.plugins import sinks as registry
from asyncsink.sinks import register_sink, sink_factory
from asyncsink.spark import SinkSpec


@dataclass(frozen=True, kw_only=True, repr=False)
class MetricsOptions(Options):
    api: str = option(kind="str", doc="The metrics API.")
    token: str = option("", secret=True, doc="A token.")


class MetricsWriter(AsyncSinkWriter[Any, bytes]):
    built = 0

    def __init__(self, own: MetricsOptions, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        MetricsWriter.built += 1
        self.own = own

    def convert(self, element: Any) -> bytes:
        return bytes(element)

    def entry_size(self, entry: bytes) -> int:
        return len(entry)

    async def submit_request_entries(self, entries: list[bytes]) -> None:
        return None


@pytest.fixture
def metrics(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(registry, "_SINKS", registry._SINKS.copy())
    register_sink("metrics", MetricsWriter, MetricsOptions)
    MetricsWriter.built = 0
    return "metrics"


def test_a_missing_required_option_is_named_with_its_sink(metrics: str) -> None:
    with pytest.raises(OptionError, match=r"^option 'api' is required by the metrics sink$"):
        SinkSpec(metrics, {"maxBatchSize": "10", "token": "s3cret"})
    with pytest.raises(OptionError, match="option 'api' is required by the metrics sink"):
        sink_factory(metrics)({})
    assert MetricsWriter.built == 0


def test_the_driver_checks_options_without_building_the_writer(metrics: str) -> None:
    spec = SinkSpec(metrics, {"api": "https://m.example/v1", "maxBatchSize": "10"})
    assert MetricsWriter.built == 0
    with pytest.raises(OptionError, match="unknown option 'apii'"):
        SinkSpec(metrics, {"apii": "x"})
    with pytest.raises(OptionError, match="maxBatchSize"):
        SinkSpec(metrics, {"api": "x", "maxBatchSize": "0"})
    writer: Any = spec.build()  # what each task does
    assert MetricsWriter.built == 1
    assert writer.own.api == "https://m.example/v1" and writer.options.max_batch_size == 10


@pytest.mark.parametrize(
    ("sink", "options", "missing"),
    [("http", {}, "url"), ("elasticsearch", {"index": "i"}, "hosts")],
)
def test_built_in_sinks_name_their_required_options(
    sink: str, options: dict[str, str], missing: str
) -> None:
    message = f"option '{missing}' is required by the {sink} sink"
    with pytest.raises(OptionError, match=message):
        SinkSpec(sink, options)
    with pytest.raises(OptionError, match=message):
        sink_factory(sink)(options)


def test_kinesis_limits_are_checked_on_the_driver() -> None:
    with pytest.raises(OptionError, match="maxBatchSize"):
        SinkSpec("kinesis", {"streamName": "s", "region": "us-east-1", "maxBatchSize": "501"})


def test_a_secret_never_shows_in_a_missing_option_error(metrics: str) -> None:
    with pytest.raises(OptionError) as caught:
        SinkSpec(metrics, {"token": "s3cret-value"})
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(caught.value)
