"""Every option of every sink, given a wrong type, a value out of its range or a misspelled
name, fails on the driver, when the job is declared, before Spark runs anything: the
message names the option, shows the value (never a secret's) and states the rule.

The options come from ``option_specs`` of each group a sink reads (the writer's
``SinkOptions``, the sink's own and the Spark integration's ``DurableOptions``), so an
option added later is fuzzed too, and must be given an out-of-range value below or be
listed among the free-text options.
"""

from __future__ import annotations

import contextlib
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from asyncsink import OptionError
from asyncsink.options import OptionSpec, SinkOptions, option_specs
from asyncsink.sinks import sink_names, sink_options
from asyncsink.spark import SinkSpec, foreach_batch
from asyncsink.spark.spec import DurableOptions

BASE: dict[str, dict[str, Any]] = {
    "http": {"url": "http://127.0.0.1:8080/in"},
    "kinesis": {"streamName": "orders", "region": "us-east-1"},
    "elasticsearch": {"hosts": "http://127.0.0.1:9200", "index": "orders"},
    "sqs": {"queueName": "orders", "region": "us-east-1"},
    "firehose": {"deliveryStreamName": "orders", "region": "us-east-1"},
    "dynamodb": {"tableName": "orders", "keyFields": "id", "region": "us-east-1"},
}
WRONG_TYPE = 12345  # a Python int where a string, a boolean or a choice is expected
WRONG_NUMBER = "lots"  # a string that is no number, where a number is expected
KEYS = {"awsAccessKeyId": "AKIDEXAMPLE", "awsSecretAccessKey": "wJalrXUtnFEMI"}
ROLE = {"awsRoleArn": "arn:aws:iam::123456789012:role/writer"}
OAUTH2 = {"oauth2TokenUrl": "https://auth.example/token", "oauth2ClientId": "job",
          "oauth2ClientSecret": "s3cret"}  # fmt: skip


def _client_cert() -> str:
    """A real client certificate file, so that a wrong clientKey is what fails."""
    import tempfile

    import trustme

    folder = tempfile.mkdtemp(prefix="asyncsink-fuzz-")
    issued = trustme.CA().issue_cert("client.example")
    path = f"{folder}/client.pem"
    issued.cert_chain_pems[0].write_to_path(path)
    return path


CLIENT_CERT = _client_cert()

