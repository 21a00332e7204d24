"""Options from Python keywords and from Spark's string options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from asyncsink import OptionError, SinkOptions
from asyncsink.options import SPARK_OPTIONS, Options, option, option_specs, parse_options
from asyncsink.sinks import sink_factory


def test_spark_strings_parse_case_insensitively_with_units() -> None:
    opts = SinkOptions.from_options(
        {
            "MAXBATCHSIZE": "100",
            "maxBatchSizeInBytes": "5mb",
            "maxrecordsizeinbytes": "64kb",
            "maxTimeInBufferMs": "2s",
            "failOnTimeout": "true",
            "rateLimiting": "off",
            "deadLetter": "/tmp/dlq.jsonl",
        }
    )
    assert opts.max_batch_size == 100
    assert opts.max_batch_size_in_bytes == 5 * 1024 * 1024
    assert opts.max_record_size_in_bytes == 64 * 1024
    assert opts.max_time_in_buffer_ms == 2000
    assert opts.fail_on_timeout is True
    assert opts.rate_limiting is False
    assert opts.dead_letter == "/tmp/dlq.jsonl"


@pytest.mark.parametrize(
    ("text", "size"),
    [("5 MiB", 5 * 1024**2), ("5mib", 5 * 1024**2), ("64 KiB", 65536), ("1 GiB", 1024**3),
     ("3000 bytes", 3000), ("2 MB", 2 * 1024**2), ("64k", 65536), ("5m", 5 * 1024**2),
     ("1g", 1024**3), ("1.5kb", 1536)],
)  # fmt: skip
def test_sizes_take_the_spellings_the_option_tables_print(text: str, size: int) -> None:
    opts = SinkOptions.from_options({"maxBatchSizeInBytes": text, "maxRecordSizeInBytes": "1kb"})
    assert opts.max_batch_size_in_bytes == size


def test_defaults_match_the_documented_table() -> None:
    opts = SinkOptions()
    assert (opts.max_batch_size, opts.max_batch_size_in_bytes, opts.max_record_size_in_bytes) == (
        500,
        5 * 1024 * 1024,
        1024 * 1024,
    )
    assert (opts.max_buffered_requests, opts.max_time_in_buffer_ms) == (10_000, 5000)
    assert (opts.max_in_flight_requests, opts.request_timeout_ms) == (128, 60_000)
    assert opts.adaptive_concurrency is True
    assert (opts.max_retries, opts.initial_backoff_ms, opts.max_backoff_ms) == (10, 100, 10_000)
    assert opts.rate_limiting is True


@pytest.mark.parametrize(
    ("raw", "named", "shown"),
    [
        ({"maxBatchSize": "lots"}, "maxBatchSize", "an integer"),
        ({"maxBatchSize": "0"}, "maxBatchSize", ">= 1"),
        ({"maxBatchSize": "1.5"}, "maxBatchSize", "an integer"),
        ({"maxBatchSizeInBytes": "5 parsecs"}, "maxBatchSizeInBytes", "a size"),
        ({"failOnTimeout": "maybe"}, "failOnTimeout", "true or false"),
        ({"requestTimeoutMs": "soon"}, "requestTimeoutMs", "a duration"),
        ({"maxRecordSizeInBytes": "10mb"}, "maxRecordSizeInBytes", "at most maxBatchSizeInBytes"),
        ({"initialBackoffMs": "20s"}, "initialBackoffMs", "at most maxBackoffMs"),
        # A bound given below another option's default: the error says whose default.
        ({"maxBatchSizeInBytes": "64kb"}, "maxRecordSizeInBytes", "is its default, above"),
        ({"maxBackoffMs": "50"}, "initialBackoffMs", "is its default, above the maxBackoffMs"),
        ({"deadLetter": ""}, "deadLetter", "a file path or a callable, not blank"),
        ({"deadLetter": "   "}, "deadLetter", "a file path or a callable, not blank"),
        ({"maxBatchSize": "5", "MaxBatchSize": "6"}, "maxBatchSize", "given twice"),
        ({"maxBatchSize": "5", "max_batch_size": 6}, "maxBatchSize", "given twice"),
        ({"maxRetries": "9" * 5000}, "maxRetries", "... (5002 characters), expected an"),
    ],
)
def test_invalid_values_name_the_option_the_value_and_what_is_allowed(
    raw: dict[str, str], named: str, shown: str
) -> None:
    with pytest.raises(OptionError) as caught:
        SinkOptions.from_options(raw)
    assert caught.value.option == named
    assert named in str(caught.value) and shown in str(caught.value)


def test_an_option_given_twice_with_one_value_is_that_value() -> None:
    assert SinkOptions.from_options({"maxBatchSize": "5", "maxbatchsize": "5"}).max_batch_size == 5


def test_integers_parse_exactly_however_large() -> None:
    opts = SinkOptions.from_options({"maxBatchSize": "99999999999999999999999999"})
    assert opts.max_batch_size == 99999999999999999999999999


def test_python_keywords_are_validated_too() -> None:
    with pytest.raises(OptionError, match="maxInFlightRequests"):
        SinkOptions(max_in_flight_requests=0)
    with pytest.raises(OptionError, match="maxBatchSize.*an integer"):
        SinkOptions(max_batch_size="10")  # type: ignore[arg-type]


def test_unknown_options_are_an_error_listing_the_known_ones() -> None:
    with pytest.raises(OptionError) as caught:
        SinkOptions.from_options({"maxBatchSise": "10"})
    assert "unknown option 'maxBatchSise'" in str(caught.value)
    assert "maxBatchSize" in str(caught.value)


@pytest.mark.parametrize("sink", ["http", "kinesis", "elasticsearch"])
@pytest.mark.parametrize("name", ["sinkId", "batchid", "recordStore", "retainBatches", "writer"])
def test_a_spark_option_outside_spark_says_where_it_belongs(sink: str, name: str) -> None:
    required = {
        "http": {"url": "http://127.0.0.1:9"},
        "kinesis": {"streamName": "s", "region": "us-east-1"},
        "elasticsearch": {"hosts": "http://127.0.0.1:9", "index": "i"},
    }[sink]
    with pytest.raises(OptionError) as caught:
        sink_factory(sink)({**required, name: "secret-value"})
    message = str(caught.value)
    assert caught.value.option == name
    assert "belongs to the Spark entry points" in message
    assert "call_log=CallLog(store, Scope(...))" in message
    assert "secret-value" not in message


def test_the_spark_options_are_those_of_the_spark_integration() -> None:
    from asyncsink.spark.spec import DurableOptions

    assert sorted(SPARK_OPTIONS) == sorted(s.spark_name for s in option_specs(DurableOptions))


@dataclass(frozen=True, kw_only=True, repr=False)
class _WithSecret(Options):
    token: str | None = option(None, secret=True, doc="A bearer token.")
    mode: Literal["json", "ndjson"] = option("json", doc="Body format.")


def test_secrets_are_masked_in_repr_and_errors() -> None:
    opts = _WithSecret(token="hunter2")
    assert "hunter2" not in repr(opts) and "***" in repr(opts)
    with pytest.raises(OptionError) as caught:
        _WithSecret.from_options({"tokn": "hunter2"})
    assert "hunter2" not in str(caught.value)
    assert _WithSecret.from_options({"MODE": "NDJSON"}).mode == "ndjson"
    with pytest.raises(OptionError, match="mode.*one of json, ndjson"):
        _WithSecret.from_options({"mode": "xml"})


def test_groups_claim_their_keys_and_pass_on_the_rest() -> None:
    sink, rest = parse_options(SinkOptions, {"maxBatchSize": "7", "token": "x"})
    assert sink.max_batch_size == 7 and rest == {"token": "x"}
    names = [spec.spark_name for spec in option_specs(SinkOptions)]
    assert names[:3] == ["maxBatchSize", "maxBatchSizeInBytes", "maxRecordSizeInBytes"]
    assert all(spec.doc for spec in option_specs(SinkOptions))
