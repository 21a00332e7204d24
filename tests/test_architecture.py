"""The shape of the library: no class of more than 30 methods, a small writer core, and
capabilities declared rather than guessed from which methods a class overrides."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from asyncsink import AsyncSinkWriter, CallInfo, Reconcile

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = [ROOT / "asyncsink", ROOT / "sinks"]
MOST_METHODS = 30
WRITER_LINES = 650


def library_modules() -> list[Path]:
    found: set[Path] = set()
    for folder in LIBRARY:
        found.update(path.resolve() for path in folder.rglob("*.py"))
    return sorted(found)


def test_no_class_in_the_library_has_more_than_30_methods() -> None:
    crowded = []
    for path in library_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                methods = [
                    item
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                if len(methods) > MOST_METHODS:
                    crowded.append(f"{path.relative_to(ROOT)}: {node.name} ({len(methods)})")
    assert crowded == []


def test_the_writer_core_stays_small() -> None:
    lines = len((ROOT / "asyncsink" / "writer" / "_writer.py").read_text().splitlines())
    assert lines <= WRITER_LINES


def of_a_type(node: ast.expr) -> bool:
    """``type(x).name`` (or ``x.__func__``): a method looked up to be compared."""
    if not isinstance(node, ast.Attribute):
        return False
    called = node.value
    by_type = isinstance(called, ast.Call) and getattr(called.func, "id", None) == "type"
    return by_type or node.attr == "__func__"


def test_no_capability_is_found_by_comparing_methods() -> None:
    comparisons = []
    for path in library_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Is | ast.IsNot) for op in node.ops
            ):
                if any(of_a_type(side) for side in [node.left, *node.comparators]):
                    comparisons.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert comparisons == []


class Minimal(AsyncSinkWriter[Any, Any]):
    def convert(self, element: Any) -> Any:
        return element

    def entry_size(self, entry: Any) -> int:
        return 1

    async def submit_request_entries(self, entries: list[Any]) -> None:
        return None


def test_a_sink_that_overrides_a_reconciler_without_declaring_it_is_refused() -> None:
    with pytest.raises(TypeError) as caught:

        class Undeclared(Minimal):
            async def reconcile_entries(self, call: CallInfo, entries: list[Any]) -> None:
                return None

    message = str(caught.value)
    assert "Undeclared overrides reconcile_entries" in message
    assert "reconciliation = Reconcile.BY_ENTRIES" in message


def test_a_declared_reconciler_must_exist() -> None:
    with pytest.raises(TypeError, match="Claims declares .* does not implement reconcile"):

        class Claims(Minimal):
            reconciliation = Reconcile.BY_CALL


def test_a_declaration_is_inherited_with_its_method() -> None:
    class ByCall(Minimal):
        reconciliation = Reconcile.BY_CALL

        async def reconcile(self, call: CallInfo) -> None:
            return None

    class Subclass(ByCall):
        async def reconcile(self, call: CallInfo) -> None:
            return None

    assert Subclass.reconciliation is Reconcile.BY_CALL
    assert Minimal.reconciliation is Reconcile.NONE