# Option -> (a value out of its range, options it needs beside it to reach its own check;
# None removes a base option). Numbers below their minimum are derived, not listed.
OUT_OF_RANGE: dict[str, tuple[Any, dict[str, Any]]] = {
    "url": ("http://127.0.0.1:99999/in", {}),
    "method": ("patch", {}),
    "headers": ('{"X-Team": "\u00e9quipe"}', {}),
    "bearerToken": ("t\u00f6ken", {}),
    "basicUsername": ("user:name", {}),
    "basicPassword": ("", {"basicUsername": "user"}),
    "apiKey": ("k\u00e9y", {}),
    "apiKeyHeader": ("X API Key", {"apiKey": "key"}),
    "bodyFormat": ("xml", {}),
    "contentType": ("t\u00e9xt/plain", {}),
    "decimalAs": ("float", {}),
    "timeZone": ("Mars/Olympus_Mons", {}),
    "gzipLevel": ("10", {}),
    "idempotencyHeader": ("Idempotency Key", {}),
    "reconcileUrl": ("http://127.0.0.1:8080/status", {}),
    "hosts": ("http://127.0.0.1:99999", {}),
    "index": ("Orders", {}),
    "operation": ("upsert", {}),
    "versionType": ("internal", {"versionField": "lsn"}),
    "compatibilityVersion": ("7", {}),
    "streamName": ("orders!", {}),
    "streamArn": ("arn:aws:kinesis:us-east-1:stream/orders", {"streamName": None}),
    "region": ("us east 1", {}),
    "endpointUrl": ("http://127.0.0.1:99999", {}),
    "awsAccessKeyId": ("AKID \u00e9", {"awsSecretAccessKey": "wJalrXUtnFEMI"}),
    "awsSecretAccessKey": ("s\u00e9cret", {"awsAccessKeyId": "AKIDEXAMPLE"}),
    "awsSessionToken": ("t\u00f6ken", KEYS),
    "partitionKeyMode": ("shard", {}),
    "partitionKeyField": (" , ", {}),
    "partitionKey": ("k" * 257, {}),
    "explicitHashKeyField": ("", {}),
    "payloadField": ("", {}),
    "maxRecordSizeInBytes": ("10485761", {}),  # Kinesis: above 10 MiB; the core: below 1
    "awsService": ("Open Search", {"region": "us-east-1"}),
    "awsRoleArn": ("arn:aws:iam::123:role/writer", {}),
    "awsExternalId": ("ext\u00e9rnal", ROLE),
    "awsRoleSessionName": ("a b", ROLE),
    "oauth2TokenUrl": (
        "ftp://auth.example/token",
        {k: v for k, v in OAUTH2.items() if k != "oauth2TokenUrl"},
    ),
    "oauth2ClientId": ("j\u00f6b", {k: v for k, v in OAUTH2.items() if k != "oauth2ClientId"}),
    "oauth2ClientSecret": (
        "s3\ncret",
        {k: v for k, v in OAUTH2.items() if k != "oauth2ClientSecret"},
    ),
    "oauth2Scope": ("r\u00e9ad", OAUTH2),
    "oauth2Audience": ("\u00e0udience", OAUTH2),
    "oauth2ClientAuth": ("jwt", {}),
    "clientCert": ("/nonexistent/client.pem", {}),
    "clientKey": ("/nonexistent/client.key", {"clientCert": CLIENT_CERT}),
    "clientKeyPassword": ("p\u00e4ss\nword", {"clientCert": CLIENT_CERT}),
    "queueUrl": ("ftp://sqs.example/1/orders", {"queueName": None}),
    "queueName": ("orders!", {}),
    "messageGroupIdField": ("", {}),
    "messageAttributesFields": (",".join("abcdefghijk"), {}),
    "bodyField": ("", {}),
    "deliveryStreamName": ("orders!", {}),
    "tableName": ("ab", {}),
    "keyFields": ("a,b,c", {}),
    "operationField": ("", {}),
    "recordStore": ("mysql://db.example/records", {"sinkId": "fuzz"}),
    "recordStoreScope": ("everywhere", {"sinkId": "fuzz"}),
    "orderingKey": (" , ", {}),
    "onRetriesExhausted": ("skip", {}),
    "successStatusCodes": ("200-600", {}),
    "retryStatusCodes": ("5xx", {}),
    "badRecordStatusCodes": ("422,99", {}),
}
# Options whose every string is allowed: only their type and their name can be wrong.
FREE_TEXT = {
    "deadLetter": "a path, read where the writer runs",
    "entryEncoder": "a callable, from Python only",
    "parseResponse": "a callable, from Python only",
    "partitionKeyFn": "a callable, from Python only",
    "caBundle": "a path, read where the writer runs",
    "indexField": "a field name",
    "idField": "a field name",
    "routingField": "a field name",
    "operationField": "a field name",
    "versionField": "a field name",
    "excludeFields": "field names",
    "pipeline": "a pipeline name",
    "sinkId": "any name",
    "writer": "module:Class, checked when the generic data source builds it",
}
# Booleans have no range: any value but true or false is of the wrong type.


def options_of(sink: str) -> list[OptionSpec]:
    groups = [SinkOptions, sink_options(sink), DurableOptions]
    return [spec for group in groups for spec in option_specs(group)]


CASES = [(sink, spec) for sink in sink_names() for spec in options_of(sink)]
IDS = [f"{sink}-{spec.spark_name}" for sink, spec in CASES]
RANGED = [(case, i) for case, i in zip(CASES, IDS, strict=True)
          if case[1].kind != "bool" and case[1].spark_name not in FREE_TEXT]  # fmt: skip


def declare(sink: str, **changes: Any) -> OptionError:
    """Declare a job writing through ``sink`` with the base options changed; return the
    error raised on the driver."""
    options = {**BASE[sink]}
    for name, value in changes.items():
        if value is None:
            options.pop(name, None)
        else:
            options[name] = value
    with pytest.raises(OptionError) as caught:
        SinkSpec(sink, options)
    return caught.value


