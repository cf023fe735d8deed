"""The tools analysts bring, for real, against a running `dpsql serve`: ibis, jupysql, harlequin,
dbt, sqlacodegen, and node's pg and postgres.js. Each is installed on first use (pinned, in an
environment of its own: tests/tool_envs.py) and drives the server as its users would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from .server_fixture import PASSWORD
from .tool_envs import SCRIPTS, node_tool, python_tool

pytestmark = [
    pytest.mark.clients,
    pytest.mark.slow,
]  # ibis, jupysql, harlequin, dbt, node clients in their own environments


def _run(cmd: list[str], serve, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "DPSQL_PORT": str(serve.port), "DPSQL_PASSWORD": PASSWORD, "NO_COLOR": "1"}
    return subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))


def test_ibis(serve):
    python = python_tool("ibis")
    out = _json(_run([python, SCRIPTS / "ibis_check.py"], serve))
    assert {"people", "events", "places"} <= set(out["tables"])
    assert out["grouped"] == 2 and out["filtered"] == 2 and out["sql"] == 2 and out["arrow"] == 2
    assert 0 < out["mean_age"] < 100 and out["public"] == 3
    assert "private table" in out["rows"]


def test_jupysql(serve):
    python = python_tool("jupysql")
    out = _json(_run([python, SCRIPTS / "jupysql_check.py"], serve))
    assert out["grouped"] == 2
    assert all(t in out["tables"] for t in ("people", "events", "places"))
    assert "age" in out["columns"] and "dpsql" in out["columns"]  # the bounds, from the policy's comments


def test_harlequin(serve):
    python = python_tool("harlequin")
    out = _json(_run([python, SCRIPTS / "harlequin_check.py"], serve))
    assert {"people", "events", "places", "age", "city"} <= set(out["catalog"])
    assert {"avg", "count", "date_trunc", "least"} <= set(out["completions"])  # the functions queries may use
    assert out["rows"] == 2


def test_sqlacodegen(serve):
    python = python_tool("sqlacodegen")
    proc = _run(
        [
            python,
            "-m",
            "sqlacodegen",
            f"postgresql+psycopg2://alice:{PASSWORD}@127.0.0.1:{serve.port}/dpsql?sslmode=disable",
        ],
        serve,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for table in ("people", "events", "places"):
        assert f"'{table}'" in proc.stdout
    assert "Column('age'" in proc.stdout and "private table" in proc.stdout


def test_dbt(serve, tmp_path):
    """dbt with its default query comment: debug and show answer, a model reads its source by
    dbt's three-part names, and run is refused with dpsql's reason (views live in sessions)."""
    python = python_tool("dbt")
    project = tmp_path / "dbt"
    shutil.copytree(SCRIPTS / "dbt", project)
    dbt = [python, "-m", "dbt.cli.main"]
    common = ["--profiles-dir", str(project), "--project-dir", str(project)]
    debug = _run([*dbt, "--no-use-colors", "debug", *common], serve, cwd=project)
    assert debug.returncode == 0 and "All checks passed" in debug.stdout, debug.stdout[-3000:]
    show = _run(
        [*dbt, "--no-use-colors", "show", "--inline", "select sex, count(*) as n from people group by sex", *common],
        serve,
        cwd=project,
    )
    assert show.returncode == 0 and "| sex" in show.stdout, show.stdout[-3000:]
    model = _run([*dbt, "--no-use-colors", "show", "-s", "people_by_sex", *common], serve, cwd=project)
    assert model.returncode == 0 and "| sex" in model.stdout, model.stdout[-3000:]
    run = _run([*dbt, "--no-use-colors", "run", *common], serve, cwd=project)
    assert run.returncode != 0 and "views live in your session" in run.stdout, run.stdout[-3000:]


@pytest.mark.skipif(shutil.which("npm") is None, reason="node and npm are not installed")
def test_node_pg_and_postgres_js(serve):
    folder = node_tool("node")
    script = folder / "node_check.mjs"
    shutil.copy(SCRIPTS / "node_check.mjs", script)
    out = _json(_run(["node", script], serve, cwd=folder))
    assert out["pg_grouped"] == 2 and out["pg_param"] == 1 and out["pg_budget"] is True
    assert out["pg_any"] == ["north", "south"]
    assert out["js_grouped"] == 2 and out["js_param"] == 1
    assert out["js_in"] == ["east", "north"] and out["js_any"] == ["south"]
    assert out["js_rows"] == "42501"
