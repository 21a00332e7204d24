"""The library goes through the public API of the HTTP and AWS libraries it builds on: no
private module, attribute or method of httpx, httpcore, aiohttp, botocore or aiobotocore
anywhere in ``asyncsink/`` or ``sinks/`` (a private one changes without notice, and a
mock replacing the public one would test another path)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENDORS = {"httpx", "httpcore", "aiohttp", "botocore", "aiobotocore"}
# Private names of those libraries' objects that code reaching into them would use; on
# ``self`` or ``cls`` the library's own attributes of these names are fine.
DENIED = {
    "_transport_for_url", "_transport", "_mounts", "_pool", "_connector", "_session",
    "_endpoint", "_client_config", "_make_api_call", "_make_request", "_request_signer",
    "_service_model", "_serializer", "_response_parser", "_event_emitter", "_base_url",
}  # fmt: skip
ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def violations(source: str) -> list[str]:
    """Every use of a private part of a vendor library in ``source``, with its line."""
    tree = ast.parse(source)
    vendor_names: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in VENDORS:
                    vendor_names.add((alias.asname or alias.name).split(".")[0])
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] in VENDORS and node.level == 0:
                if any(_private(part) for part in parts):
                    found.append(f"{node.lineno}: from {node.module} import")
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                    vendor_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node)
            owner = root.id if isinstance(root, ast.Name) else ""
            if owner in vendor_names:
                found.append(f"{node.lineno}: {owner}...{node.attr}")
            elif node.attr in DENIED and owner not in ("self", "cls"):
                found.append(f"{node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ACCESSORS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in DENIED
        ):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def library_files() -> list[Path]:
    return sorted(p for top in ("asyncsink", "sinks") for p in (ROOT / top).rglob("*.py"))


def test_the_library_uses_no_private_part_of_httpx_aiohttp_or_botocore() -> None:
    files = library_files()
    assert any(p.parts[-3:] == ("sinks", "web", "writer.py") for p in files)
    found = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in files
        for where in violations(path.read_text(encoding="utf-8"))
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "import httpx\ndef f(c):\n    return getattr(c, '_transport_for_url', None)\n",
        "def f(client):\n    return client._endpoint.host\n",
        "import httpx\nx = httpx._client.AsyncClient\n",
        "from httpx._models import Request\n",
        "from aiohttp import ClientSession\ns = ClientSession._request\n",
        "def f(client):\n    client.meta.events._emitter = None\n    return client._transport\n",
    ],
)
def test_the_check_catches_a_private_use(source: str) -> None:
    assert violations(source)


def test_the_check_leaves_an_objects_own_attributes_alone() -> None:
    source = "class T:\n    def f(self):\n        return self._session, self._transport\n"
    assert violations(source) == []
