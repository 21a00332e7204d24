"""An Elasticsearch-compatible ``_bulk`` / ``_mget`` endpoint for the tests, benchmarks and
the demo: ``ElasticsearchServer`` runs it, ``EsFaults`` says what it does wrong, ``EsStats``
is what it counted (see :mod:`tests.servers.elasticsearch.server`).

It emulates a third-party system, so it lives with the tests and stays out of the wheel.
From the repository's root, ``python -m tests.servers.elasticsearch --help`` runs it on its
own.
"""

from __future__ import annotations

from .model import EsFaults, EsStats
from .server import ElasticsearchServer

__all__ = ["ElasticsearchServer", "EsFaults", "EsStats"]
