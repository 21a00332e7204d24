"""AWS Signature Version 4 on the requests of the HTTP and Elasticsearch sinks
(``awsService``, ``region``): OpenSearch Service (``es``), OpenSearch Serverless
(``aoss``), API Gateway (``execute-api``), OpenSearch Ingestion (``osis``), Lambda URLs.

Each attempt is signed anew with botocore's ``SigV4Auth``, over the bytes actually sent
(gzip included): the body's SHA-256 goes in ``x-amz-content-sha256``, which OpenSearch
Serverless requires. The credentials come from the process's shared ``CredentialSource``
(static keys, the default chain or an assumed role), refreshed before they expire.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from asyncsink.aws.credentials import CredentialSource

from .auth import Auth
from .redact import Redactor, mask_in_logs
from .transport import Request, Transport

__all__ = ["SigV4"]

_INSTALL_HINT = "option 'awsService' needs botocore: pip install asyncsink[aws]"
_SIGNED = ("authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256")


class SigV4(Auth):
    """Signs each request for ``service`` in ``region`` with ``source``'s credentials."""

    options = "awsService, region, awsAccessKeyId/awsSecretAccessKey, awsRoleArn"

    def __init__(
        self,
        source: CredentialSource,
        service: str,
        region: str,
        *,
        redact: Redactor | None = None,
    ) -> None:
        try:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
        except ImportError as exc:  # pragma: no cover - the aws extra is missing
            raise ImportError(_INSTALL_HINT) from exc
        self._signer = SigV4Auth
        self._request = AWSRequest
        self._source = source
        self.service = service
        self.region = region
        self._masked: str | None = None
        self._redact = redact

    def __repr__(self) -> str:
        return f"SigV4(service={self.service!r}, region={self.region!r})"

    async def authenticate(self, request: Request, transport: Transport) -> Request:
        credentials = await self._source.current()
        if credentials.token is not None and credentials.token != self._masked:
            self._masked = credentials.token  # a role's new session token: never shown
            mask_in_logs([credentials.token, credentials.secret_key])
            if self._redact is not None:
                self._redact.add([credentials.token, credentials.secret_key])
        headers = dict(request.headers)
        headers["x-amz-content-sha256"] = hashlib.sha256(request.content).hexdigest()
        aws = self._request(request.method, request.url, data=request.content, headers=headers)
        self._signer(credentials, self.service, self.region).add_auth(aws)
        signed = aws.headers
        for name in _SIGNED:
            value = signed.get(name)
            if value is not None:
                headers[name] = value
        return Request(request.method, request.url, headers, request.content, request.timeout)

    def hints(self) -> Mapping[int, str]:
        check = (
            f"the request was signed for service {self.service!r} in region "
            f"{self.region!r}: check the signing options ({self.options})"
        )
        return {401: check, 403: check + " and the IAM policy of those credentials"}
