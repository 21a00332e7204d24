"""The code passes the checks the project holds itself to: ruff's lint rules and format,
and mypy on the package (``asyncsink`` and ``sinks``, which installs as ``asyncsink.sinks``),
with the settings in ``pyproject.toml``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = {
    "ruff-lint": ["ruff", "check", "."],
    "ruff-format": ["ruff", "format", "--check", "."],
    "mypy": ["mypy", "asyncsink", "sinks"],
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_code_passes(name: str) -> None:
    tool, *arguments = CHECKS[name]
    executable = Path(sys.executable).parent / tool
    assert executable.exists(), f"{tool} is not installed next to {sys.executable}"
    done = subprocess.run(
        [str(executable), *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(CHECKS[name])}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    )
