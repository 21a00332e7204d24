"""The options every AWS sink shares: where the service is (``region``, ``endpointUrl``)
and whose credentials reach it (``AwsCredentialOptions``: static keys, the default chain,
an assumed role), with the JSON contract's choices for rows written as JSON."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from asyncsink.aws.credentials import AwsCredentialOptions, AwsIdentity
from asyncsink.encoding.options import JsonOptions
from asyncsink.errors import OptionError
from asyncsink.options import option

from .clients import ClientSettings

__all__ = ["AwsSinkOptions", "check_endpoint_url", "check_region"]

_REGION = re.compile(r"^(?![0-9]+\Z)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)\Z")  # botocore's rule
_ENDPOINT_RULE = "a URL like https://host[:port], with a port from 1 to 65535"


@dataclass(frozen=True, kw_only=True, repr=False)
class AwsSinkOptions(AwsCredentialOptions, JsonOptions):
    """Region, endpoint and credentials of an AWS sink; a sink's options class adds its
    own. Credentials are masked in ``repr`` and never shown in errors.

    Raises:
        OptionError: a region or endpoint that botocore could not use, or credential
            options that do not go together.
    """

    region: str | None = option(
        None,
        doc="AWS region, e.g. us-east-1. Defaults to the AWS SDK's default (AWS_REGION, "
        "AWS_DEFAULT_REGION, the AWS config file).",
    )
    endpoint_url: str | None = option(
        None,
        doc="Endpoint to send to instead of the regional AWS one: a VPC endpoint or a local "
        "emulator, as http(s)://host[:port].",
    )

    def __post_init__(self) -> None:
        JsonOptions.__post_init__(self)
        self._check_aws_credentials()
        if self.region is not None:
            check_region(self.region)
        if self.endpoint_url is not None:
            check_endpoint_url(self.endpoint_url)

    @property
    def effective_region(self) -> str | None:
        """The region requests go to (``None``: the SDK decides)."""
        return self.region

    secrets = AwsCredentialOptions.aws_secrets  # the credential values, for scrubbing

    @property
    def identity(self) -> AwsIdentity:
        """Whose credentials the writer uses (static keys, the default chain, a role)."""
        return self.aws_identity(self.effective_region)

    def client_settings(self, request_timeout_s: float, in_flight: int) -> ClientSettings:
        """The settings of the shared client a writer with these options uses."""
        return ClientSettings(
            region=self.effective_region,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token,
            identity=self.identity if self.aws_role_arn else None,
            connect_timeout=min(10.0, request_timeout_s),
            read_timeout=request_timeout_s + 1.0,
            max_pool_connections=max(10, in_flight),
        )


def check_region(region: str) -> None:
    """Refuse a region name botocore would not take.

    Raises:
        OptionError: naming ``region``.
    """
    if not _REGION.match(region):
        raise OptionError("region", region, "a region name like us-east-1")


def check_endpoint_url(url: str) -> None:
    """Refuse an ``endpointUrl`` botocore could not send to, or one holding credentials.

    Raises:
        OptionError: naming the option and the rule, with the URL masked.
    """
    if "@" in url:
        raise OptionError(
            "endpointUrl",
            url,
            "a URL without credentials",
            message="option 'endpointUrl' holds credentials in a URL: give them in "
            "awsAccessKeyId and awsSecretAccessKey instead",
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise OptionError("endpointUrl", url, _ENDPOINT_RULE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise OptionError("endpointUrl", url, _ENDPOINT_RULE)
    if parts.query or parts.fragment or any(ch.isspace() for ch in url):
        raise OptionError("endpointUrl", url, _ENDPOINT_RULE + ", without query")
