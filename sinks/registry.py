"""The built-in sinks register themselves here, under their names, in the sink registry
(``asyncsink.plugins.sinks``, whose functions this module also offers). Each is named by
``"module:attribute"`` paths, imported only when the sink is first used."""

from __future__ import annotations

from asyncsink.plugins.sinks import (
    SinkEntry,
    build_writer,
    register_sink,
    sink_entry,
    sink_names,
)

__all__ = ["SinkEntry", "build_writer", "register_sink", "sink_entry", "sink_names"]

register_sink(
    "http",
    "asyncsink.sinks.http:HttpWriter",
    "asyncsink.sinks.http:HttpOptions",
    install_hint="pip install asyncsink",
    json_rows=True,
)
register_sink(
    "kinesis",
    "asyncsink.sinks.kinesis:KinesisWriter",
    "asyncsink.sinks.kinesis:KinesisOptions",
    install_hint="pip install asyncsink[kinesis]",
)
register_sink(
    "elasticsearch",
    "asyncsink.sinks.elasticsearch:ElasticsearchWriter",
    "asyncsink.sinks.elasticsearch:ElasticsearchOptions",
    install_hint="pip install asyncsink",
)
register_sink(
    "sqs",
    "asyncsink.sinks.sqs:SqsWriter",
    "asyncsink.sinks.sqs:SqsOptions",
    install_hint="pip install asyncsink[aws]",
)
register_sink(
    "firehose",
    "asyncsink.sinks.firehose:FirehoseWriter",
    "asyncsink.sinks.firehose:FirehoseOptions",
    install_hint="pip install asyncsink[aws]",
)
register_sink(
    "dynamodb",
    "asyncsink.sinks.dynamodb:DynamoDBWriter",
    "asyncsink.sinks.dynamodb:DynamoDBOptions",
    install_hint="pip install asyncsink[aws]",
)
