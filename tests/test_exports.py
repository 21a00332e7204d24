"""The public face: ``__all__`` and the package's attributes agree."""

import asyncsink
import asyncsink.durable
import asyncsink.entries
import asyncsink.policies
import asyncsink.stores
import asyncsink.telemetry
import asyncsink.writer


def test_all_names_are_exported_and_nothing_public_is_missing() -> None:
    packages = (asyncsink.durable, asyncsink.entries, asyncsink.policies, asyncsink.stores)
    for module in (asyncsink, *packages, asyncsink.telemetry, asyncsink.writer):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"
    public = {
        name
        for name, value in vars(asyncsink).items()
        if not name.startswith("_") and not isinstance(value, type(asyncsink))
    }
    assert public == set(asyncsink.__all__)
