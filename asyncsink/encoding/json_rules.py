"""The JSON contract: how every Spark SQL value becomes JSON, for every sink and every path.

One row becomes one JSON object, with the row's fields in column order. Nothing is lost:
a reader can rebuild each value exactly.

=========================  ===============================================================
Spark SQL type             JSON
=========================  ===============================================================
NULL (any type)            ``null``, kept at every depth (a struct's null field included)
BOOLEAN                    ``true`` / ``false``
TINYINT ... BIGINT         a number, every digit (``9223372036854775807``)
FLOAT                      the shortest number that reads back as the same 32-bit float
                           (``0.1``)
DOUBLE                     the shortest number that reads back as the same double
                           (``1e+16``, ``-0.0``)
FLOAT / DOUBLE NaN, ±inf   the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (as
                           Spark's ``to_json`` writes them; ``from_json`` reads them back)
DECIMAL(p, s)              an exact number with ``s`` decimals (``12.50``); the string
                           ``"12.50"`` with ``decimalAs=string``
STRING, CHAR, VARCHAR      a string; ``"``, ``\\`` and controls below U+0020 escaped
BINARY                     a string: standard base64 with padding
DATE                       ``"2024-03-10"``
TIMESTAMP                  RFC 3339 with six decimals and the offset:
                           ``"2024-03-10T07:30:00.123456Z"`` (UTC), or in the zone of
                           option ``timeZone`` (``"2024-03-10T03:30:00.123456-04:00"``)
TIMESTAMP_NTZ              the same without an offset: ``"2024-03-10T03:30:00.123456"``
TIME                       ``"12:34:56.789000"``
INTERVAL DAY TO SECOND     an ISO 8601 duration in seconds: ``"PT93784.5S"``, ``"-PT1S"``
INTERVAL (calendar)        ``"P14M25DT18367.5S"`` (months, days, seconds; each may be
                           negative)
ARRAY                      an array
MAP                        an object; a key that is not a string is written as its JSON
                           text (``1`` -> ``"1"``, a date -> ``"2024-03-10"``)
STRUCT                     an object, fields in order
VARIANT                    the variant's own JSON, embedded (not a string)
=========================  ===============================================================

INTERVAL YEAR TO MONTH cannot be read through Arrow by PySpark: such a column is refused
on the driver, with the cast to use. Map keys of struct, array or map type are refused
too (write ``to_json(key)`` as the key instead).
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from typing import Literal

__all__ = ["JsonContract"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonContract:
    """The choices the JSON contract leaves to the user (see the module docstring).

    Raises:
        ValueError: ``decimal_as`` or ``time_zone`` is not one of the allowed values.
    """

    decimal_as: Literal["number", "string"] = "number"
    """Decimals as exact JSON numbers (default) or as strings."""
    time_zone: str = "UTC"
    """The zone timestamps are written in: ``UTC`` (with ``Z``) or an IANA zone name
    (with its offset at that instant, ``-04:00``)."""

    def __post_init__(self) -> None:
        if self.decimal_as not in ("number", "string"):
            raise ValueError(f"decimal_as must be 'number' or 'string', not {self.decimal_as!r}")
        if not self.utc:
            try:
                zoneinfo.ZoneInfo(self.time_zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(
                    f"time zone {self.time_zone!r} is not a known IANA zone name "
                    "(such as 'UTC' or 'Europe/Paris')"
                ) from exc

    @property
    def utc(self) -> bool:
        """Whether timestamps are written in UTC, with ``Z``."""
        return self.time_zone.upper() in ("UTC", "Z", "ETC/UTC")
