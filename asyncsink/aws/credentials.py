"""AWS credentials: the options that name them, and a source that keeps them fresh.

::

    AwsCredentialOptions   the options (awsAccessKeyId ... awsRoleArn, awsExternalId)
      -> AwsIdentity       what they name, hashable, nothing shown in repr
        -> CredentialSource one per identity and process: static keys, the default chain,
                            or a role assumed through STS, refreshed before it expires

A source is shared by every writer of a process, whatever its event loop: it holds plain
values and a thread lock, never a loop-bound client. STS is called with botocore in a
worker thread, so a refresh never blocks an event loop, and botocore's endpoint settings
apply (``AWS_ENDPOINT_URL_STS`` points STS at a local emulator).

An assumed role's credentials are refreshed once less than a quarter of their life, and
at most 15 minutes, is left: an hour-long session is renewed after 45 minutes.
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from asyncsink.errors import FatalError, OptionError, RetryableError
from asyncsink.options import Options, option, spark_name

__all__ = [
    "AwsCredentialOptions",
    "AwsIdentity",
    "CredentialSource",
    "FrozenCredentials",
    "credential_source",
    "check_role_arn",
]

log = logging.getLogger("asyncsink.aws")

_CREDENTIAL = re.compile(r"^[!-~]+\Z")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}\Z", re.ASCII)
_SESSION_NAME = re.compile(r"^[\w+=,.@-]{2,64}\Z", re.ASCII)
_EXTERNAL_ID = re.compile(r"^[\w+=,.@:/-]{2,1224}\Z", re.ASCII)
_MAX_MARGIN_S = 15 * 60
_INSTALL_HINT = "AWS credentials need botocore: pip install asyncsink[aws]"


@dataclass(frozen=True, slots=True)
class FrozenCredentials:
    """One set of credentials, as botocore's signers read them. ``repr`` shows none."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return "FrozenCredentials(access_key='****', secret_key='****')"


@dataclass(frozen=True, slots=True, kw_only=True)
class AwsIdentity:
    """Whose credentials a writer uses: static keys, or the default chain (no keys), and
    a role to assume with them. Hashable: equal identities share one source."""

    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    role_arn: str | None = None
    external_id: str | None = None
    role_session_name: str | None = None
    role_duration_s: int = 3600
    region: str | None = None  # of STS, for an assumed role
    role_option: str = "awsRoleArn"  # what errors call the role: an option, a URL's key

    def __repr__(self) -> str:
        keys = "static keys" if self.access_key_id else "the default chain"
        role = f", role={self.role_arn!r}" if self.role_arn else ""
        return f"AwsIdentity({keys}{role})"

    def secrets(self) -> list[str]:
        """The values to keep out of logs and errors."""
        values = [self.secret_access_key, self.session_token, self.access_key_id]
        return [value for value in values if value]


