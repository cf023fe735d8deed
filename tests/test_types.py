"""The type check pyproject.toml configures ([tool.mypy]: the privacy and accounting modules)
passes: a None where a number is needed, or a strategy without the method the guard calls, is
found before it runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow  # mypy's first run reads the imported packages' types: about 10 s


def test_the_configured_type_check_passes():
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0 and "Success" in run.stdout, run.stdout + run.stderr
