"""Analysts' real tools for end-to-end tests, each in an environment of its own (their pinned
dependencies would clash with dpsql's and with each other's), installed on first use from the
package registries into a cache that later runs reuse. The tools are declared once (PYTHON_TOOLS,
NODE_TOOLS); a whole run builds the missing ones in the background from its start (`prefetch`),
so that a fresh machine's installs overlap the tests instead of blocking a worker each."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from benchmarks.shared import virtual_env

CACHE = Path(os.environ.get("DPSQL_TOOLS_CACHE", Path.home() / ".cache" / "dpsql-test-tools"))
SCRIPTS = Path(__file__).resolve().parent / "tools"


def _pinned(name: str) -> list[str]:
    """A tool's pinned requirements file, tests/tools/NAME/requirements.txt."""
    lines = (SCRIPTS / name / "requirements.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


PSYCOPG = ["psycopg[binary]==3.3.9"]
PYTHON_TOOLS: dict[str, list[str]] = {  # the largest first: prefetch builds them in this order
    "superset": _pinned("superset"),
    "pgadmin": _pinned("pgadmin"),
    # sqlglot 30 makes ibis 12 write a nameless DROP VIEW, which PostgreSQL refuses as well
    "ibis": ["ibis-framework[postgres]==12.0.0", "packaging", "sqlglot>=28,<30", *PSYCOPG],
    "harlequin": ["harlequin==2.17.0", "harlequin-postgres==1.5.2", *PSYCOPG],
    "jupysql": ["jupysql==0.11.1", "psycopg2-binary==2.9.13", "ipython>=8"],
    "dbt": ["dbt-core==1.11.16", "dbt-postgres==1.11.0"],
    "duckdb-postgres": ["duckdb==1.5.5", "duckdb-extension-postgres-scanner==1.5.5"],
    "sqlacodegen": ["sqlacodegen==4.0.4", "psycopg2-binary==2.9.13"],
}
NODE_TOOLS: dict[str, list[str]] = {"node": ["pg@8.23.1", "postgres@3.4.9"]}


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


def python_tool(name: str) -> Path:
    """The Python interpreter of the tool's virtual environment, holding exactly its
    requirements (PYTHON_TOOLS), built by `benchmarks.shared.virtual_env` (uv, or pip: a fresh
    machine, as CI's, installs Superset's 153 pinned packages in about half a minute with uv
    against four minutes with pip)."""
    requirements = PYTHON_TOOLS[name]
    return _cached(name, requirements, lambda env: virtual_env(env, requirements)) / "bin" / "python"


def node_tool(name: str) -> Path:
    """A folder whose node_modules holds exactly the tool's packages (NODE_TOOLS, from the npm
    registry)."""
    packages = NODE_TOOLS[name]

    def build(folder: Path) -> None:
        folder.mkdir(parents=True)
        (folder / "package.json").write_text('{"name": "dpsql-tool-tests", "private": true}\n')
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", *packages], cwd=folder, check=True, timeout=600
        )

    return _cached(name, packages, build)


def prefetch(stop: threading.Event) -> threading.Thread:
    """A thread building every tool's environment that is missing, one at a time, until done or
    `stop` is set (then after the build under way): a test asking for a tool waits on its lock
    rather than building it again."""

    def run() -> None:
        builders = [(python_tool, n) for n in PYTHON_TOOLS]
        if shutil.which("npm") is not None:
            builders += [(node_tool, n) for n in NODE_TOOLS]
        for build, name in builders:
            if stop.is_set():
                return
            try:
                build(name)
            except Exception:  # the test that needs it builds it again and reports why it fails
                pass

    thread = threading.Thread(target=run, name="tool-prefetch", daemon=True)
    thread.start()
    return thread
