"""PutRecords requests built and answers read by the sink, around botocore.

botocore serializes a request one value at a time through the service's shape model,
which for PutRecords is a large share of the sink's CPU per record. The sink's records
are checked already (see ``records`` and ``options``), so the sink builds the JSON body
itself, with orjson, at a small part of that cost, and hands it to botocore at
``before-sign``: botocore still resolves the endpoint, signs the request (the signature
covers this body), sends it and turns an error answer into its exception.

An answer that succeeded (200) is read with orjson at ``before-parse`` and botocore
parses an empty object in its place (adding its ``ResponseMetadata`` as ever): its
parser walks the output shape one value at a time as well. ``answers`` checks every
result of the answer either way; an answer that is not a JSON object is left to
botocore, which reports it as before.

The call goes out with no records (``Records=[]``) and the body waits in a context
variable of the task that sends it: only a client with the hook installed puts the body
in, and should the hook ever be missing, Kinesis refuses a request with no records, so
nothing but the sink's own records can reach the stream.
"""

from __future__ import annotations

import base64
import contextvars
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .records import KinesisEntry

__all__ = ["install", "put_records", "put_records_body"]

_SIGN = "before-sign.kinesis.PutRecords"
_PARSE = "before-parse.kinesis.PutRecords"
_HOOK_ID = "asyncsink-put-records-"  # botocore keeps one handler per id, whatever the event
_BODY: contextvars.ContextVar[bytes | None] = contextvars.ContextVar(
    "asyncsink_put_records_body", default=None
)


def put_records_body(entries: Sequence[KinesisEntry], stream: Mapping[str, str]) -> bytes:
    """The PutRecords JSON body botocore would send for ``entries`` and the stream's
    parameters (``StreamName`` or ``StreamARN``): data in base64, the same members."""
    b64 = base64.b64encode
    records = [
        {"Data": b64(entry.data).decode("ascii"), "PartitionKey": entry.partition_key}
        if entry.explicit_hash_key is None
        else {
            "Data": b64(entry.data).decode("ascii"),
            "PartitionKey": entry.partition_key,
            "ExplicitHashKey": entry.explicit_hash_key,
        }
        for entry in entries
    ]
    return orjson.dumps({"Records": records, **stream})


def install(client: Any) -> None:
    """Let ``client`` send bodies built by ``put_records`` and read its PutRecords
    answers with orjson (idempotent)."""
    client.meta.events.register(_SIGN, _put_body, unique_id=_HOOK_ID + "body")
    client.meta.events.register(_PARSE, _read_answer, unique_id=_HOOK_ID + "answer")


async def put_records(
    client: Any, entries: Sequence[KinesisEntry], stream: Mapping[str, str]
) -> Any:
    """``client.put_records`` for ``entries``, with the body built here; ``client`` must
    have been through ``install``, and have botocore's parameter validation off (which
    would refuse the call's empty ``Records``). Returns botocore's parsed answer."""
    token = _BODY.set(put_records_body(entries, stream))
    try:
        return await client.put_records(Records=[], **stream)
    finally:
        _BODY.reset(token)


def _put_body(request: Any, **_: Any) -> None:
    body = _BODY.get()
    if body is not None:
        request.data = body


def _read_answer(response_dict: Any, customized_response_dict: Any, **_: Any) -> None:
    if response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body")
    if not isinstance(body, bytes):
        return
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    if isinstance(answer, dict):
        customized_response_dict.update(answer)
        response_dict["body"] = b"{}"
