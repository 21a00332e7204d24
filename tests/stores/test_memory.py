from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from asyncsink.stores import RecordStore, Scope, open_store
from asyncsink.stores.memory import MemoryStore
from tests.stores.conformance import StoreConformance


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[RecordStore]:
        async with MemoryStore() as store:
            yield store


class _DefaultSeal(MemoryStore):
    """A store that seals with ``RecordStore``'s default, built from take, put, complete."""

    seal = RecordStore.seal


class TestDefaultSeal(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[RecordStore]:
        async with _DefaultSeal() as store:
            yield store


@pytest.mark.anyio
async def test_stores_of_one_name_share_data_and_other_names_do_not() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    scope = Scope("sink", 0, 0)
    writer = open_store(f"memory://{name}")
    epoch = (await writer.take(scope)).epoch
    await writer.put(scope, epoch, {"k": b"v"})

    reader = open_store(f"memory://{name}")
    assert reader is not writer
    state = await reader.load(scope)
    assert state is not None and dict(state.records) == {"k": b"v"}
    assert await open_store(f"memory://{name}-other").load(scope) is None
    assert await MemoryStore().load(scope) is None, "an unnamed store has data of its own"


def test_from_url_rejects_other_schemes_and_options() -> None:
    with pytest.raises(ValueError, match="memory://NAME"):
        MemoryStore.from_url("sqlite:///x.db")
    with pytest.raises(ValueError, match="no options"):
        MemoryStore.from_url("memory://name?size=3")
    assert repr(MemoryStore.from_url("memory://abc")) == "MemoryStore('abc')"
