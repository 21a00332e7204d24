"""The public face: ``__all__`` and the package's attributes agree."""

import asyncsink
import asyncsink.durable
import asyncsink.stores
import asyncsink.telemetry


def test_all_names_are_exported_and_nothing_public_is_missing() -> None:
    for module in (asyncsink, asyncsink.durable, asyncsink.stores, asyncsink.telemetry):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"
    public = {
        name
        for name, value in vars(asyncsink).items()
        if not name.startswith("_") and not isinstance(value, type(asyncsink))
    }
    assert public == set(asyncsink.__all__)