def assert_explains(error: OptionError, spec: OptionSpec, value: Any) -> None:
    message = str(error)
    assert error.option == spec.spark_name, message
    assert repr(spec.spark_name) in message, message
    assert error.allowed and error.allowed in message, message
    shown = str(value)
    if spec.secret:
        assert shown not in message or not shown, message
        assert "<hidden>" in message, message
    elif spec.spark_name == "headers" and isinstance(value, str):
        assert "\u00e9quipe" not in message and "<value of X-Team>" in message, message
    else:
        assert shown in message or f"<{type(value).__name__}>" in message, message


def test_every_option_is_fuzzed() -> None:
    names = {spec.spark_name for _, spec in CASES}
    numbers = {spec.spark_name for _, spec in CASES if spec.minimum is not None}
    booleans = {spec.spark_name for _, spec in CASES if spec.kind == "bool"}
    unclassified = names - OUT_OF_RANGE.keys() - FREE_TEXT.keys() - numbers - booleans
    assert not unclassified, f"give these options an out-of-range value: {unclassified}"
    assert not (OUT_OF_RANGE.keys() | FREE_TEXT.keys()) - names  # no stale entry


@pytest.mark.parametrize(("sink", "spec"), CASES, ids=IDS)
def test_a_wrong_type_fails_on_the_driver_naming_option_value_and_rule(
    sink: str, spec: OptionSpec
) -> None:
    value: Any = WRONG_NUMBER if spec.kind in ("int", "size", "duration", "float") else WRONG_TYPE
    error = declare(sink, **{spec.spark_name: value})
    assert_explains(error, spec, value)


@pytest.mark.parametrize(("sink", "spec"), [c for c, _ in RANGED], ids=[i for _, i in RANGED])
def test_a_value_out_of_range_fails_on_the_driver_naming_option_value_and_rule(
    sink: str, spec: OptionSpec
) -> None:
    name = spec.spark_name
    if name in OUT_OF_RANGE and not (name == "maxRecordSizeInBytes" and sink != "kinesis"):
        value, needs = OUT_OF_RANGE[name]
    else:
        assert spec.minimum is not None
        value, needs = str(int(spec.minimum) - 1), {}
    error = declare(sink, **needs, **{name: value})
    assert_explains(error, spec, value)
    if spec.minimum is not None and name not in OUT_OF_RANGE:
        assert f">= {spec.minimum:g}" in str(error)  # the rule, not "expected an integer"


@pytest.mark.parametrize(("sink", "spec"), CASES, ids=IDS)
@pytest.mark.parametrize("lowercased", [False, True], ids=["as-typed", "as-data-source"])
def test_a_misspelled_name_suggests_the_option_and_lists_all_without_the_value(
    sink: str, spec: OptionSpec, lowercased: bool
) -> None:
    name = spec.spark_name[:-2] + spec.spark_name[-1]  # one letter dropped
    if lowercased:  # Spark's Python data sources hand over option names lowercased
        name = name.lower()
    secret = "s3cr3t/?#@:%\u00e9-value"
    error = declare(sink, **{name: secret})
    message = str(error)
    assert f"unknown option {name!r}" in message
    assert f"did you mean {spec.spark_name!r}?" in message
    assert secret not in message
    for known in ("sinkId", "recordStore", "batchId", "retainBatches", "maxBatchSize"):
        assert known in message


def test_negative_numbers_state_the_minimum() -> None:
    error = declare("http", maxInFlightRequests="-3")
    assert str(error) == "option 'maxInFlightRequests': got -3, expected an integer >= 1"


def test_foreach_batch_fails_at_declaration_and_starts_no_spark_job() -> None:
    pyspark = pytest.importorskip("pyspark")
    context = pyspark.SparkContext._active_spark_context  # the suite's session, if it ran
    jobs = set(context.statusTracker().getJobIdsForGroup()) if context is not None else set()
    for sink, options in BASE.items():
        with pytest.raises(OptionError, match="did you mean 'maxBatchSize'"):
            foreach_batch(sink, {**options, "maxBatchSise": "10"}, sink_id="fuzz")
        with pytest.raises(OptionError, match="maxInFlightRequests.*>= 1"):
            foreach_batch(sink, {**options, "maxInFlightRequests": "-3"}, sink_id="fuzz")
    assert pyspark.SparkContext._active_spark_context is context  # none was started
    if context is not None:
        assert set(context.statusTracker().getJobIdsForGroup()) == jobs


