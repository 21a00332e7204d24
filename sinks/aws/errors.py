"""AWS errors, sorted the way the writer acts on them, for every AWS sink.

A whole request fails with an AWS error code (a botocore ``ClientError``), an HTTP status
without a body, or a transport error. ``translate_error`` turns each into the writer's
vocabulary:

- ``ThrottledError``: the service or its KMS key pushes back (retried, the window shrinks);
- ``RetryableError``: a server-side or transport failure (retried with backoff);
- ``FatalError``: retrying cannot help (a missing resource, denied access, invalid
  credentials, a malformed or oversized request, broken configuration): the task fails at
  once with a message naming the resource, the code and what to check (the sink's
  ``hints``).

An answer botocore's response parser cannot take surfaces as a plain ``AttributeError`` or
``TypeError`` raised inside that parser; it is a ``RetryableError`` too, since it cannot
say which entries were stored.

Entries that fail inside an accepted request carry codes of their own; a sink sorts those
with ``THROTTLING_CODES`` and ``RETRYABLE_CODES``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import aiohttp
from botocore import exceptions as boto

from asyncsink.clients.connections import never_opened
from asyncsink.errors import DestinationError, FatalError, RetryableError, ThrottledError

__all__ = [
    "CREDENTIAL_HINTS",
    "RETRYABLE_CODES",
    "THROTTLING_CODES",
    "MaskedError",
    "never_connected",
    "scrub",
    "shown_cause",
    "translate_error",
]

THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "LimitExceededException",
        "KMSThrottlingException",
        "KmsThrottled",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "ThrottledException",
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

CREDENTIAL_HINTS: Mapping[str, str] = {
    "UnrecognizedClientException": _CREDENTIALS_HINT,
    "InvalidSignatureException": _CREDENTIALS_HINT,
    "SignatureDoesNotMatch": _CREDENTIALS_HINT,
    "IncompleteSignature": _CREDENTIALS_HINT,
    "InvalidClientTokenId": _CREDENTIALS_HINT,
    "MissingAuthenticationToken": _CREDENTIALS_HINT,
    "ExpiredTokenException": "the session token has expired",
    "413": "the request is larger than the endpoint accepts; lower maxBatchSizeInBytes",
}
"""What to check for the codes every AWS service answers about credentials and size."""


class MaskedError(Exception):
    """Stands in for the cause of a writer's error whose text held a credential: its type's
    name and its text, with the credentials masked."""


def translate_error(
    exc: BaseException, where: str, operation: str, hints: Mapping[str, str]
) -> DestinationError | None:
    """The writer's error for a failed ``operation`` request to ``where`` (``"SQS queue
    'q'"``), or ``None`` when ``exc`` is not an AWS or transport error nor a parser's
    failure to read the answer (a bug, which the writer treats as fatal). ``hints`` say
    what to check for fatal codes.

    Raise the result ``from exc``: the original stays attached as the cause.
    """
    if isinstance(exc, boto.ClientError):
        return _client_error(exc, where, operation, hints)
    name = type(exc).__name__
    if isinstance(exc, boto.SSLError):
        return FatalError(f"{where}: TLS failed ({exc}); check endpointUrl and certificates")
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return FatalError(
            f"{where}: {exc}; set awsAccessKeyId and awsSecretAccessKey or "
            "configure the default credential chain"
        )
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
            f"{where}: the {operation} answer cannot be parsed ({name}: {exc}); cannot tell "
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


def _client_error(
    exc: boto.ClientError, where: str, operation: str, hints: Mapping[str, str]
) -> DestinationError:
    error = exc.response.get("Error", {})
    metadata = exc.response.get("ResponseMetadata", {})
    status = metadata.get("HTTPStatusCode")
    code = str(error.get("Code") or status or "unknown")
    message = str(error.get("Message") or "").strip()
    detail = f": {message}" if message else ""
    http = f" (HTTP {status})" if status else ""
    where = f"{where}: {operation} failed with {code}{http}"
    if code in THROTTLING_CODES or status == 429:
        return ThrottledError(f"{where}{detail}", status=code)
    if code in RETRYABLE_CODES or (isinstance(status, int) and status >= 500):
        return RetryableError(f"{where}{detail}", status=code)
    hint = hints.get(code) or CREDENTIAL_HINTS.get(code)
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


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def shown_cause(exc: BaseException, secrets: Iterable[str]) -> BaseException:
    """What a writer's error is raised from: ``exc``, unless a credential shows in it or in
    what it was raised from (an endpoint that echoes the signed request's headers in its
    error message). Then a stand-in naming ``exc``'s type, with the credentials masked and
    ``exc``'s traceback, so that no traceback shows them."""
    secrets = tuple(secrets)
    texts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(texts) < 20:
        texts += (str(current), repr(current))
        current = current.__cause__ or current.__context__
    if not any(secret in text for text in texts for secret in secrets):
        return exc
    shown = MaskedError(f"{type(exc).__name__}: {scrub(str(exc), secrets)}")
    shown.__suppress_context__ = True
    return shown.with_traceback(exc.__traceback__)
