"""The benchmark's quick mode runs end to end and writes its tables (a smoke test, not a timing:
the figures themselves are in benchmarks/RESULTS.md, from the full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_writes_every_table(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), "--work", str(ROOT / ".bench")],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for heading in ("## Latency at 100,000 rows", "## Accuracy at 100,000 rows", "## Budget:", "## Scale:",
                    "## Throughput of dpsql serve"):
        assert heading in text, heading
    results = json.loads(out.with_suffix(".json").read_text())
    assert "dpsql" not in {s for errors in results["errors"].values() for s in errors}  # dpsql answers every query
    assert {"smartnoise", "qrlew"} <= {s for per_query in results["accuracy"].values() for s in per_query}
    assert all(r < 0.5 for q in results["accuracy"].values() for s, r in q.items() if s == "dpsql")
    assert (tmp_path / "latency_vs_rows.png").stat().st_size > 1000


@pytest.mark.parametrize("shapes", [[], ["--shapes"]])
def test_new_query_benchmark_runs_every_shape(tmp_path, shapes):
    from benchmarks.new_query import SHAPES
    out = tmp_path / "new_query.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.new_query", "--rows", "4000", "--texts", "4", "--rounds", "2",
                           "--out", str(out)] + shapes, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line[:26].strip(): line[26:].split() for line in proc.stdout.splitlines()}
    for name in SHAPES:
        total, engine, ledger, noise, python, cpu, *_ = map(float, rows[name])
        assert 0 < engine < total and 0 < ledger < total and 0 <= noise < total and python > 0, (name, rows[name])
    assert rows["undeclared keys"][3] != "0.00"  # partition selection draws noise for every group
    assert "worst python per new text" in proc.stdout and "worst python per new text" in out.read_text()