@pytest.mark.parametrize("spelling", ["sinkId", "sinkid", "SINKID"])
def test_a_sink_id_given_as_an_option_and_a_keyword_must_agree(spelling: str) -> None:
    options = {"url": "http://127.0.0.1:9/in", spelling: "orders"}
    assert foreach_batch("http", options, sink_id="orders").spec.durable.sink_id == "orders"
    with pytest.raises(OptionError) as caught:
        foreach_batch("http", options, sink_id="payments")
    assert str(caught.value) == (
        f"option 'sinkId' is given twice, as {spelling!r} ('orders') in the options and as "
        "sink_id='payments': give it once"
    )


@pytest.mark.parametrize("sink_id", ["", "  ", "a/b"])
def test_a_sink_id_spark_cannot_name_scopes_with_fails_on_the_driver(sink_id: str) -> None:
    with pytest.raises(OptionError) as caught:
        foreach_batch("http", {"url": "http://127.0.0.1:9/in"}, sink_id=sink_id)
    assert str(caught.value) == (
        f"option 'sinkId': got {sink_id!r}, expected a name that is not blank and holds no '/'"
    )


def test_a_batch_id_without_a_sink_id_fails_on_the_driver() -> None:
    with pytest.raises(OptionError, match="option 'batchId' \\(5\\) names a run of call records"):
        SinkSpec("http", {"url": "http://127.0.0.1:9/in", "batchId": "5"})


def test_records_in_memory_are_refused_for_spark() -> None:
    options = {"url": "http://127.0.0.1:9/in", "recordStore": "memory://runs"}
    with pytest.raises(OptionError, match="keeps call records in one Python process"):
        foreach_batch("http", options, sink_id="orders")
    SinkSpec("http", {**options, "sinkId": "orders"})  # outside Spark (tests): as before


def test_a_record_store_without_a_sink_id_fails_on_the_driver() -> None:
    with pytest.raises(OptionError, match="option 'recordStore' says where call records live"):
        SinkSpec("http", {"url": "http://127.0.0.1:9/in", "recordStore": "sqlite:///r.db"})


def test_a_batch_id_on_a_stream_fails_on_the_driver() -> None:
    options = {"url": "http://127.0.0.1:9/in", "batchId": "5"}
    with pytest.raises(OptionError, match="option 'batchId' \\(5\\) names the run of a batch"):
        foreach_batch("http", options, sink_id="orders")


def test_a_relative_sqlite_store_is_pinned_to_the_drivers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    options = {"url": "http://127.0.0.1:9/in", "sinkId": "orders"}
    spec = SinkSpec("http", {**options, "recordStore": "sqlite://runs/r.db?timeout=5"})
    pinned = spec.for_spark().durable.store_url
    assert pinned == f"sqlite://{tmp_path}/runs/r.db?timeout=5"
    assert (tmp_path / "runs" / "r.db").is_file()  # opened once, as a task would
    monkeypatch.chdir(tmp_path / "runs")  # the driver moves on: the tasks' file stays
    assert pickle.loads(pickle.dumps(spec)).durable.store_url == pinned


@pytest.mark.parametrize("where", ["a directory", "another program's", "under a file"])
def test_a_sqlite_store_that_cannot_serve_fails_on_the_driver(tmp_path: Path, where: str) -> None:
    path = tmp_path / "store.db"
    if where == "a directory":
        path.mkdir()
    elif where == "another program's":
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("CREATE TABLE accounts (id INTEGER)")
    else:
        path.write_text("not a directory")
        path = path / "r.db"
    options = {"url": "http://127.0.0.1:9/in", "recordStore": f"sqlite://{path}"}
    with pytest.raises(OptionError, match="option 'recordStore': .*the SQLite file") as caught:
        foreach_batch("http", options, sink_id="orders")
    assert caught.value.option == "recordStore" and str(path) in str(caught.value)
    if where == "another program's":  # left as it was: no tables of ours, no WAL
        with contextlib.closing(sqlite3.connect(path)) as conn:
            tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master")]
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        assert (tables, mode) == (["accounts"], "delete")
