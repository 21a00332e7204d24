"""The contract's text of single values: what Arrow columns and Python values share."""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = [
    "duration_text",
    "interval_text",
    "time_text",
    "timestamp_text",
    "variant_text",
]

_UTC = dt.UTC


def _seconds(micros: int) -> str:
    """Seconds of a count of microseconds, exact, without trailing zeros."""
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    decimals = f".{fraction:06d}".rstrip("0") if fraction else ""
    return f"{sign}{seconds}{decimals}"


def duration_text(value: dt.timedelta) -> str:
    """``PT<seconds>S`` (``-PT1.5S`` for a negative one), exact to the microsecond."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    text = _seconds(micros)
    return f"-PT{text[1:]}S" if text.startswith("-") else f"PT{text}S"


def interval_text(value: Any) -> str:
    """A calendar interval (months, days, nanoseconds) as ``P<m>M<d>DT<s>S``."""
    months, days, nanoseconds = value
    return f"P{months}M{days}DT{_seconds(nanoseconds // 1000)}S"


def time_text(value: dt.time) -> str:
    """``HH:MM:SS.ffffff``: always six decimals."""
    return value.replace(tzinfo=None).isoformat(timespec="microseconds")


def timestamp_text(value: dt.datetime, zone: dt.tzinfo | None) -> str:
    """RFC 3339 with six decimals: an aware value in ``zone`` (UTC, with ``Z``, when
    ``zone`` is ``None``), a naive one without an offset."""
    if value.tzinfo is None:
        return value.isoformat(timespec="microseconds")
    if zone is None:
        return value.astimezone(_UTC).replace(tzinfo=None).isoformat("T", "microseconds") + "Z"
    return value.astimezone(zone).isoformat("T", "microseconds")


def variant_text(value: Any) -> bytes:
    """The JSON of a Spark variant: a ``VariantVal``, or the dict of its ``value`` and
    ``metadata`` bytes (as Arrow carries it)."""
    from pyspark.sql.types import VariantVal

    if not isinstance(value, VariantVal):
        value = VariantVal(bytes(value["value"]), bytes(value["metadata"]))
    text: str = value.toJson("UTC")
    return text.encode("utf-8")
