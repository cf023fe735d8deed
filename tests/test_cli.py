"""The command line as a new user meets it, on the sample data."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import SAMPLE


def dpsql(*args, ledger):
    """Run `dpsql COMMAND... --policy sample --ledger L ARGS...` (commands are the leading lowercase words)."""
    n = 2 if args[0] == "budget" else 1
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            *args[:n],
            "--policy",
            str(SAMPLE / "dpsql.toml"),
            "--ledger",
            str(ledger),
            *args[n:],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_query_prints_a_table_with_intervals(tmp_path):
    out = dpsql(
        "query",
        "--user",
        "alice",
        "SELECT sex, COUNT(*), AVG(age) FROM patients GROUP BY sex",
        ledger=tmp_path / "l.sqlite",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split(" | ")[:3] == ["sex", "count", "count ±"] or "count ±" in lines[0]
    assert "avg ±" in lines[0] and "(3 rows)" in out.stdout
    assert "remaining epsilon=9.9" in out.stderr


def test_query_json(tmp_path):
    out = dpsql(
        "query",
        "--user",
        "bob",
        "--json",
        "SELECT region, COUNT(*) FROM patients GROUP BY region",
        ledger=tmp_path / "l.sqlite",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["columns"] == ["region", "count"] and len(data["rows"]) == 10
    assert data["dp"]["cost"]["epsilon"] == 0.1 and len(data["dp"]["ci"]["count"]) == 10


def test_explain_and_budget(tmp_path):
    out = dpsql(
        "explain", "--user", "alice", "SELECT ward, AVG(cost) FROM visits GROUP BY ward", ledger=tmp_path / "l.sqlite"
    )
    assert out.returncode == 0 and "rewritten query:" in out.stdout
    assert "SUM(" in out.stdout.split("rewritten query:")[1]  # the bounded query, its totals per group
    out = dpsql("budget", "show", ledger=tmp_path / "l.sqlite")
    assert "alice: basic filter, epsilon 0 of 10 spent" in out.stdout
    out = dpsql(
        "explain",
        "--user",
        "alice",
        "--target-error",
        "100",
        "EXPLAIN /* dpsql: weights 2, 1 */ SELECT diagnosis, COUNT(*), AVG(cost) FROM visits GROUP BY 1",
        ledger=tmp_path / "l.sqlite",
    )
    assert out.returncode == 0, out.stderr
    # 2.4 meets the target at the policy's limits; under auto bounds (no profile released yet) the
    # release gets at least 70 % of the epsilon (90 %, less what a small population's profile may
    # take again), so 2.4 / 0.7 rounded up, COUNT(*) taking half of it.
    assert "dpsql.target_error" in out.stdout and "COUNT(*): epsilon 1.715," in out.stdout
    assert "cost: epsilon=3.43 " in out.stdout and "at the policy's limits, for the release's share" in out.stdout


def test_errors_are_one_line_and_no_traceback(tmp_path):
    out = dpsql("query", "--user", "alice", "SELECT * FROM patients", ledger=tmp_path / "l.sqlite")
    assert out.returncode == 1
    assert out.stderr.startswith("ERROR [42501]:") and "Traceback" not in out.stderr


def test_every_option_of_every_command_says_what_it_does():
    """`dpsql COMMAND --help` is what a new user reads: no option is listed without a line."""
    import click

    from dpsql.cli import main

    def bare(cmd: click.Command, path: str):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from bare(sub, f"{path} {name}")
        else:
            yield from (f"{path} {p.opts[0]}" for p in cmd.params if isinstance(p, click.Option) and not p.help)

    commands = list(main.commands)
    assert {"serve", "query", "explain", "budget", "users", "ledger", "policy"} <= set(commands)
    assert list(bare(main, "dpsql")) == []
