"""The package installs under its own name only, so a user's ``sinks.py`` shadows nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USE_A_SINK = """
import anyio, httpx
from asyncsink.spark import SinkSpec, foreach_batch
from asyncsink.sinks import sink_factory

seen = []
def answer(request):
    seen.append(request.content)
    return httpx.Response(200, json={})

async def main():
    writer = sink_factory("http")({"url": "http://example.test/in"},
                                  transport=httpx.MockTransport(answer))
    async with writer:
        await writer.write_all([{"id": i} for i in range(10)])
    assert writer.statistics().delivered == 10 and len(seen) == 1, writer.statistics()

foreach_batch("http", {"url": "http://example.test/in"})
SinkSpec("kinesis", {"streamName": "s", "region": "us-east-1"})
anyio.run(main)
print("ok")
"""


def test_a_users_own_sinks_module_does_not_shadow_the_built_in_sinks(tmp_path: Path) -> None:
    (tmp_path / "sinks.py").write_text("raise ImportError('the user module was imported')\n")
    (tmp_path / "sinks").mkdir()
    (tmp_path / "sinks" / "__init__.py").write_text("SINKS = None\n")
    done = subprocess.run(
        [sys.executable, "-c", USE_A_SINK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.timeout(300)
def test_the_wheel_holds_only_the_asyncsink_package(tmp_path: Path) -> None:
    source = tmp_path / "source"  # setuptools builds inside the tree it is given
    skip = shutil.ignore_patterns(".git", ".venv", "node_modules", "build", "*.egg-info")
    shutil.copytree(ROOT, source, symlinks=True, ignore=skip)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("asyncsink-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"asyncsink", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "asyncsink/sinks/http/writer.py" in names
    assert "asyncsink/sinks/registry.py" in names and "asyncsink/sinks/py.typed" in names
    assert not any(
        name.startswith("asyncsink/testing/") is False and "tests/" in name for name in names
    )
