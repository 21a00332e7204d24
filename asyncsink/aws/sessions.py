"""aiobotocore sessions that take their credentials from a ``CredentialSource``.

The Kinesis sink and the DynamoDB record store open aiobotocore clients. Static keys are
handed to ``create_client`` as they are, and the default chain is aiobotocore's own. An
assumed role comes from the process's shared ``CredentialSource`` instead: the session
gets a credential provider, first in its chain, whose credentials botocore refreshes
through the source before they expire.
"""

from __future__ import annotations

from typing import Any

from .credentials import AwsIdentity, CredentialSource, credential_source

__all__ = ["client_credentials", "use_source"]

_METHOD = "asyncsink-assume-role"


class _SourceProvider:
    """A credential provider (botocore's provider contract: ``METHOD``, ``load``)."""

    METHOD = _METHOD
    CANONICAL_NAME = _METHOD

    def __init__(self, source: CredentialSource) -> None:
        self._source = source

    async def load(self) -> Any:
        from aiobotocore.credentials import AioDeferredRefreshableCredentials

        return AioDeferredRefreshableCredentials(
            refresh_using=self._source.metadata, method=_METHOD
        )


def use_source(session: Any, source: CredentialSource) -> None:
    """Make ``session`` (an ``AioSession``) take its credentials from ``source``."""
    resolver = session.get_component("credential_provider")
    resolver.insert_before("env", _SourceProvider(source))


def client_credentials(session: Any, identity: AwsIdentity | None) -> dict[str, str | None]:
    """The credential arguments of ``session.create_client`` for ``identity``: static
    keys as they are; for an assumed role none, the session taking them from the shared
    source (``use_source``); for the default chain (or no identity) none."""
    if identity is None:
        return {}
    if identity.role_arn:
        use_source(session, credential_source(identity))
        return {}
    if identity.access_key_id:
        return {
            "aws_access_key_id": identity.access_key_id,
            "aws_secret_access_key": identity.secret_access_key,
            "aws_session_token": identity.session_token,
        }
    return {}
