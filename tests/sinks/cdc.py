"""A change-data-capture workload for the versioned-writes tests: keys, their changes in
order, the faults that reorder them, and the check of the final state.

``changes()`` gives 2,000 keys x 25 changes: each change replaces the key's document
(``index``) or deletes it (``delete``, about one in eight, and the last change of every
fifth key). ``lsn`` grows with every change, as a database log's position does. Keys
come in groups of 50 whose changes interleave, so one request carries several changes of
a key: an item failed inside a 2xx answer is retried after later changes of its key
landed, which is how an older change ends up stored last without versions.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from tests.servers.elasticsearch import EsFaults

__all__ = ["FAULTS", "KEYS", "PER_KEY", "changes", "final_state", "wrong_keys"]

KEYS = 2_000
PER_KEY = 25
_GROUP = 50

# Answers delayed 0-50 ms (requests land out of order), 20% of items failed inside 2xx
# answers, 5% of requests failed whole.
FAULTS = EsFaults(latency_jitter_ms=50, item_unavailable_rate=0.2,
                  request_unavailable_rate=0.05, seed=46)  # fmt: skip

DOCUMENT_FIELDS = ("id", "lsn", "name", "amount")  # what the index holds of a change


def changes(keys: int = KEYS, per_key: int = PER_KEY, seed: int = 46) -> list[dict[str, Any]]:
    """Every change, in log order: ``id``, ``op`` (``index`` or ``delete``), ``lsn``,
    ``name`` and ``amount``."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    lsn = 0
    for first in range(0, keys, _GROUP):
        group = range(first, min(first + _GROUP, keys))
        for change in range(per_key):
            for key in group:
                lsn += 1
                last = change == per_key - 1
                delete = (last and key % 5 == 0) or (not last and rng.random() < 0.12)
                row: dict[str, Any] = {"id": f"k{key}", "op": "delete" if delete else "index",
                                       "lsn": lsn, "name": None, "amount": None}  # fmt: skip
                if not delete:
                    row["name"] = f"key {key} change {change}"
                    row["amount"] = round(rng.uniform(0, 1000), 2)
                rows.append(row)
    return rows


def final_state(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The document each key must end with (its last change; none when it was a delete),
    as the index stores it: without the ``op`` field."""
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        last[row["id"]] = row
    return {
        key: {name: row[name] for name in DOCUMENT_FIELDS}
        for key, row in last.items()
        if row["op"] != "delete"
    }


def wrong_keys(expected: Mapping[str, Any], held: Mapping[str, Any]) -> list[str]:
    """The keys whose stored document is not their last change (or that are present
    though deleted, or absent though not)."""
    keys = expected.keys() | held.keys()
    return sorted(key for key in keys if expected.get(key) != held.get(key))
