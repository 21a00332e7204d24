"""Idempotency keys are name-based UUIDs (version 5): the same call gets the same key in
every version of asyncsink, and every process."""

from __future__ import annotations

import random
import uuid

import pytest

from asyncsink.request import idempotency_key

NAMESPACE = uuid.UUID("6f1c7f2e-3b1a-5d6e-9a43-0c2f5b8e7d10")


def test_a_key_is_the_uuid5_of_scope_and_call() -> None:
    assert idempotency_key("sink/3/0", 17) == str(uuid.uuid5(NAMESPACE, "sink/3/0#17"))
    assert idempotency_key("sink/3/0", 17) == "6b9fd6df-7987-59e4-8626-ce722baacb60"


def test_keys_match_uuid5_for_any_scope_and_content() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        scope = "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(0, 30)))
        call = rng.randrange(0, 10**12)
        key = idempotency_key(scope, call)
        assert key == str(uuid.uuid5(NAMESPACE, f"{scope}#{call}"))
        parsed = uuid.UUID(key)
        assert parsed.version == 5 and parsed.variant == uuid.RFC_4122
    content = rng.randbytes(300)
    assert idempotency_key("s", 1, content) != idempotency_key("s", 1, content + b"x")
    assert idempotency_key("s", 1, content) == idempotency_key("s", 1, bytes(content))


def test_a_scope_that_is_not_unicode_text_is_refused() -> None:
    with pytest.raises(UnicodeEncodeError):
        idempotency_key("\ud800", 1)
