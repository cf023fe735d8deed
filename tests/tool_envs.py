"""Analysts' real tools for end-to-end tests, each in an environment of its own (their pinned
dependencies would clash with dpsql's and with each other's), installed on first use from the
package registries into a cache that later runs reuse."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

CACHE = Path(os.environ.get("DPSQL_TOOLS_CACHE", Path.home() / ".cache" / "dpsql-test-tools"))
SCRIPTS = Path(__file__).resolve().parent / "tools"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One installer per tool at a time (pytest-xdist workers may ask together)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _cached(name: str, wanted: list[str], build: Callable[[Path], None]) -> Path:
    """The cache's folder `name`, built by `build` unless it already holds exactly `wanted`."""
    folder, text = CACHE / name, "\n".join(wanted)
    marker = folder / "dpsql-installed.txt"
    with _locked(name):
        if not (marker.exists() and marker.read_text() == text):
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            marker.write_text(text)
    return folder


def python_tool(name: str, requirements: list[str]) -> Path:
    """The Python interpreter of a virtual environment holding exactly `requirements`."""

    def build(env: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
        subprocess.run(
            [str(env / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *requirements],
            check=True,
            timeout=1200,
        )

    return _cached(name, requirements, build) / "bin" / "python"


def node_tool(name: str, packages: list[str]) -> Path:
    """A folder whose node_modules holds exactly `packages` (from the npm registry)."""

    def build(folder: Path) -> None:
        folder.mkdir(parents=True)
        (folder / "package.json").write_text('{"name": "dpsql-tool-tests", "private": true}\n')
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", *packages], cwd=folder, check=True, timeout=600
        )

    return _cached(name, packages, build)
