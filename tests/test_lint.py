"""The code passes the linter the project has chosen (ruff, configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_ruff_finds_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "dpsql", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_package_compiles():
    out = subprocess.run([sys.executable, "-m", "compileall", "-q", "dpsql"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
