"""The fault proxy in front of moto's server, for the SQS, DynamoDB and Firehose tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers.aws_faults import AwsFaultProxy


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[AwsFaultProxy]:
    """A fault proxy in front of the session's moto server, stopped after the test."""
    with AwsFaultProxy(moto_endpoint) as running:
        yield running
