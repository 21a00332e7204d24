"""The rows of a typical event table, made from a column of numbers: what the demo streams
and the benchmarks write, so that both take the path users' tables take."""

from __future__ import annotations

__all__ = ["event_columns"]


def event_columns(n: str) -> tuple[str, ...]:
    """SQL expressions of an event row made from the long column ``n``: ts timestamp, day
    date, kind string, user struct<id, name, country>, tags array<string>, attrs
    map<string, string>, amount decimal(12,2), score double, ok boolean (about 250 bytes
    of JSON with an id)."""
    return (
        f"timestamp_micros(1700000000000000 + {n} * 1000003) AS ts",
        f"date_add(date'2024-01-01', cast({n} % 365 AS int)) AS day",
        f"element_at(array('click', 'view', 'purchase', 'signup'), cast({n} % 4 + 1 AS int)) "
        "AS kind",
        f"named_struct('id', {n} % 100000, 'name', concat('user-', cast({n} % 100000 AS "
        f"string)), 'country', element_at(array('FR', 'US', 'DE', 'JP', 'BR'), "
        f"cast({n} % 5 + 1 AS int))) AS user",
        f"array(concat('tag-', cast({n} % 10 AS string)), concat('tag-', cast({n} % 7 AS "
        "string))) AS tags",
        f"map('source', 'web', 'campaign', concat('spring-', cast({n} % 50 AS string)), "
        f"'page', concat('/product/', cast({n} % 1000 AS string))) AS attrs",
        f"cast(({n} * 37) % 100000 / 100 AS decimal(12, 2)) AS amount",
        f"({n} % 1000) / 7.0d AS score",
        f"{n} % 7 != 0 AS ok",
    )
