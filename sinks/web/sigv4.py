"""AWS Signature Version 4 on the requests of the HTTP and Elasticsearch sinks
(``awsService``, ``region``): OpenSearch Service (``es``), OpenSearch Serverless
(``aoss``), API Gateway (``execute-api``), OpenSearch Ingestion (``osis``), Lambda URLs.

Each attempt is signed anew, over the bytes actually sent (gzip included): the body's
SHA-256 goes in ``x-amz-content-sha256``, which OpenSearch Serverless requires. The
credentials come from the process's shared ``CredentialSource`` (static keys, the default
chain or an assumed role), refreshed before they expire.

botocore's ``SigV4Auth`` gives the canonical form of each URL (method, path, query and
host), asked once per URL, and the string to sign of each request. The canonical headers
are joined here by botocore's rules (names in lower case, sorted, runs of spaces folded,
its unsigned headers left out), and the signing key, which depends only on the day, the
secret, the region and the service, is derived once a day, not for every request. That
halves the cost of a signature: botocore's generic headers object and key derivation took
most of it. The test endpoints recompute every signature with botocore's whole path
(``asyncsink.testing.sigv4``), so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from asyncsink.aws.credentials import CredentialSource, FrozenCredentials

from .auth import Auth
from .redact import Redactor, mask_in_logs
from .transport import Request, Transport

__all__ = ["SigV4"]

_INSTALL_HINT = "option 'awsService' needs botocore: pip install asyncsink[aws]"
_TIMESTAMP = "%Y%m%dT%H%M%SZ"
_URLS_KEPT = 64  # canonical URL parts remembered per signer (reconcile URLs vary by key)


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
            from botocore.auth import SIGNED_HEADERS_BLACKLIST, SigV4Auth
            from botocore.awsrequest import AWSRequest
        except ImportError as exc:  # pragma: no cover - the aws extra is missing
            raise ImportError(_INSTALL_HINT) from exc
        self._auth_class = SigV4Auth
        self._request_class = AWSRequest
        self._unsigned = frozenset(SIGNED_HEADERS_BLACKLIST)
        self._source = source
        self.service = service
        self.region = region
        self._redact = redact
        self._credentials: FrozenCredentials | None = None
        self._signer: Any = None
        self._urls: dict[tuple[str, str], tuple[str, str]] = {}
        self._second = -1
        self._stamp = ""
        self._keys: tuple[str, bytes] = ("", b"")  # the day, and its signing key

    def __repr__(self) -> str:
        return f"SigV4(service={self.service!r}, region={self.region!r})"

    async def authenticate(self, request: Request, transport: Transport) -> Request:
        credentials = await self._source.current()
        if credentials is not self._credentials:
            self._use(credentials)
        signer = self._signer
        stamp = self._now()
        headers = dict(request.headers)
        payload = hashlib.sha256(request.content).hexdigest()
        headers["x-amz-content-sha256"] = payload
        headers["x-amz-date"] = stamp
        if credentials.token:
            headers["x-amz-security-token"] = credentials.token
        start, host = self._url_parts(request.method, request.url)
        unsigned = self._unsigned
        lines = {name: " ".join(value.split()) for name, value in headers.items()}
        lines.setdefault("host", host)
        names = sorted(name for name in lines if name not in unsigned)
        signed = ";".join(names)
        canonical_headers = "".join(f"{name}:{lines[name]}\n" for name in names)
        canonical = f"{start}\n{canonical_headers}\n{signed}\n{payload}"
        context = SimpleNamespace(context={"timestamp": stamp})
        to_sign = signer.string_to_sign(context, canonical)
        day = stamp[:8]
        if self._keys[0] != day:
            self._keys = (day, self._signing_key(credentials.secret_key, day))
        signature = hmac.new(self._keys[1], to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{day}/{self.region}/"
            f"{self.service}/aws4_request, SignedHeaders={signed}, Signature={signature}"
        )
        return Request(request.method, request.url, headers, request.content, request.timeout)

    def hints(self) -> Mapping[int, str]:
        check = (
            f"the request was signed for service {self.service!r} in region "
            f"{self.region!r}: check the signing options ({self.options})"
        )
        return {401: check, 403: check + " and the IAM policy of those credentials"}

    def _use(self, credentials: FrozenCredentials) -> None:
        """Sign with ``credentials`` from now on (a role's renewed ones: never shown)."""
        if credentials.token:
            mask_in_logs([credentials.token, credentials.secret_key])
            if self._redact is not None:
                self._redact.add([credentials.token, credentials.secret_key])
        self._credentials = credentials
        self._signer = self._auth_class(credentials, self.service, self.region)
        self._keys = ("", b"")

    def _now(self) -> str:
        """``X-Amz-Date`` for now (formatted once a second)."""
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._stamp = time.strftime(_TIMESTAMP, time.gmtime(second))
        return self._stamp

    def _signing_key(self, secret: str, day: str) -> bytes:
        """SigV4's signing key of ``day`` (``YYYYMMDD``): HMACs of the date, region,
        service and ``aws4_request``, from ``AWS4`` + the secret."""
        key = ("AWS4" + secret).encode()
        for part in (day, self.region, self.service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return key

    def _url_parts(self, method: str, url: str) -> tuple[str, str]:
        """The canonical method, path and query lines of a request to ``url``, and its
        host header, as botocore makes them (asked once per URL)."""
        found = self._urls.get((method, url))
        if found is None:
            template = self._request_class(method, url, headers={"x-amz-content-sha256": "-"})
            template.context["timestamp"] = time.strftime(_TIMESTAMP, time.gmtime())
            lines = self._signer.canonical_request(template).split("\n")
            host = next(line for line in lines[3:] if line.startswith("host:"))
            found = ("\n".join(lines[:3]), host[len("host:") :])
            if len(self._urls) >= _URLS_KEPT:
                self._urls.clear()
            self._urls[(method, url)] = found
        return found
