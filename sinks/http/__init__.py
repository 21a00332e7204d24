"""HTTP sink: batches of rows POSTed (or PUT) to any HTTP endpoint, sent through aiohttp.

``HttpWriter`` sends each batch as a JSON array (or NDJSON) with an ``Idempotency-Key``
that is the same on every re-send of a request; ``HttpOptions`` says where, how to
authenticate, encode and compress, and how to read per-entry results; ``create_writer``
builds both option groups from one mapping of Spark options. Writers share a client per
process, event loop and configuration (``close_clients`` closes the running loop's)::

    writer = create_writer({"url": "https://ingest.example.com/v1/events",
                            "bearerToken": token, "maxBatchSize": "500"})
    async with writer:
        await writer.write_all(rows)
"""

from ..web.classify import parse_retry_after
from ..web.clients import close_clients
from .options import HttpOptions
from .writer import HttpWriter, create_writer

__all__ = [
    "HttpOptions",
    "HttpWriter",
    "close_clients",
    "create_writer",
    "parse_retry_after",
]
