"""A sink named by a path, and a partition run in this process as a Spark worker runs it:
what it must be, and what a writer that ends the program does to the worker."""

from __future__ import annotations

import decimal
from typing import Any

import pytest

from asyncsink import AsyncSinkWriter, DeadLetter, FatalError, OptionError, SinkOptions
from asyncsink.policies.dead_letter import element_bytes
from asyncsink.spark import SinkSpec
from asyncsink.spark.runner import run_partition


class Counting(AsyncSinkWriter[Any, Any]):
    """Accepts everything; ``raising`` is raised by every request instead."""

    raising: BaseException | None = None
    delivered: list[Any] = []

    def convert(self, element: Any) -> Any:
        return element

    def entry_size(self, entry: Any) -> int:
        return 10

    async def submit_request_entries(self, entries: list[Any]) -> None:
        if self.raising is not None:
            raise self.raising
        Counting.delivered.extend(entries)


class Exiting(Counting):
    raising = SystemExit(7)


class Interrupted(Counting):
    raising = KeyboardInterrupt()


def not_a_writer(options: Any, **kwargs: Any) -> None:
    return None


def takes_no_call_log(options: Any) -> Counting:
    return Counting(options=SinkOptions())


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (f"{__name__}:not_a_writer", "gave NoneType, not an AsyncSinkWriter"),
        ("builtins:dict", "gave dict, not an AsyncSinkWriter"),
        (f"{__name__}:takes_no_call_log", "calling it as a factory, with the options and"),
    ],
)
def test_a_sink_path_that_gives_no_writer_fails_when_a_task_builds_it(
    path: str, message: str
) -> None:
    spec = SinkSpec(path, {})  # the driver checks options; it builds no writer
    with pytest.raises(TypeError, match=message) as caught:
        spec.build()
    assert repr(path) in str(caught.value)


class Unbuildable(Counting):
    """A writer whose constructor must not run on the driver."""

    def __init__(self, **kwargs: Any) -> None:
        raise AssertionError("the driver built a writer")


def test_the_driver_checks_a_writers_options_without_building_it() -> None:
    path = f"{__name__}:Unbuildable"
    spec = SinkSpec(path, {"maxBatchSize": "10"})
    assert spec.writer_options == {"maxBatchSize": "10"}
    with pytest.raises(OptionError, match="maxBatchSize"):
        SinkSpec(path, {"maxBatchSize": "0"})
    with pytest.raises(OptionError, match="unknown option 'maxBatchSise'"):
        SinkSpec(path, {"maxBatchSise": "10"})


@pytest.mark.parametrize("writer", [Exiting, Interrupted])
def test_a_writer_that_ends_the_program_fails_the_task_and_the_worker_lives_on(
    writer: type[Counting],
) -> None:
    with pytest.raises(FatalError, match="the writer ended with"):
        run_partition(SinkSpec(f"{__name__}:{writer.__name__}", {}), [1, 2, 3], "", 0)
    Counting.delivered = []
    result = run_partition(SinkSpec(f"{__name__}:Counting", {}), [4, 5, 6], "", 0)
    assert result.statistics.delivered == 3 and Counting.delivered == [4, 5, 6]


def test_a_dead_letter_writes_decimals_as_the_sinks_do() -> None:
    row = {"id": 1, "amount": decimal.Decimal("286.7143"), "when": object}
    content = element_bytes(row)
    assert b'"amount":"286.7143"' in content
    assert isinstance(DeadLetter(0, "bad", content, "s").record, bytes)


@pytest.mark.parametrize("name", ["Webhook", "web hook", "webhook\n", "", "9lives"])
def test_a_sink_name_of_other_characters_is_refused(name: str) -> None:
    from asyncsink.sinks import register_sink, sink_names

    with pytest.raises(ValueError, match="a sink name is 1-40 lowercase"):
        register_sink(name, "tests.spark.fourth_sink:create_writer")
    assert name not in sink_names()
