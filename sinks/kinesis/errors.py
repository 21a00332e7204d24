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

import asyncio
from collections.abc import Mapping

import aiohttp
from botocore import exceptions as boto

from asyncsink.clients.connections import never_opened
from asyncsink.errors import DestinationError, FatalError, RetryableError, ThrottledError

__all__ = [
    "FATAL_CODES",
    "RETRYABLE_CODES",
    "THROTTLING_CODES",
    "MaskedError",
    "never_connected",
    "translate_error",
]

THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "LimitExceededException",
        "KMSThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
    }
)
"""Codes that mean: slow down, then retry."""

RETRYABLE_CODES = frozenset(
    {
        "InternalFailure",
        "InternalFailureException",
        "InternalServerError",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)
"""Codes of transient server-side failures."""

_CREDENTIALS_HINT = "check the credentials (awsAccessKeyId, awsSecretAccessKey, awsSessionToken)"
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
    "UnrecognizedClientException": _CREDENTIALS_HINT,
    "InvalidSignatureException": _CREDENTIALS_HINT,
    "IncompleteSignature": _CREDENTIALS_HINT,
    "InvalidClientTokenId": _CREDENTIALS_HINT,
    "MissingAuthenticationToken": _CREDENTIALS_HINT,
    "ExpiredTokenException": "the session token has expired",
    "413": "the request is larger than the endpoint accepts; lower maxBatchSizeInBytes",
}
"""Codes that retrying cannot fix, with what to check. Any other 4xx is fatal too."""


class MaskedError(Exception):
    """Stands in for the cause of a writer's error whose text held a credential: its type's
    name and its text, with the credentials masked."""


def translate_error(exc: BaseException, stream: str) -> DestinationError | None:
    """The writer's error for a failed PutRecords request to ``stream``, or ``None`` when
    ``exc`` is not an AWS or transport error nor a parser's failure to read the answer (a
    bug, which the writer treats as fatal).

    Raise the result ``from exc``: the original stays attached as the cause.
    """
    if isinstance(exc, boto.ClientError):
        return _client_error(exc, stream)
    where = f"Kinesis stream {stream!r}"
    name = type(exc).__name__
    if isinstance(exc, boto.SSLError):
        return FatalError(f"{where}: TLS failed ({exc}); check endpointUrl and certificates")
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return FatalError(f"{where}: {exc}; set awsAccessKeyId and awsSecretAccessKey or "
                          "configure the default credential chain")  # fmt: skip
    if isinstance(exc, boto.CredentialRetrievalError | boto.NoRegionError):
        return FatalError(f"{where}: {exc}")
    if isinstance(
        exc,
        boto.ConnectionError
        | boto.HTTPClientError
        | boto.IncompleteReadError
        | boto.ResponseStreamingError
        | aiohttp.ClientError
        | asyncio.TimeoutError
        | OSError,
    ):
        return RetryableError(f"{where}: request failed: {name}: {exc}")  # no answer
    if isinstance(exc, boto.BotoCoreError):
        return FatalError(f"{where}: {name}: {exc}")
    if _raised_reading_answer(exc):
        return RetryableError(
            f"{where}: the PutRecords answer cannot be parsed ({name}: {exc}); cannot tell "
            "which records were stored"
        )
    return None


_PARSERS = frozenset({"botocore.parsers", "aiobotocore.parsers"})


def _raised_reading_answer(exc: BaseException) -> bool:
    """Whether ``exc`` is a parser's stumble over an answer of the wrong shape: raised in
    botocore's response parsers (their ``ResponseParserError`` included), or where
    aiobotocore takes their result in."""
    frame = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") in _PARSERS:
            return True
        tb = tb.tb_next
    return (
        isinstance(exc, AttributeError | TypeError)
        and frame is not None
        and frame.f_globals.get("__name__") == "aiobotocore.endpoint"
        and frame.f_code.co_name == "_do_get_response"
    )


def _client_error(exc: boto.ClientError, stream: str) -> DestinationError:
    error = exc.response.get("Error", {})
    metadata = exc.response.get("ResponseMetadata", {})
    status = metadata.get("HTTPStatusCode")
    code = str(error.get("Code") or status or "unknown")
    message = str(error.get("Message") or "").strip()
    detail = f": {message}" if message else ""
    http = f" (HTTP {status})" if status else ""
    where = f"Kinesis stream {stream!r}: PutRecords failed with {code}{http}"
    if code in THROTTLING_CODES or status == 429:
        return ThrottledError(f"{where}{detail}", status=code)
    if code in RETRYABLE_CODES or (isinstance(status, int) and status >= 500):
        return RetryableError(f"{where}{detail}", status=code)
    hint = FATAL_CODES.get(code)
    suffix = f"; {hint}" if hint else ""
    return FatalError(f"{where}{detail}{suffix}", status=code)


def never_connected(exc: BaseException) -> bool:
    """Whether ``exc`` (what ``translate_error`` was given) says the request never left:
    no connection could be opened to the endpoint. botocore raises
    ``EndpointConnectionError`` as well for a connection that dropped after the request
    left (a reset while reading the answer): the error it wraps tells them apart."""
    if isinstance(exc, boto.ConnectTimeoutError):
        return True
    if not isinstance(exc, boto.EndpointConnectionError):
        return False
    wrapped = exc.kwargs.get("error")
    return isinstance(wrapped, aiohttp.ClientConnectorError) or (
        isinstance(wrapped, BaseException) and never_opened(wrapped)
    )
