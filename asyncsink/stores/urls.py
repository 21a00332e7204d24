"""Reading the URLs of the built-in stores: what each names and the options it takes.

Reading a URL opens nothing and creates nothing, so a driver can check a ``recordStore``
before any task starts (``asyncsink.stores.check_store_url``). Messages state the rule a
URL breaks and name options, never an option's value: a secret given by mistake as an
option must not reach a log. ``open_store`` and ``check_store_url`` add the URL, masked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, parse_qsl, urlsplit

__all__ = [
    "DynamoDBURL",
    "PostgreSQLURL",
    "parse_dynamodb_url",
    "parse_memory_url",
    "parse_postgresql_url",
    "parse_sqlite_url",
]

_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+)+")
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}", re.ASCII)
_PG_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,39}"
_PG_TABLE = re.compile(rf"(?:({_PG_NAME})\.)?({_PG_NAME})")
_PG_OWN_OPTIONS = ("create_table", "table")


@dataclass(frozen=True, slots=True)
class DynamoDBURL:
    """What a ``dynamodb://TABLE?...`` URL names."""

    table: str
    region: str | None = None
    endpoint_url: str | None = None
    create_table: bool = True
    role_arn: str | None = None
    external_id: str | None = None
    role_session_name: str | None = None


@dataclass(frozen=True, slots=True)
class PostgreSQLURL:
    """What a ``postgresql://...`` URL names: the libpq connection URI (the URL without
    the store's own options) and the tables ``<table>_scopes`` and ``<table>_records``,
    in ``schema`` when given (else the first schema of the ``search_path``)."""

    conninfo: str
    table: str = "asyncsink"
    schema: str | None = None
    create_table: bool = True


def parse_postgresql_url(url: str) -> PostgreSQLURL:
    """The connection URI and the store options of
    ``postgresql://[user[:password]@][host][:port][/dbname][?table=..&create_table=..&...]``.

    ``table`` (``NAME`` or ``SCHEMA.NAME``, default ``asyncsink``) and ``create_table``
    (``true``/``false``) are the store's; every other option stays in the URI for libpq
    (``sslmode``, ``connect_timeout``, ``service``, ...), which checks their names when
    the store is opened. ``postgres://`` is accepted as well.

    Raises:
        ValueError: not a postgresql URL, or a malformed ``table`` or ``create_table``.
    """
    form = "postgresql://[user@]host[:port]/dbname[?table=NAME]"
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in ("postgresql", "postgres"):
        raise ValueError(f"not a postgresql store URL (expected {form})")
    base, _, query = rest.partition("?")
    if "#" in rest:
        raise ValueError(f"a postgresql store URL has no fragment (expected {form})")
    try:
        items = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(
            f"malformed options in a postgresql store URL (expected {form}&NAME=VALUE...)"
        ) from None
    own = {name: value for name, value in items if name in _PG_OWN_OPTIONS}
    kept = "&".join(part for part in query.split("&") if part.partition("=")[0] not in own)
    match = _PG_TABLE.fullmatch(own.get("table", "asyncsink"))
    if match is None:
        raise ValueError(
            "postgresql store option table must be NAME or SCHEMA.NAME, each a letter or "
            "'_' then up to 39 letters, digits or '_'"
        )
    create = own.get("create_table", "true").lower()
    if create not in ("true", "false"):
        raise ValueError("postgresql store option create_table must be true or false")
    conninfo = f"postgresql://{base}" + (f"?{kept}" if kept else "")
    return PostgreSQLURL(conninfo, match.group(2), match.group(1), create_table=create == "true")


def parse_memory_url(url: str) -> str:
    """The name in ``memory://NAME``.

    Raises:
        ValueError: not a memory URL, or it carries options.
    """
    name, options = _split(url, "memory", "memory://NAME")
    if options or "#" in name or "?" in url:
        raise ValueError("memory store URLs take no options (expected memory://NAME)")
    return name


def parse_sqlite_url(url: str) -> tuple[str, float | None]:
    """The file path and the ``timeout`` option (``None`` when not given) of a SQLite URL.

    Raises:
        ValueError: not a sqlite URL, no file path, an unknown or malformed option, or a
            timeout that is not a number of seconds > 0.
    """
    form = "sqlite:///abs/path.db or sqlite://relative/path.db"
    path, options = _split(url, "sqlite", form)
    if not path or path == "/":
        raise ValueError(f"sqlite store URL without a file path (expected {form})")
    _allow("sqlite", options, ["timeout"])
    if "timeout" not in options:
        return path, None
    try:
        timeout = check_timeout(float(options["timeout"]))
    except ValueError:
        raise ValueError("sqlite store option timeout must be a number of seconds > 0") from None
    return path, timeout


def parse_dynamodb_url(url: str) -> DynamoDBURL:
    """The table and options of ``dynamodb://TABLE?region=..&endpoint_url=..&create_table=..``.

    Raises:
        ValueError: not a dynamodb URL, no valid table name, or an unknown or malformed
            option.
    """
    form = "dynamodb://TABLE"
    table, options = _split(url, "dynamodb", form)
    table = table.removesuffix("/")
    if not _TABLE_NAME.fullmatch(table):
        raise ValueError(
            f"not a dynamodb store URL (expected {form}, a table name of 3 to 255 letters, "
            "digits, '_', '-' or '.')"
        )
    _allow(
        "dynamodb",
        options,
        ["create_table", "endpoint_url", "external_id", "region", "role_arn", "role_session_name"],
    )
    create = options.get("create_table", "true").lower()
    if create not in ("true", "false"):
        raise ValueError("dynamodb store option create_table must be true or false")
    region, endpoint = options.get("region"), options.get("endpoint_url")
    if region is not None and not _REGION.fullmatch(region):
        raise ValueError("dynamodb store option region must be a region name, like us-east-1")
    if endpoint is not None:
        parts = urlsplit(endpoint)
        try:
            parts.port  # noqa: B018 (a port that is not a number raises)
        except ValueError:
            parts = parts._replace(netloc="")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "dynamodb store option endpoint_url must be an http:// or https:// URL with "
                "a host, like http://127.0.0.1:8000"
            )
    role = options.get("role_arn")
    if role is not None and not _ROLE_ARN.fullmatch(role):
        raise ValueError(
            "dynamodb store option role_arn must be a role ARN, like "
            "arn:aws:iam::123456789012:role/NAME"
        )
    for name in ("external_id", "role_session_name"):
        if options.get(name) is not None and role is None:
            raise ValueError(f"dynamodb store option {name} needs role_arn")
    return DynamoDBURL(
        table,
        region,
        endpoint,
        create_table=create == "true",
        role_arn=role,
        external_id=options.get("external_id"),
        role_session_name=options.get("role_session_name"),
    )


def check_timeout(timeout: float) -> float:
    """``timeout`` if it is a finite number of seconds > 0.

    Raises:
        ValueError: it is not.
    """
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout}")
    return timeout


def _split(url: str, scheme: str, form: str) -> tuple[str, dict[str, str]]:
    """What follows ``scheme://`` up to ``?``, and the options (the last of each name)."""
    prefix = f"{scheme}://"
    if url[: len(prefix)].lower() != prefix:
        raise ValueError(f"not a {scheme} store URL (expected {form})")
    rest, _, query = url[len(prefix) :].partition("?")
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(
            f"malformed options in a {scheme} store URL (expected {form}?NAME=VALUE&...)"
        ) from None
    return rest, {name: values[-1] for name, values in parsed.items()}


def _allow(scheme: str, options: dict[str, str], allowed: list[str]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {scheme} store options {unknown}; allowed: {allowed}")
