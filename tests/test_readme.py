"""The README states every key of the policy file (and its default), and its first-session
examples run on the sample as written."""

from __future__ import annotations

import re

from .conftest import ROOT


def _policy_keys() -> set[str]:
    """Every key the policy parser accepts, read from its own allow lists."""
    source = "\n".join(p.read_text() for p in sorted((ROOT / "dpsql" / "config").glob("*.py")))
    keys: set[str] = set()
    for block in re.findall(r"unknown_keys\(([^)]*)\)", source) + re.findall(
        r"allowed = (\{.*?\})\[kind\]", source, re.S
    ):
        keys |= set(re.findall(r'"([a-z_]+)"', block))
    names = re.search(r"names = \(([^)]*)\)", source).group(1)
    return keys | set(re.findall(r'"([a-z_]+)"', names))


def test_every_policy_key_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    missing = sorted(k for k in _policy_keys() if not re.search(rf"\b{k}\b", readme))
    assert len(_policy_keys()) > 40
    assert not missing, f"policy keys the README does not mention: {missing}"


def test_the_defaults_table_covers_every_section():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("**Defaults**") :]
    table = table[: table.index("\n\n", table.index("| key | default |"))]
    for section in (
        "[engine]",
        "[privacy] filter",
        "[privacy] epsilon",
        "delta_reserve",
        "query_epsilon",
        "query_delta",
        "mechanism",
        "max_groups",
        "max_contributions",
        "columns",
        "[users.X]",
        "[ledger] path",
        "[limits]",
    ):
        assert section in table, section


def test_the_workloads_table_is_what_the_filters_admit():
    """The README's admitted-query table, measured from the code (dpsql budget simulate)."""
    import json
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| filter | Laplace ε=0.01 |") :]
    rows = [line for line in table.split("\n\n")[0].splitlines()[2:]]
    stated = {r.split("|")[1].strip(" `"): [int(c) for c in r.split("|")[2:-1]] for r in rows}
    assert set(stated) == {"basic", "advanced", "whitehouse", "zcdp", "rdp", "gdp"}
    for i, (mechanism, eps) in enumerate(
        [("laplace", "0.01"), ("laplace", "0.1"), ("gaussian", "0.01"), ("gaussian", "0.1"), ("mixed", "0.01")]
    ):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "dpsql.cli",
                "budget",
                "simulate",
                "--epsilon",
                "1",
                "--delta",
                "1e-6",
                "--query-epsilon",
                eps,
                "--mechanism",
                mechanism,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        got = json.loads(out.stdout)["queries"]
        assert {f: stated[f][i] for f in stated} == got, (mechanism, eps)


def test_the_first_psql_session_runs_on_the_sample_as_written(sample_conn):
    """The statements of the README's psql session (Connecting), each as its comment says."""
    conn = sample_conn
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("dpsql=> SHOW dpsql.budget;") :].split("```")[0]
    statements = [line.split("dpsql=> ")[1].split(";")[0] for line in block.splitlines() if "dpsql=> " in line]
    assert len(statements) == 4
    cur = conn.cursor()
    cur.execute(statements[0])
    names = [d[0] for d in cur.description]
    budget = dict(zip(names, cur.fetchone()))
    assert budget["epsilon_total"] == budget["epsilon_remaining"] == 10
    cur.execute(statements[1])
    assert cur.fetchall()[0][0].startswith("cost: epsilon=0.1 delta=0")
    assert dict(zip(names, conn.cursor().execute("SHOW dpsql.budget").fetchone()))["epsilon_spent"] == 0
    cur.execute(statements[2])
    assert len(cur.fetchall()) == 3 and cur.dp.cost.epsilon == 0.1
    cur.execute(statements[3])
    assert [d[0] for d in cur.description] == ["sex", "n", "dp_interval_low", "dp_interval_high"]
    assert all(low < n < high for _, n, low, high in cur.fetchall())
