"""The code passes the linter the project has chosen (ruff, configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_ruff_finds_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_would_change_nothing():
    """Every Python file is as `ruff format` writes it (run it before committing)."""
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_package_compiles():
    out = subprocess.run([sys.executable, "-m", "compileall", "-q", "dpsql"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
