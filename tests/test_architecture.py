"""The shape of the library: no class of more than 30 methods, a small writer core, a
package root of a few modules, the writer's internals private to its package, the Spark
layer free of the sinks, and capabilities declared rather than guessed from which methods a
class overrides."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from asyncsink import AsyncSinkWriter, CallInfo, Reconcile

from .test_no_private_vendor_api import VENDORS, violations

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = [ROOT / "asyncsink", ROOT / "sinks"]
MOST_METHODS = 30
WRITER_LINES = 700  # the writer hands its parts the work; a policy hook costs it lines, not rooms
MOST_ROOT_MODULES = 8


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


def module_name(path: Path) -> str:
    """The dotted name ``path`` installs under (``sinks/`` installs as ``asyncsink.sinks``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "sinks":
        parts.insert(0, "asyncsink")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, by absolute name, with its line (``from x import y``
    counts as ``x.y`` too, since ``y`` may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def test_the_package_root_keeps_a_handful_of_modules() -> None:
    """The public API, errors, options and a few more; each concern has its package."""
    modules = sorted(path.name for path in (ROOT / "asyncsink").glob("*.py"))
    assert len(modules) <= MOST_ROOT_MODULES, modules


def test_no_module_outside_the_writer_package_imports_its_private_modules() -> None:
    """``asyncsink.writer._*`` belong to the writer; the library, the examples and the
    benchmarks go through ``asyncsink.writer`` (the writer's own unit tests may not)."""
    writer = ROOT / "asyncsink" / "writer"
    files = [*library_modules(), *(ROOT / "examples").rglob("*.py")]
    files += (ROOT / "benchmarks").rglob("*.py")
    reaching = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in files
        if writer not in path.parents
        for line, name in imported_modules(path)
        if name.startswith("asyncsink.writer._")
    ]
    assert reaching == []


def test_the_spark_layer_imports_no_sink() -> None:
    """Dependencies point down: the sinks register themselves in the registry the Spark
    layer reads (``asyncsink.plugins.sinks``)."""
    upward = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "asyncsink" / "spark").rglob("*.py"))
        for line, name in imported_modules(path)
        if name == "asyncsink.sinks"
        or name.startswith("asyncsink.sinks.")
        or name.split(".")[0] == "sinks"
    ]
    assert upward == []


def test_the_spark_layer_uses_no_private_part_of_pyspark() -> None:
    assert {"pyspark", "py4j"} <= VENDORS
    spark = sorted((ROOT / "asyncsink" / "spark").rglob("*.py"))
    found = [f"{path.relative_to(ROOT)}:{where}" for path in spark
             for where in violations(path.read_text())]  # fmt: skip
    assert found == []
    assert violations("def f(sc):\n    return sc._python_includes\n")


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
