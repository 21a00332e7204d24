"""Options of the Elasticsearch sink: which cluster, which index, which operation, and how
each request is authenticated, compressed and negotiated.

``ElasticsearchOptions`` is built from Python keywords or, together with the writer's
``SinkOptions``, from one mapping of Spark string options (``create_writer``). Credentials
(``apiKey``, ``basicPassword``, ``bearerToken``) are secrets: masked in ``repr``, never
shown in errors or logs.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from asyncsink.encoding.options import JsonOptions
from asyncsink.errors import OptionError
from asyncsink.options import option

from ..web.options import ClientCertOptions, ClientOptions, SigningOptions, check_http_url

__all__ = ["ElasticsearchOptions", "Operation"]

Operation = Literal["index", "create", "update", "delete"]
VersionType = Literal["external", "external_gte"]
OPERATIONS: tuple[str, ...] = ("index", "create", "update", "delete")

# What Elasticsearch refuses in the name of an index (or of an alias or data stream):
# these characters and control characters anywhere, and these first characters.
_NOT_IN_INDEX = re.compile(r'[\\/*?"<>|, #:\x00-\x1f]')
_NOT_FIRST_IN_INDEX = ("_", "-", "+")
_FIELD_OPTIONS = (("index_field", "indexField"), ("id_field", "idField"),
                  ("routing_field", "routingField"), ("version_field", "versionField"),
                  ("operation_field", "operationField"))  # fmt: skip


@dataclass(frozen=True, kw_only=True, repr=False)
class ElasticsearchOptions(ClientOptions, SigningOptions, ClientCertOptions, JsonOptions):
    """Where the Elasticsearch sink writes, with which bulk operation, and how it connects.

    Raises:
        OptionError: a value is not allowed or two options contradict each other; the
            message names the option and never shows a secret.
    """

    hosts: str | Sequence[str] = option(
        doc="Comma-separated base URLs of the cluster's nodes (http:// or https://). "
        "Required. Requests go round-robin. See [Hosts](#hosts).",
        kind="object",
    )
    index: str | None = option(
        None,
        doc="Index (or alias, or data stream) every document goes to. Set this or "
        "indexField; with both, rows whose indexField is null go here.",
    )
    index_field: str | None = option(
        None,
        doc="Field of each row naming the document's index. A row without one (and no "
        "index option to fall back on) is a bad record.",
    )
    operation: Operation = option(
        "index",
        doc="Bulk operation: 'index' (create or replace), 'create' (only if absent), "
        "'update' (merged, created if absent) or 'delete'. See "
        "[Operations](#operations).",
    )
    id_field: str | None = option(
        None,
        doc="Field holding each document's _id (a string or an integer). Without it, _id "
        "comes from the task's scope and the row's position. See "
        "[Guarantees](#guarantees).",
    )
    auto_ids: bool = option(
        False,
        doc="Send documents without _id and let the cluster pick one, for OpenSearch "
        "Serverless time-series and vector collections, which refuse _id. Delivery is "
        "then at least once: a re-sent document may be stored twice. See "
        "[Guarantees](#guarantees).",
    )
    routing_field: str | None = option(
        None, doc="Field holding each document's custom routing value (a string or an integer)."
    )
    operation_field: str | None = option(
        None,
        doc="Field holding each row's bulk operation: 'index', 'create', 'update' or "
        "'delete'. One stream then carries inserts, updates and deletes. Needs idField; "
        "replaces the operation option. See [Operations](#operations).",
    )
    version_field: str | None = option(
        None,
        doc="Field holding each document's version (an integer from 0). Index and "
        "delete operations send it with versionType, so an older change never "
        "overwrites a newer one. See [Versioned writes](#versioned-writes).",
    )
    version_type: VersionType | None = option(
        None,
        doc="How versionField is compared: 'external' (the default with versionField: "
        "a write needs a higher version than the stored one) or 'external_gte' (higher "
        "or equal). Only with versionField.",
    )
    exclude_fields: str | Sequence[str] | None = option(
        None,
        kind="object",
        doc="Comma-separated top-level fields kept out of each document's _source, "
        "such as the id, version, routing or operation fields.",
    )
    pipeline: str | None = option(
        None, doc="Ingest pipeline every indexed or created document goes through."
    )
    refresh: bool = option(
        False,
        doc="Refresh the written indices once the writer has delivered everything (before "
        "the task reports success), so the documents are searchable at once. Off by "
        "default: refreshing is costly for the cluster.",
    )
    api_key: str | None = option(
        None,
        secret=True,
        doc="API key, sent as 'Authorization: ApiKey ...': the encoded form Elasticsearch "
        "returns, or 'id:api_key' (encoded here). Never shown.",
    )
    basic_username: str | None = option(
        None, doc="User name for basic authentication (with basicPassword)."
    )
    basic_password: str | None = option(
        None, secret=True, doc="Password for basic authentication. Never shown."
    )
    bearer_token: str | None = option(
        None,
        secret=True,
        doc="Token sent as 'Authorization: Bearer ...' (service account or OAuth2 token). "
        "Never shown.",
    )
    tls_verify: bool = option(
        True, doc="Verify the nodes' TLS certificates. Turn off only for tests."
    )
    ca_bundle: str | None = option(
        None,
        doc="Path to a PEM file of CA certificates to verify the nodes with (a self-managed "
        "cluster's http_ca.crt), instead of the system's. Read where the writer runs.",
    )
    gzip: bool = option(
        False,
        doc="Compress bulk bodies with gzip (Content-Encoding: gzip). Batch size limits "
        "apply to the uncompressed bodies.",
    )
    compatibility_version: int | None = option(
        None,
        kind="object",
        doc="Send the REST compatibility headers of this major version (8 or 9): "
        "'application/vnd.elasticsearch+json; compatible-with=N', for a cluster one major "
        "version ahead of what the requests were written for. Elasticsearch only: "
        "OpenSearch refuses these headers.",
    )
    connect_timeout_ms: int = option(
        10_000,
        kind="duration",
        minimum=1,
        doc="Longest wait to connect to a node before failing over to the next one.",
    )

    def __post_init__(self) -> None:
        self._normalise()
        JsonOptions.__post_init__(self)
        self._check_hosts()
        self._check_targets()
        self._check_auth()
        if self.compatibility_version not in (None, 8, 9):
            raise OptionError("compatibilityVersion", self.compatibility_version, "8 or 9")
        if self.compatibility_version is not None and self.aws_service in ("es", "aoss"):
            raise OptionError(
                "compatibilityVersion",
                self.compatibility_version,
                "no compatibilityVersion with awsService 'es' or 'aoss'",
                message="option 'compatibilityVersion' is for Elasticsearch: OpenSearch "
                f"(awsService={self.aws_service!r}) refuses its headers; leave it unset",
            )
        self._check_tls()
        self._check_auto_ids()
        self._check_versions()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _normalise(self) -> None:
        hosts = self.hosts
        if isinstance(hosts, str):
            hosts = hosts.split(",")
        if isinstance(hosts, Sequence) and all(isinstance(host, str) for host in hosts):
            self._set("hosts", tuple(h.strip().rstrip("/") for h in hosts if h.strip()))
        if isinstance(self.operation, str):
            self._set("operation", self.operation.strip().lower())
        if isinstance(self.version_type, str):
            self._set("version_type", self.version_type.strip().lower() or None)
        excluded = self.exclude_fields
        if excluded is None:
            excluded = ()
        if isinstance(excluded, str):
            excluded = excluded.split(",")
        if isinstance(excluded, Sequence) and all(isinstance(name, str) for name in excluded):
            self._set("exclude_fields", tuple(n.strip() for n in excluded if n.strip()))
        version = self.compatibility_version
        if isinstance(version, str):
            text = version.strip()
            self._set("compatibility_version", int(text) if text.isdigit() else text)
        for name in ("index", "pipeline", *(name for name, _ in _FIELD_OPTIONS)):
            value = getattr(self, name)
            if isinstance(value, str):
                self._set(name, value.strip() or None)

    @property
    def host_urls(self) -> tuple[str, ...]:
        """The nodes' base URLs, without a trailing slash."""
        hosts = self.hosts
        assert isinstance(hosts, tuple)  # normalised in __post_init__
        return hosts

    def _check_hosts(self) -> None:
        hosts = self.hosts
        if not isinstance(hosts, tuple):
            kind = f"<{type(hosts).__name__}>"
            raise OptionError("hosts", kind, "comma-separated http(s):// URLs, or a list of them")
        if not hosts:
            raise OptionError("hosts", "<empty>", "one or more comma-separated http(s):// URLs")
        for host in hosts:
            if "@" in host and "//" in host:
                raise OptionError(
                    "hosts",
                    "<not shown>",
                    "URLs without credentials",
                    message="option 'hosts' holds credentials in a URL: give them in "
                    "basicUsername and basicPassword (or apiKey) instead",
                )
            url = check_http_url("hosts", host)
            if url.query or url.fragment:
                raise OptionError("hosts", host, "URLs without query")

    def _check_targets(self) -> None:
        if self.index is None and self.index_field is None:
            raise OptionError(
                "index",
                None,
                "an index name",
                message="set option 'index' (every document goes there) or 'indexField' "
                "(each row names its index)",
            )
        if self.index is not None and not _valid_index(self.index):
            raise OptionError(
                "index",
                self.index,
                "the name of an index, alias or data stream as Elasticsearch takes it: lower "
                "case, not '.' or '..', not starting with '_', '-' or '+', none of "
                '\\ / * ? " < > | , # : or space, at most 255 bytes',
            )
        for name, spark in _FIELD_OPTIONS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise OptionError(spark, value, "a field name")
        if self.operation == "delete" and self.id_field is None:
            raise OptionError(
                "idField",
                None,
                "a field name",
                message="operation 'delete' needs option 'idField': the documents to delete "
                "are named by id",
            )

    def _check_auto_ids(self) -> None:
        if not self.auto_ids:
            return
        if self.id_field is not None:
            raise OptionError(
                "autoIds",
                True,
                "no autoIds with idField",
                message="options 'autoIds' and 'idField' contradict each other: ids come "
                "from the rows or from the cluster",
            )
        if self.operation not in ("index", "create"):
            raise OptionError(
                "autoIds",
                True,
                "operation 'index' or 'create' with it",
                message=f"option 'autoIds' needs operation 'index' or 'create' "
                f"({self.operation!r} names documents by id)",
            )

    def _check_versions(self) -> None:
        if not isinstance(self.exclude_fields, tuple):
            kind = f"<{type(self.exclude_fields).__name__}>"
            raise OptionError("excludeFields", kind, "comma-separated field names")
        if self.operation_field is not None:
            if self.id_field is None:
                raise OptionError(
                    "operationField",
                    self.operation_field,
                    "a field name, with idField",
                    message="option 'operationField' needs option 'idField': updates and "
                    "deletes name their documents by id",
                )
            if self.operation != "index":
                raise OptionError(
                    "operation",
                    self.operation,
                    "no operation with operationField",
                    message="options 'operation' and 'operationField' contradict each other: "
                    "the operation comes from the option or from each row",
                )
        if self.version_field is None:
            if self.version_type is not None:
                raise OptionError(
                    "versionType",
                    self.version_type,
                    "versionType only with versionField",
                    message="option 'versionType' needs option 'versionField': the field "
                    "that holds each document's version",
                )
            return
        if self.version_type is None:
            self._set("version_type", "external")
        if self.auto_ids:
            raise OptionError(
                "versionField",
                self.version_field,
                "no versionField with autoIds",
                message="options 'versionField' and 'autoIds' contradict each other: "
                "versions are kept per document id",
            )
        if self.operation in ("create", "update"):
            raise OptionError(
                "versionField",
                self.version_field,
                "operation 'index' or 'delete' with it",
                message=f"option 'versionField' needs operation 'index' or 'delete': "
                f"Elasticsearch takes no external version with {self.operation!r}",
            )

    @property
    def excluded_fields(self) -> tuple[str, ...]:
        """The fields kept out of ``_source`` (``excludeFields``)."""
        excluded = self.exclude_fields
        assert isinstance(excluded, tuple)  # normalised in __post_init__
        return excluded

    @property
    def versioned(self) -> bool:
        """Whether documents carry a version (``versionField``)."""
        return self.version_field is not None

    def _check_auth(self) -> None:
        self._check_credentials(
            ("api_key", "basic_username", "bearer_token", "aws_service"),
            username_refuses=":\r\n\0",
        )
        as_is = ["bearer_token"]  # an apiKey given as 'id:key' is sent base64-encoded
        if isinstance(self.api_key, str) and ":" not in self.api_key:
            as_is.append("api_key")
        self._check_secret_values(sent_as_is=as_is)
        self._check_signing()
        self._check_client_cert()

    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header these options call for (empty without credentials)."""
        if self.api_key is not None:
            key = self.api_key
            if ":" in key:
                key = base64.b64encode(key.encode()).decode("ascii")
            return {"authorization": f"ApiKey {key}"}
        if self.basic_username is not None:
            return {"authorization": self.basic_authorization()}
        if self.bearer_token is not None:
            return {"authorization": f"Bearer {self.bearer_token}"}
        return {}

    def secrets(self) -> list[str]:
        """Every value to keep out of logs and errors: the credentials and the header value
        built from them."""
        values = [self.api_key, self.basic_password, self.bearer_token]
        values += [self.client_key_password, *self.aws_secrets]
        for header in self.auth_headers().values():
            values += [header, header.partition(" ")[2]]
        return [value for value in values if value]


def _valid_index(name: str) -> bool:
    """Whether Elasticsearch takes ``name`` as the name of an index to write to."""
    return (
        name == name.lower()
        and name not in (".", "..")
        and not name.startswith(_NOT_FIRST_IN_INDEX)
        and _NOT_IN_INDEX.search(name) is None
        and len(name.encode()) <= 255
    )
