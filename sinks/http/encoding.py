"""Entry bytes to request bodies.

Each written element is encoded once, when the writer accepts it, under the JSON
contract (``asyncsink.encoding``): a request body is then only the entries joined
(``[e1,e2,...]`` for JSON, ``e1\ne2\n...`` for NDJSON). A run kept as
``PackedEntries`` is joined in one copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from asyncsink.entries.packed import PackedEntries

__all__ = ["frame_json", "frame_ndjson"]


def frame_json(entries: Sequence[bytes]) -> bytes:
    """A JSON array of the entries: ``[e1,e2,...]``."""
    if type(entries) is PackedEntries and entries.separator == b",":
        return entries.joined(b"[", b"]")
    return b"[" + b",".join(entries) + b"]"


def frame_ndjson(entries: Sequence[bytes]) -> bytes:
    """Newline-delimited JSON: every entry on its own line, each line ending in ``\\n``."""
    if type(entries) is PackedEntries and entries.separator == b"\n":
        return entries.joined(suffix=b"\n")
    return b"\n".join(entries) + b"\n"
