"""Run cells on a real IPython kernel, as a notebook (Jupyter, Databricks, EMR Studio) runs
them: each cell inside the kernel's running asyncio loop.

``run_notebook`` builds a notebook with nbformat and executes it with nbclient on the
``python3`` kernel of this virtual environment. ``Kernel`` drives one kernel cell by cell,
for the tests that must act while a cell runs (an interrupt).
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")  # no migration warning from jupyter_core


def session_cell(remote: str | None) -> str:
    """The first cell: a Spark session (classic ``local[2,3]``, or Spark Connect at
    ``remote``), with the repository's tests and examples importable."""
    builder = (
        f"SparkSession.builder.remote({remote!r})"
        if remote
        else 'SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false")'
        '.config("spark.ui.showConsoleProgress", "false")'
    )
    return f"""
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "examples")!r}]
        from pyspark.sql import SparkSession
        spark = {builder}.getOrCreate()
        from asyncsink.spark import register_data_sources
        register_data_sources(spark)
    """


def run_notebook(cells: list[str], workdir: Path, timeout_s: int = 600) -> Any:
    """Execute ``cells`` (dedented) as a notebook in ``workdir``; return the executed
    notebook, whose cells hold their outputs and errors."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(textwrap.dedent(cell).strip()) for cell in cells]
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=timeout_s,
        allow_errors=True,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return notebook


def errors(notebook: Any) -> list[str]:
    """Each failed cell: its number, its error and its first lines."""
    failed = []
    for number, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                failed.append(
                    f"cell {number} ({cell.source.splitlines()[0][:80]}): "
                    f"{output.ename}: {output.evalue}\n" + "\n".join(output.traceback)[-3000:]
                )
    return failed


def text_of(cell: Any) -> str:
    """What a cell printed and displayed, as text (HTML included)."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.extend(str(value) for value in output.data.values())
    return "".join(parts)


class Kernel:
    """One kernel, driven a cell at a time."""

    def __init__(self, workdir: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(workdir))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def start(self, code: str) -> str:
        """Start running ``code`` as a cell; return its message id."""
        return str(self.client.execute(textwrap.dedent(code).strip()))

    def outcome(self, msg_id: str, timeout_s: float = 300) -> tuple[str | None, str]:
        """Wait for the cell ``msg_id`` to end: its error's name (``None`` without one) and
        its text output."""
        deadline = time.monotonic() + timeout_s
        error, text = None, []
        for message in self._messages(msg_id, deadline):
            kind, content = message["msg_type"], message["content"]
            if kind == "error":
                error = content["ename"]
                text.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "stream":
                text.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                text.append(str(content["data"].get("text/plain", "")))
        return error, "".join(text)

    def run(self, code: str, timeout_s: float = 300) -> str:
        """Run ``code`` as a cell; its text output. A cell that fails fails the test."""
        error, text = self.outcome(self.start(code), timeout_s)
        assert error is None, text
        return text

    def _messages(self, msg_id: str, deadline: float) -> Iterator[dict[str, Any]]:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "the cell did not end in time"
            message = self.client.get_iopub_msg(timeout=left)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "status":
                if message["content"]["execution_state"] == "idle":
                    return
                continue
            yield message

    def interrupt(self) -> None:
        self.manager.interrupt_kernel()

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
