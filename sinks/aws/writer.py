"""``AwsWriter``: the base of the AWS batch sinks (SQS, DynamoDB, Firehose).

It holds what those sinks would otherwise each repeat: the shared per-loop client of the
service (or one the caller passes in), the call of one batch operation with botocore's
errors translated into the writer's (credentials scrubbed from every message and cause),
secrets masked in botocore's logs while the writer is open, and the destination's name
for messages and metrics. A sink adds its entries, its limits and the reading of its
answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeVar

from asyncsink.durable.call_log import CallLog
from asyncsink.errors import DestinationError
from asyncsink.masking import mask_url
from asyncsink.options import SinkOptions
from asyncsink.writer import AsyncSinkWriter

from ..web.redact import mask_in_logs, unmask_in_logs
from .clients import get_client
from .errors import never_connected, scrub, shown_cause, translate_error
from .options import AwsSinkOptions

__all__ = ["BOTOCORE_LOGGERS", "AwsWriter"]

EntryT = TypeVar("EntryT")

BOTOCORE_LOGGERS = (
    "asyncsink.aws",
    "botocore.auth",
    "botocore.endpoint",
    "botocore.hooks",
    "botocore.httpsession",
    "botocore.parsers",
    "botocore.retryhandler",
    "aiobotocore.endpoint",
    "aiobotocore.httpsession",
    "aiobotocore.hooks",
)
"""The loggers that show requests (headers with the access key id and the session token)
at DEBUG: a logger's filter sees only its own records."""


class AwsWriter(AsyncSinkWriter[Any, EntryT]):
    """Sends batches to one AWS service with the process's shared client for the running
    event loop, or with ``client`` (which then belongs to the caller).

    Subclasses set ``service`` (botocore's name), ``hints`` (what to check for the fatal
    error codes of their operation) and ``destination_name``, and call ``_call``.
    """

    takes_mappings = True  # a dict of a row's fields converts as the Row does
    service: ClassVar[str] = ""
    kind: ClassVar[str] = ""  # "SQS queue": how messages name the destination
    hints: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        aws: AwsSinkOptions,
        *,
        options: SinkOptions | None = None,
        call_log: CallLog | None = None,
        client: Any = None,
        **kwargs: Any,
    ) -> None:
        if options is None:
            options = SinkOptions(**aws.core_defaults())
        aws.check_core(options)
        super().__init__(options=options, call_log=call_log, **kwargs)  # ordering=...
        self.aws = aws
        self._given_client = client
        self._client = client
        self._secrets = aws.secrets
        timeout = self.options.request_timeout_ms / 1000
        self._settings = aws.client_settings(timeout, self.options.max_in_flight_requests)

    @property
    def client(self) -> Any:
        """The aiobotocore client last used (``None`` until the writer is opened)."""
        return self._client

    async def __aenter__(self) -> Self:
        mask_in_logs(self._secrets, BOTOCORE_LOGGERS)
        try:
            await self._current_client()  # fails now on a missing region or credentials
            return await super().__aenter__()
        except BaseException:
            unmask_in_logs(self._secrets)
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            unmask_in_logs(self._secrets)

    async def _current_client(self) -> Any:
        """The given client, else the shared one (looked up per request, so that a
        ``close_clients()`` between requests is followed by a fresh client)."""
        if self._given_client is not None:
            return self._given_client
        try:
            self._client = await get_client(self.service, self._settings)
        except Exception as exc:
            error = self._translated(exc, "open")
            if error is None:
                raise
            raise error from shown_cause(exc, self._secrets)
        return self._client

    async def _call(self, operation: str, **params: Any) -> Any:
        """``client.<operation>(**params)`` (botocore's snake_case name), its failure
        translated (see ``asyncsink.sinks.aws.errors``).

        Raises:
            ThrottledError, RetryableError, FatalError: the request failed.
        """
        client = await self._current_client()
        try:
            return await getattr(client, operation)(**params)
        except Exception as exc:
            error = self._translated(exc, operation)
            if error is None:
                raise
            raise error from shown_cause(exc, self._secrets)

    def _translated(self, exc: Exception, operation: str) -> DestinationError | None:
        name = "".join(part.capitalize() for part in operation.split("_"))
        error = translate_error(exc, self.describe_target(), name, self.hints)
        if error is None:
            return None
        message = scrub(str(error), self._secrets)
        if message != str(error):
            error = type(error)(message, retry_after=error.retry_after, status=error.status)
        return error

    def scrubbed(self, text: str) -> str:
        """``text`` without this writer's credentials."""
        return scrub(text, self._secrets)

    def may_have_landed(self, error: BaseException | None) -> bool:
        """As the core says, except that a request whose connection never opened cannot
        have landed."""
        cause = error.__cause__ if error is not None else None
        if cause is not None and never_connected(cause):
            return False
        return super().may_have_landed(error)

    def describe_target(self) -> str:
        """``"SQS queue 'name'"``: the destination in messages."""
        return f"{self.kind} {self.destination_name()!r}"

    def describe_destination(self) -> str:
        """The destination, and the endpoint it is reached at (masked) or its region."""
        aws = self.aws
        where = mask_url(aws.endpoint_url) if aws.endpoint_url else aws.effective_region
        return f"{self.describe_target()} at {where}"

    def __repr__(self) -> str:
        base = super().__repr__()
        return f"{base[:-1]} {self.kind}={self.destination_name()!r}>"
