"""Kinesis errors, sorted the way the writer acts on them.

A whole PutRecords request fails with an AWS error code (a botocore ``ClientError``), an
HTTP status without a body, or a transport error. ``translate_error`` turns each into the
writer's vocabulary:

- ``ThrottledError``: the stream or its KMS key pushes back (retried, the window shrinks);
- ``RetryableError``: a server-side or transport failure (retried with backoff);
- ``FatalError``: retrying cannot help (a missing stream, denied access, invalid
  credentials, a malformed or oversized request, broken configuration): the task fails at
  once with a message naming the stream, the code and what to check.

An answer botocore's response parser cannot take (``Records`` that is not a list of
objects, a body that is not a JSON object) surfaces as a plain ``AttributeError`` or
``TypeError`` raised inside that parser; it is a ``RetryableError`` too, since it cannot
say which records were stored.

Records that fail inside an accepted request carry their own ``ErrorCode``; those are
sorted by ``THROTTLING_CODES`` and retried one by one (see ``asyncsink.sinks.kinesis.answers``).
"""

from __future__ import annotations

from collections.abc import Mapping

from asyncsink.errors import DestinationError

from ..aws import errors as aws_errors
from ..aws.errors import (
    CREDENTIAL_HINTS,
    RETRYABLE_CODES,
    THROTTLING_CODES,
    MaskedError,
    never_connected,
)

__all__ = [
    "FATAL_CODES",
    "RETRYABLE_CODES",
    "THROTTLING_CODES",
    "MaskedError",
    "never_connected",
    "translate_error",
]

_KMS_HINT = "the stream's KMS key cannot be used; check the key's state and policy"

FATAL_CODES: Mapping[str, str] = {
    "ResourceNotFoundException": "the stream does not exist in this account and region; "
    "check streamName/streamArn and region",
    "AccessDeniedException": "the credentials may not call kinesis:PutRecords on this stream",
    "KMSAccessDeniedException": "the credentials may not use the stream's KMS key "
    "(kms:GenerateDataKey)",
    "KMSDisabledException": _KMS_HINT,
    "KMSInvalidStateException": _KMS_HINT,
    "KMSNotFoundException": _KMS_HINT,
    "KMSOptInRequired": "the account is not subscribed to AWS KMS",
    "ValidationException": "the request is malformed (a record or key beyond its limits?)",
    "InvalidArgumentException": "the request is malformed (an explicit hash key out of range?)",
    **CREDENTIAL_HINTS,
}
"""Codes that retrying cannot fix, with what to check. Any other 4xx is fatal too."""


def translate_error(exc: BaseException, stream: str) -> DestinationError | None:
    """The writer's error for a failed PutRecords request to ``stream``, or ``None`` when
    ``exc`` is not an AWS or transport error nor a parser's failure to read the answer (a
    bug, which the writer treats as fatal); see ``asyncsink.sinks.aws.errors``.

    Raise the result ``from exc``: the original stays attached as the cause.
    """
    where = f"Kinesis stream {stream!r}"
    return aws_errors.translate_error(exc, where, "PutRecords", FATAL_CODES)
