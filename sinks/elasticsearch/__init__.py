"""Elasticsearch sink: rows indexed with ``_bulk`` requests, sent through aiohttp.

``ElasticsearchWriter`` turns each row into one bulk operation and gives every document an
``_id`` (mapped from the row, or derived from the task's scope and the row's position), so
that re-sent and replayed rows overwrite their documents instead of duplicating them;
``ElasticsearchOptions`` says which cluster, index and operation; ``create_writer`` builds
both option groups from one mapping of Spark options. Writers share a client per process,
event loop and configuration with the HTTP sink's (``close_clients`` closes the running
loop's)::

    writer = create_writer({"hosts": "https://es1:9200,https://es2:9200",
                            "index": "events", "apiKey": key, "maxBatchSize": "1000"})
    async with writer:
        await writer.write_all(rows)
"""

from ..web.clients import close_clients
from .actions import BulkEntry, document_id
from .hosts import HostPool
from .options import ElasticsearchOptions, Operation
from .writer import ElasticsearchWriter, create_writer

__all__ = [
    "BulkEntry",
    "ElasticsearchOptions",
    "ElasticsearchWriter",
    "HostPool",
    "Operation",
    "close_clients",
    "create_writer",
    "document_id",
]
