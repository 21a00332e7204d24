"""Checking AWS Signature Version 4 the way an AWS service does, for test endpoints.

``SigV4Check`` names the service, the region and the keys a test endpoint knows;
``verify`` recomputes a request's signature with botocore's ``SigV4Auth`` from those
keys, the request's ``X-Amz-Date`` and the headers it says it signed, and returns the
refusal AWS would send, or ``None`` for a request that passes::

    check = SigV4Check("es", "eu-west-1", keys=(("AKIDEXAMPLE", "secret"),))
    refused = verify(check, "POST", "http://127.0.0.1:9200/logs/_bulk", headers, body)

It stands in for what OpenSearch Service, OpenSearch Serverless and API Gateway check:
a missing or malformed ``Authorization`` (403 "Missing Authentication Token"), an
unknown access key (403), a credential scope for another region or service (403), a
signature that does not match (403), an ``X-Amz-Date`` more than five minutes off
(403 "Signature expired"), and an ``x-amz-content-sha256`` that is not the SHA-256 of
the body as received, gzip included (400). Session tokens are not checked against STS.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["SigV4Check", "verify"]

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service "
    "documentation for details."
)


@dataclass(frozen=True, slots=True)
class SigV4Check:
    """What a signing endpoint checks: requests signed for ``service`` in ``region`` with
    one of ``keys`` (access key id, secret access key), or with a key ``secret_for``
    knows (a role's temporary keys, looked up in the STS emulator; in-thread only)."""

    service: str
    region: str
    keys: tuple[tuple[str, str], ...] = ()
    max_skew_s: float = 300.0
    secret_for: Callable[[str], str | None] | None = None

    def secret(self, access_key: str) -> str | None:
        """The secret key of ``access_key``, if this endpoint knows it."""
        for key, secret in self.keys:
            if key == access_key:
                return secret
        return self.secret_for(access_key) if self.secret_for is not None else None


def verify(
    check: SigV4Check, method: str, url: str, headers: Mapping[str, str], body: bytes
) -> tuple[int, str] | None:
    """``None`` if the request is signed as ``check`` wants, else the status and message
    of AWS's refusal. ``headers``: names in lower case, as received."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    found = _AUTH.match(headers.get("authorization", ""))
    amz_date = headers.get("x-amz-date", "")
    if found is None or not amz_date:
        return 403, "Missing Authentication Token"
    secret = check.secret(found["key"])
    if secret is None:
        return 403, "The security token included in the request is invalid."
    if (found["region"], found["service"]) != (check.region, check.service):
        return 403, (
            f"Credential should be scoped to a valid region and service: {check.region}/"
            f"{check.service}, not {found['region']}/{found['service']}"
        )
    try:
        stamp = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return 403, "Missing Authentication Token"
    now = datetime.datetime.now(datetime.UTC)
    if abs((now - stamp).total_seconds()) > check.max_skew_s:
        return (
            403,
            f"Signature expired: {amz_date} is now earlier or later than {now:%Y%m%dT%H%M%SZ}",
        )
    claimed = headers.get("x-amz-content-sha256")
    if claimed is not None and claimed != hashlib.sha256(body).hexdigest():
        return 400, "The provided 'x-amz-content-sha256' header does not match what was computed."
    signed = found["signed"].split(";")
    if any(name not in headers for name in signed):
        return 403, _MISMATCH
    request = AWSRequest(method, url, data=body, headers={n: headers[n] for n in signed})
    request.context["timestamp"] = amz_date
    credentials = Credentials(found["key"], secret, headers.get("x-amz-security-token"))
    auth = SigV4Auth(credentials, check.service, check.region)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, found["signature"]):
        return 403, _MISMATCH
    return None
