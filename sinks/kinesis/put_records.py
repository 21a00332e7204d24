"""PutRecords requests built and answers read by the sink, around botocore: the one way
every client (the sink's own, one given by the caller, a test double) gets the records.

The sink calls ``client.put_records(Records=EncodedRecords(entries), **stream)`` whatever
the client. ``EncodedRecords`` reads as the list of ``Records`` members botocore takes,
so a test double, or a client without the hooks below, sees ordinary records.

botocore serializes a request one value at a time through the service's shape model,
which for PutRecords is a large share of the sink's CPU per record. The sink's records
are checked already (see ``records`` and ``options``), so ``install`` registers hooks
(``client.meta.events``, botocore's public event system) that build the JSON body with
orjson instead: at ``before-parameter-build`` the body goes into the call's context and
the records give way to one placeholder, at ``before-sign`` the body replaces the
placeholder's. botocore still resolves the endpoint, validates the parameters (if the
client does), signs the request (the signature covers this body), sends it and turns an
error answer into its exception. The placeholder's partition key is longer than Kinesis
allows, so should the body ever not replace it, Kinesis refuses the request and nothing
but the sink's own records can reach the stream.

An answer that succeeded (200) is read with orjson at ``before-parse`` and botocore
parses an empty object in its place (adding its ``ResponseMetadata`` as ever): its
parser walks the output shape one value at a time as well. ``answers`` checks every
result of the answer either way; an answer that is not a JSON object is left to
botocore, which reports it as before. A large body is handed to aiohttp as a stream
(``before-send``): aiohttp warns that a large bytes body may block the loop.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any, overload

import orjson

from .converter import KinesisEntry

__all__ = ["EncodedRecords", "install", "put_records", "put_records_body"]

_BUILD = "before-parameter-build.kinesis.PutRecords"
_SIGN = "before-sign.kinesis.PutRecords"
_SEND = "before-send.kinesis.PutRecords"
_PARSE = "before-parse.kinesis.PutRecords"
_HOOK_ID = "asyncsink-put-records-"  # botocore keeps one handler per id, whatever the event
_CONTEXT_KEY = "asyncsink_put_records_body"
_PLACEHOLDER = {"Data": b"", "PartitionKey": "-" * 257}  # Kinesis takes at most 256
_LARGE_BODY = 1024 * 1024


class EncodedRecords(Sequence[dict[str, Any]]):
    """The ``Records`` of a PutRecords call, held as the sink's entries: each member is
    the entry's ``to_request()`` when read; a client with the hooks of ``install`` sends
    the entries as one body built here instead."""

    __slots__ = ("entries",)

    def __init__(self, entries: Sequence[KinesisEntry]) -> None:
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [entry.to_request() for entry in self.entries[index]]
        return self.entries[index].to_request()


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
    """Let ``client`` send the bodies of ``EncodedRecords`` built here and read its
    PutRecords answers with orjson (idempotent). A client without botocore's events (a
    test double) is left as it is: it reads the records as they are."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None:
        return
    events.register(_BUILD, _encode_records, unique_id=_HOOK_ID + "records")
    events.register(_SIGN, _put_body, unique_id=_HOOK_ID + "body")
    events.register(_SEND, _stream_large_body, unique_id=_HOOK_ID + "stream")
    events.register(_PARSE, _read_answer, unique_id=_HOOK_ID + "answer")


async def put_records(
    client: Any, entries: Sequence[KinesisEntry], stream: Mapping[str, str]
) -> Any:
    """``client.put_records`` for ``entries`` as ``EncodedRecords`` and the stream's
    parameters (``StreamName`` or ``StreamARN``). Returns the client's parsed answer."""
    return await client.put_records(Records=EncodedRecords(entries), **stream)


def _encode_records(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    records = params.get("Records")
    if type(records) is EncodedRecords:
        stream = {name: value for name, value in params.items() if name != "Records"}
        context[_CONTEXT_KEY] = put_records_body(records.entries, stream)
        params["Records"] = [_PLACEHOLDER]


def _put_body(request: Any, **_: Any) -> None:
    body = request.context.get(_CONTEXT_KEY)
    if body is not None:
        request.data = body


def _stream_large_body(request: Any, **_: Any) -> None:
    body = request.body
    if isinstance(body, bytes) and len(body) > _LARGE_BODY:
        request.body = io.BytesIO(body)


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
