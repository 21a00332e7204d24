"""The library goes through the public API of the libraries it builds on: no private
module, attribute or method of httpx, httpcore, aiohttp, botocore, aiobotocore, pyspark or
py4j anywhere in ``asyncsink/`` or ``sinks/`` (a private one changes without notice, and a
mock replacing the public one would test another path). Where PySpark offers no public
way, the one place that does it says so in a comment, and is listed in ``ALLOWED``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENDORS = {"httpx", "httpcore", "aiohttp", "botocore", "aiobotocore", "pyspark", "py4j"}
# Private names of those libraries' objects that code reaching into them would use; on
# ``self`` or ``cls`` the library's own attributes of these names are fine.
DENIED = {
    "_transport_for_url", "_transport", "_mounts", "_pool", "_connector", "_session",
    "_endpoint", "_client_config", "_make_api_call", "_make_request", "_request_signer",
    "_service_model", "_serializer", "_response_parser", "_event_emitter", "_base_url",
    "_python_includes", "_jsc", "_jvm", "_jdf", "_jconf", "_jsparkSession", "_sc",
    "_gateway", "__fields__",
}  # fmt: skip
# The one use PySpark gives no public way for, with the comment that says so beside it:
# the name of a Row's field that appears twice (``asDict`` keeps one of them).
ALLOWED = {("asyncsink/entries/rows.py", "__fields__")}
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
        elif isinstance(node, ast.Attribute) and node.attr in DENIED:
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


def test_the_library_uses_no_private_part_of_httpx_aiohttp_botocore_or_pyspark() -> None:
    files = library_files()
    assert any(p.parts[-3:] == ("sinks", "web", "writer.py") for p in files)
    found = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in files
        for where in violations(path.read_text(encoding="utf-8"))
        if not _allowed(path.relative_to(ROOT).as_posix(), where)
    ]
    assert found == []


def test_each_allowed_use_is_explained_where_it_is() -> None:
    for path, name in ALLOWED:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert name in text and "PySpark has no public way" in text, path


def _allowed(path: str, where: str) -> bool:
    return any(
        path == place and where.endswith((f".{name}", f"{name!r})")) for place, name in ALLOWED
    )


@pytest.mark.parametrize(
    "source",
    [
        "import httpx\ndef f(c):\n    return getattr(c, '_transport_for_url', None)\n",
        "def f(client):\n    return client._endpoint.host\n",
        "import httpx\nx = httpx._client.AsyncClient\n",
        "from httpx._models import Request\n",
        "from aiohttp import ClientSession\ns = ClientSession._request\n",
        "def f(client):\n    client.meta.events._emitter = None\n    return client._transport\n",
        "def f(sc):\n    return getattr(sc, '_python_includes', None)\n",
        "import pyspark\nx = pyspark.sql.types._parse_datatype_string\n",
        "def f(row):\n    return row.__fields__\n",
        "from pyspark.sql._typing import ColumnOrName\n",
    ],
)
def test_the_check_catches_a_private_use(source: str) -> None:
    assert violations(source)


def test_the_check_leaves_an_objects_own_attributes_alone() -> None:
    source = "class T:\n    def f(self):\n        return self._session, self._transport\n"
    assert violations(source) == []