@dataclass(frozen=True, kw_only=True, repr=False)
class AwsCredentialOptions(Options):
    """The credential options of every AWS-facing part: static keys, else the AWS SDK's
    default chain, and optionally a role to assume with them.

    A mixin of option groups (the Kinesis, HTTP and Elasticsearch sinks'): call
    ``_check_aws_credentials`` from ``__post_init__``.
    """

    aws_access_key_id: str | None = option(
        None,
        secret=True,
        doc="Access key id. Without it the AWS SDK's default credential chain is used "
        "(environment, shared credentials file, container or instance role). Never shown.",
    )
    aws_secret_access_key: str | None = option(
        None, secret=True, doc="Secret access key; goes with awsAccessKeyId. Never shown."
    )
    aws_session_token: str | None = option(
        None,
        secret=True,
        doc="Session token of temporary credentials; goes with awsAccessKeyId. Never shown.",
    )
    aws_role_arn: str | None = option(
        None,
        doc="Role to assume (arn:aws:iam::ACCOUNT:role/NAME) with the credentials above, "
        "for cross-account writes. Its credentials refresh themselves on every executor.",
    )
    aws_external_id: str | None = option(
        None,
        secret=True,
        doc="External id the role's trust policy asks for; goes with awsRoleArn. Never shown.",
    )
    aws_role_session_name: str | None = option(
        None,
        doc="Session name of the assumed role, as CloudTrail shows it; defaults to "
        "'asyncsink'. Goes with awsRoleArn.",
    )
    aws_role_duration_ms: int = option(
        3_600_000,
        kind="duration",
        minimum=1000,
        doc="Life of the assumed role's credentials; AWS takes 15 min to the role's "
        "maximum session duration. They are renewed before they end.",
    )

    def _check_aws_credentials(self) -> None:
        """Keys both or neither, a token only with keys, role options only with a role,
        and values AWS takes.

        Raises:
            OptionError: naming the option, never showing a secret.
        """
        for name in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token"):
            value = getattr(self, name)
            if value is not None and not _CREDENTIAL.match(value):
                raise OptionError(
                    spark_name(name), "<hidden>", "printable ASCII characters without spaces"
                )
        key, secret = self.aws_access_key_id, self.aws_secret_access_key
        if bool(key) != bool(secret):
            missing = "awsSecretAccessKey" if key else "awsAccessKeyId"
            raise OptionError(
                missing,
                None,
                "both awsAccessKeyId and awsSecretAccessKey, or neither",
                message=f"option {missing!r} is missing: awsAccessKeyId and "
                "awsSecretAccessKey go together (or set neither to use the default "
                "credential chain)",
            )
        if self.aws_session_token and not key:
            raise OptionError(
                "awsSessionToken",
                None,
                "awsAccessKeyId and awsSecretAccessKey with it",
                message="option 'awsSessionToken' needs awsAccessKeyId and awsSecretAccessKey",
            )
        self._check_role()

    def _check_role(self) -> None:
        if self.aws_role_arn is None:
            for name in ("aws_external_id", "aws_role_session_name"):
                if getattr(self, name) is not None:
                    raise OptionError(
                        spark_name(name),
                        None,
                        "awsRoleArn with it",
                        message=f"option {spark_name(name)!r} needs 'awsRoleArn'",
                    )
            return
        check_role_arn("awsRoleArn", self.aws_role_arn)
        external = self.aws_external_id
        if external is not None and not _EXTERNAL_ID.match(external):
            raise OptionError(
                "awsExternalId", "<hidden>", "2 to 1224 characters of letters, digits and +=,.@:/-"
            )
        session = self.aws_role_session_name
        if session is not None and not _SESSION_NAME.match(session):
            raise OptionError(
                "awsRoleSessionName", session, "2 to 64 characters of letters, digits and +=,.@-"
            )

    @property
    def aws_secrets(self) -> tuple[str, ...]:
        """The credential values set, for scrubbing messages."""
        values = (
            self.aws_access_key_id,
            self.aws_secret_access_key,
            self.aws_session_token,
            self.aws_external_id,
        )
        return tuple(value for value in values if value)

    def aws_identity(self, region: str | None) -> AwsIdentity:
        """The identity these options name (``region``: where STS is asked)."""
        return AwsIdentity(
            access_key_id=self.aws_access_key_id,
            secret_access_key=self.aws_secret_access_key,
            session_token=self.aws_session_token,
            role_arn=self.aws_role_arn,
            external_id=self.aws_external_id,
            role_session_name=self.aws_role_session_name,
            role_duration_s=max(1, self.aws_role_duration_ms // 1000),
            region=region,
        )


def check_role_arn(name: str, arn: object) -> None:
    """``arn`` is the ARN of an IAM role.

    Raises:
        OptionError: naming option ``name``.
    """
    if not isinstance(arn, str) or not _ROLE_ARN.match(arn):
        raise OptionError(name, arn, "a role ARN like arn:aws:iam::123456789012:role/NAME")


class CredentialSource:
    """The current credentials of one identity, shared by the writers of a process.

    ``await current()`` returns them, refreshed first (in a worker thread) when they are
    about to end. Static keys never change; the default chain refreshes what it resolves
    (instance, container or SSO roles) the way botocore does; an assumed role is renewed
    here, once less than a quarter of its life (at most 15 minutes) is left.

    Raises (from ``current``):
        FatalError: no credentials are found, or STS refuses the role (naming
            ``awsRoleArn``).
        RetryableError: STS cannot be reached or fails for now.
    """

    def __init__(self, identity: AwsIdentity, *, clock: Callable[[], float] = time.time) -> None:
        self.identity = identity
        self._clock = clock
        self._lock = threading.Lock()
        self._frozen: FrozenCredentials | None = None
        self._renew_at = float("inf")  # when the role's credentials are renewed
        self._expires_at = float("inf")
        self._chain: Any = None  # botocore's credentials of the default chain
        self.refreshes = 0  # how many times a role was assumed (for tests and metrics)
        if identity.access_key_id and not identity.role_arn:
            self._frozen = FrozenCredentials(
                identity.access_key_id, identity.secret_access_key or "", identity.session_token
            )

    def __repr__(self) -> str:
        return f"CredentialSource({self.identity!r})"

    @property
    def expires_at(self) -> float:
        """When the current credentials end (``inf`` for static keys): epoch seconds."""
        return self._expires_at

    def secrets(self) -> list[str]:
        """The values of the current credentials to keep out of logs and errors."""
        frozen = self._frozen
        values = list(self.identity.secrets())
        if frozen is not None:
            values += [frozen.secret_key, frozen.token or ""]
        return [value for value in values if value]

    async def current(self) -> FrozenCredentials:
        """The credentials to sign with now (see the class docstring)."""
        frozen = self._frozen
        if frozen is not None and self._clock() < self._renew_at:
            if self._chain is None or not _chain_needs_refresh(self._chain):
                return frozen
        return await anyio.to_thread.run_sync(self.current_blocking)

    def current_blocking(self) -> FrozenCredentials:
        """``current`` for a thread that may block (botocore's own refresh callbacks)."""
        with self._lock:
            frozen = self._frozen
            if frozen is not None and self._clock() < self._renew_at:
                if self._chain is None:
                    return frozen
            if self.identity.role_arn:
                frozen = self._assume_role()
            else:
                frozen = self._from_chain()
            self._frozen = frozen
            return frozen

    async def metadata(self) -> dict[str, str]:
        """The current credentials in the form botocore's refreshable credentials take
        from their refresh callback (Kinesis and DynamoDB clients)."""
        frozen = await self.current()
        expiry = datetime.datetime.fromtimestamp(self._expires_at, datetime.UTC)
        return {
            "access_key": frozen.access_key,
            "secret_key": frozen.secret_key,
            "token": frozen.token or "",
            "expiry_time": expiry.isoformat(),
        }

    def _source_session(self) -> Any:
        try:
            import botocore.session
        except ImportError as exc:  # pragma: no cover - the aws extra is missing
            raise ImportError(_INSTALL_HINT) from exc
        return botocore.session.get_session()

    def _from_chain(self) -> FrozenCredentials:
        if self._chain is None:
            self._chain = self._source_session().get_credentials()
            if self._chain is None:
                raise FatalError(
                    "no AWS credentials found: set awsAccessKeyId and awsSecretAccessKey, "
                    "or give the executors credentials through the default chain "
                    "(environment, shared credentials file, container or instance role)"
                )
        got = self._chain.get_frozen_credentials()
        return FrozenCredentials(got.access_key, got.secret_key, got.token)

    def _assume_role(self) -> FrozenCredentials:
        identity = self.identity
        from botocore.config import Config
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            ParamValidationError,
        )

        session = self._source_session()
        args: dict[str, Any] = {
            "RoleArn": identity.role_arn,
            "RoleSessionName": identity.role_session_name or "asyncsink",
            "DurationSeconds": identity.role_duration_s,
        }
        if identity.external_id:
            args["ExternalId"] = identity.external_id
        where = f"cannot assume role {identity.role_arn} (option {identity.role_option!r})"
        try:
            client = session.create_client(
                "sts",
                region_name=identity.region,
                aws_access_key_id=identity.access_key_id,
                aws_secret_access_key=identity.secret_access_key,
                aws_session_token=identity.session_token,
                # STS checks the duration itself (a test's emulator takes a short one).
                # One retry here: a failure is a RetryableError, and the writer retries it
                # with its own backoff and cap.
                config=Config(
                    parameter_validation=False,
                    user_agent_extra="asyncsink",
                    retries={"total_max_attempts": 2, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=10,
                ),
            )
            answer = client.assume_role(**args)
        except NoCredentialsError as exc:
            raise FatalError(f"{where}: no credentials to assume it with") from exc
        except ParamValidationError as exc:
            raise FatalError(f"{where}: {exc}") from exc
        except ClientError as exc:
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            text = f"{where}: {error.get('Code')}: {error.get('Message')}"
            if status is not None and (status >= 500 or status == 429):
                raise RetryableError(text, status=status) from exc
            raise FatalError(text + _ROLE_HINT, status=status) from exc
        except BotoCoreError as exc:
            raise RetryableError(f"{where}: {exc}") from exc
        got = answer["Credentials"]
        expires = got["Expiration"].timestamp()
        now = self._clock()
        life = max(0.0, expires - now)
        self._expires_at = expires
        self._renew_at = expires - min(_MAX_MARGIN_S, life / 4)
        self.refreshes += 1
        log.info(
            "assumed role %s until %s",
            identity.role_arn,
            got["Expiration"].isoformat(),
        )
        return FrozenCredentials(got["AccessKeyId"], got["SecretAccessKey"], got["SessionToken"])


_ROLE_HINT = (
    " (check the role, its external id and that the role's trust policy lets the "
    "credentials assume it)"
)


def _chain_needs_refresh(chain: Any) -> bool:
    needed = getattr(chain, "refresh_needed", None)
    return bool(needed()) if callable(needed) else False


_SOURCES: dict[AwsIdentity, CredentialSource] = {}
_SOURCES_LOCK = threading.Lock()


def credential_source(identity: AwsIdentity) -> CredentialSource:
    """The process's shared source for ``identity`` (made on first use)."""
    with _SOURCES_LOCK:
        source = _SOURCES.get(identity)
        if source is None:
            source = _SOURCES[identity] = CredentialSource(identity)
        return source
