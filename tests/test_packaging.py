"""The package installs under its own name only, so a user's ``sinks.py`` shadows nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

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


@pytest.fixture(scope="session")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The file names in a wheel built from this tree (without build isolation: the dev
    extra brings setuptools)."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"  # setuptools builds inside the tree it is given
    skip = shutil.ignore_patterns(".git", ".venv", "node_modules", "build", "*.egg-info")
    shutil.copytree(ROOT, source, symlinks=True, ignore=skip)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = out.glob("asyncsink-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def _packages_on_disk() -> set[str]:
    """Every package folder of the source tree, by the name it installs under."""
    found = set()
    for top, prefix in ((ROOT / "asyncsink", "asyncsink"), (ROOT / "sinks", "asyncsink.sinks")):
        for init in top.rglob("__init__.py"):
            parts = init.parent.relative_to(top).parts
            found.add(".".join((prefix, *parts)))
    return found


@pytest.mark.timeout(300)
def test_the_wheel_holds_only_the_asyncsink_package(wheel_names: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_names}
    (info,) = {top for top in tops if top.endswith(".dist-info")}
    assert tops == {"asyncsink", info}
    assert not any(name.startswith("asyncsink/testing/") is False and "tests/" in name
                   for name in wheel_names)  # fmt: skip


@pytest.mark.timeout(300)
def test_the_sinks_install_as_asyncsink_sinks_from_the_top_level_folder(
    wheel_names: list[str],
) -> None:
    assert not (ROOT / "asyncsink" / "sinks").exists(), "asyncsink/sinks must not exist"
    assert not (ROOT / "asyncsink" / "sinks").is_symlink(), "asyncsink/sinks is a symlink"
    for name in ("http/writer.py", "web/transport.py", "kinesis/writer.py", "registry.py"):
        assert f"asyncsink/sinks/{name}" in wheel_names
    assert "asyncsink/py.typed" in wheel_names and "asyncsink/sinks/py.typed" in wheel_names
    packages = {name.rsplit("/", 1)[0].replace("/", ".") for name in wheel_names
                if name.endswith("/__init__.py")}  # fmt: skip
    assert packages == _packages_on_disk(), "pyproject.toml's packages list misses a folder"


@pytest.mark.timeout(300)
def test_the_wheel_holds_the_fault_server_but_no_emulator(wheel_names: list[str]) -> None:
    """The demo needs the fault-injecting endpoint; nothing in production needs an emulator
    of a third-party system, so the Elasticsearch one stays in tests/servers."""
    assert "asyncsink/testing/fault_server.py" in wheel_names
    emulators = [
        name
        for name in wheel_names
        if PurePosixPath(name).name.startswith("es_")
        or ("elasticsearch" in name and not name.startswith("asyncsink/sinks/elasticsearch/"))
        or name.startswith("tests/")
    ]
    assert emulators == []


def test_an_editable_install_imports_the_sinks_from_the_top_level_folder() -> None:
    import asyncsink.sinks.http

    assert Path(asyncsink.sinks.http.__file__).resolve() == ROOT / "sinks" / "http" / "__init__.py"
