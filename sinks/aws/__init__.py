"""What the AWS sinks share (Kinesis, SQS, DynamoDB, Firehose): the options that say where
a service is and whose credentials reach it (``AwsSinkOptions``), the per-loop
aiobotocore clients (``clients``), the translation of botocore's errors into the writer's
(``errors``), and a writer base that sends one batch operation (``AwsWriter``)."""

from .clients import ClientSettings, close_clients, get_client, open_client_count
from .errors import translate_error
from .options import AwsSinkOptions
from .writer import AwsWriter

__all__ = [
    "AwsSinkOptions",
    "AwsWriter",
    "ClientSettings",
    "close_clients",
    "get_client",
    "open_client_count",
    "translate_error",
]
