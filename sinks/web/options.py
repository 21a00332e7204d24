"""The options the sinks that talk HTTP share: credentials (``bearerToken``,
``basicUsername`` with ``basicPassword``, ``apiKey``), ``tlsVerify`` with ``caBundle``,
AWS SigV4 signing (``SigningOptions``), mutual TLS (``ClientCertOptions``), and the
checks of URLs and header values.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import httpx

from asyncsink.aws.credentials import AwsCredentialOptions, credential_source
from asyncsink.errors import OptionError
from asyncsink.options import Options, option, option_specs, spark_name

from .clients import ClientCertificate, check_client_certificate
from .redact import Redactor
from .sigv4 import SigV4

__all__ = [
    "ClientCertOptions",
    "ClientOptions",
    "SigningOptions",
    "check_http_url",
    "is_header_text",
]

_CONTROL_CHARS = "\r\n\0"
_CREDENTIAL_KINDS = {
    "api_key": "API key",
    "basic_username": "basic",
    "bearer_token": "bearer token",
    "aws_service": "AWS SigV4",
    "oauth2_token_url": "OAuth2",
}
_SERVICE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}\Z")
_REGION = re.compile(r"^(?![0-9]+\Z)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)\Z")  # botocore's rule
_AWS_ONLY = (
    "region",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "aws_role_arn",
)


class ClientOptions(Options):
    """Base of the option groups of sinks that talk HTTP: the checks and headers of their
    credentials (``bearerToken``, ``basicUsername`` with ``basicPassword``, ``apiKey``)
    and of ``tlsVerify`` with ``caBundle``.

    Not a dataclass itself: each sink's group declares these fields, documented for its
    destination and in the order of its option table.
    """

    basic_username: str | None
    basic_password: str | None
    bearer_token: str | None
    api_key: str | None
    tls_verify: bool
    ca_bundle: str | None

    def _check_credentials(self, kinds: Sequence[str], *, username_refuses: str = ":") -> None:
        """At most one kind of credentials (``kinds``: field names, in the order the
        messages name them), a password only with a user name, and a user name without
        any of the characters ``username_refuses``.

        Raises:
            OptionError: naming the option, never showing a secret.
        """
        given = [spark_name(kind) for kind in kinds if getattr(self, kind) is not None]
        if len(given) > 1:
            described = [_CREDENTIAL_KINDS[kind] for kind in kinds]
            listed = ", ".join(described[:-1]) + ", or " + described[-1]
            raise OptionError(
                given[1],
                None,
                "one kind of authentication",
                message=f"options {given[0]!r} and {given[1]!r} contradict each other: "
                f"set one kind of authentication ({listed})",
            )
        if self.basic_password is not None and self.basic_username is None:
            raise OptionError(
                "basicUsername",
                None,
                "a user name",
                message="option 'basicPassword' needs 'basicUsername' as well",
            )
        username = self.basic_username
        if username is not None and any(ch in username for ch in username_refuses):
            raise OptionError("basicUsername", username, "a user name without ':'")

    def _check_secret_values(self, sent_as_is: Iterable[str] = ()) -> None:
        """Every secret option given is a non-empty string without line breaks, and those
        named in ``sent_as_is`` (field names: sent in a header as they are, not encoded)
        are printable ASCII, as header values must be.

        Raises:
            OptionError: naming the option and the rule, never showing the value.
        """
        as_is = set(sent_as_is)
        for spec in option_specs(type(self)):
            value = getattr(self, spec.name)
            if not spec.secret or value is None:
                continue
            if not isinstance(value, str) or not value or _has_control(value):
                raise OptionError(
                    spec.spark_name, "<hidden>", "a non-empty string without line breaks"
                )
            if spec.name in as_is and not is_header_text(value):
                raise OptionError(
                    spec.spark_name,
                    "<hidden>",
                    "printable ASCII characters (it is sent as a header value)",
                )

    def _check_tls(self) -> None:
        """``caBundle`` only with ``tlsVerify``.

        Raises:
            OptionError: both ``caBundle`` and ``tlsVerify=false`` are set.
        """
        if self.ca_bundle is not None and not self.tls_verify:
            raise OptionError(
                "caBundle",
                self.ca_bundle,
                "no caBundle when tlsVerify is false",
                message="options 'caBundle' and 'tlsVerify=false' contradict each other: "
                "certificates are either verified against the bundle or not at all",
            )

    def basic_authorization(self) -> str:
        """The ``Authorization`` value of basic authentication with these options."""
        pair = f"{self.basic_username}:{self.basic_password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


@dataclass(frozen=True, kw_only=True, repr=False)
class SigningOptions(AwsCredentialOptions):
    """AWS Signature Version 4 on every request (``awsService``, ``region``), with the
    credentials of ``AwsCredentialOptions``. A mixin of the HTTP and Elasticsearch sinks'
    options: call ``_check_signing`` from ``__post_init__``."""

    aws_service: str | None = option(
        None,
        doc="Sign every request with AWS Signature Version 4 for this service: 'es' "
        "(OpenSearch Service), 'aoss' (OpenSearch Serverless), 'execute-api' (API "
        "Gateway), 'osis', 'lambda'... Needs region. See "
        "[Authentication](../authentication.md#aws-sigv4).",
    )
    region: str | None = option(
        None,
        doc="AWS region the requests are signed for, e.g. eu-west-1. Required with awsService.",
    )

    def _check_signing(self) -> None:
        """``region`` with ``awsService``, and the AWS options only with it.

        Raises:
            OptionError: naming the option.
        """
        service = self.aws_service
        if self.region is not None and not _REGION.match(self.region):
            raise OptionError("region", self.region, "a region name like us-east-1")
        self._check_aws_credentials()
        if service is None:
            for name in _AWS_ONLY:
                if getattr(self, name) is not None:
                    raise OptionError(
                        spark_name(name),
                        None,
                        "awsService with it",
                        message=f"option {spark_name(name)!r} is for AWS signing: set "
                        "'awsService' (and 'region') too",
                    )
            return
        if not _SERVICE.match(service):
            raise OptionError(
                "awsService", service, "an AWS service name like es, aoss or execute-api"
            )
        if self.region is None:
            raise OptionError(
                "region",
                None,
                "a region name like us-east-1",
                message=f"option 'region' is required with awsService={service!r}: requests "
                "are signed for one region",
            )

    def signer(self, redact: Redactor | None = None) -> SigV4 | None:
        """The signer these options call for, or ``None`` without ``awsService``."""
        if self.aws_service is None or self.region is None:
            return None
        source = credential_source(self.aws_identity(self.region))
        return SigV4(source, self.aws_service, self.region, redact=redact)


@dataclass(frozen=True, kw_only=True, repr=False)
class ClientCertOptions(Options):
    """Mutual TLS: the certificate the client presents (``clientCert``, ``clientKey``,
    ``clientKeyPassword``). A mixin: call ``_check_client_cert`` from ``__post_init__``."""

    client_cert: str | None = option(
        None,
        doc="Path to the PEM client certificate to present (mutual TLS); it may hold the "
        "key too. Read on the driver, as a check, and where the writer runs.",
    )
    client_key: str | None = option(
        None, doc="Path to the PEM private key of clientCert, if not in the same file."
    )
    client_key_password: str | None = option(
        None, secret=True, doc="Password of an encrypted clientKey. Never shown."
    )

    def _check_client_cert(self) -> None:
        """The files load, here and now: a wrong path fails before any task starts.

        Raises:
            OptionError: naming the option at fault.
        """
        certificate = self.client_certificate()
        if certificate is None:
            for name in ("client_key", "client_key_password"):
                if getattr(self, name) is not None:
                    raise OptionError(
                        spark_name(name),
                        None,
                        "clientCert with it",
                        message=f"option {spark_name(name)!r} needs 'clientCert'",
                    )
            return
        check_client_certificate(certificate)

    def client_certificate(self) -> ClientCertificate | None:
        """The client certificate, or ``None`` without ``clientCert``."""
        if self.client_cert is None:
            return None
        return ClientCertificate(
            cert=self.client_cert, key=self.client_key, password=self.client_key_password
        )


def _has_control(text: str) -> bool:
    return any(ch in text for ch in _CONTROL_CHARS)


def is_header_text(text: str) -> bool:
    """Whether ``text`` can be sent as a header value: printable ASCII (and tabs)."""
    return all(" " <= ch <= "~" or ch == "\t" for ch in text)


def check_http_url(name: str, url: object) -> httpx.URL:
    """``url`` parsed, if it is an http:// or https:// URL with a host, a port from 1 to
    65535 (when given), and no ``@`` after its credentials: an ``@`` elsewhere is
    percent-encoded (``%40``), so that credentials holding a ``/``, ``?`` or ``#`` are
    never read as a host and a path.

    Raises:
        OptionError: naming option ``name`` and the rule; the URL is shown masked.
    """
    shown = url if isinstance(url, str) else f"<{type(url).__name__}>"
    try:
        parsed = httpx.URL(url) if isinstance(url, str) else None
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise OptionError(name, shown, "an http:// or https:// URL with a host")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise OptionError(name, shown, "a URL whose port is from 1 to 65535")
    after_credentials = parsed.raw_path + parsed.fragment.encode()
    if b"@" in after_credentials or "@" in parsed.host:
        raise OptionError(
            name,
            shown,
            "a URL whose user name and password, if any, are percent-encoded (an '@' "
            "outside them is written %40)",
        )
    return parsed
