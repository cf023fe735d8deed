"""The sample hospital (sample_data/) as the accuracy benchmarks use it: its policy with the
analyst's budget raised (a benchmark runs hundreds of queries at the policy's own per-query
epsilon, far past the 10 a real analyst has; nothing else changes), a dpsql cursor on it, and
the raw tables in plain DuckDB under the policy's table names, where the exact answers come from.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

import dpsql
from dpsql.config import Policy, load_policy

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
USER = "alice"


def write_policy(directory: Path) -> Path:
    """The sample policy with sources made absolute and alice's budget raised, in `directory`."""
    text = (SAMPLE / "dpsql.toml").read_text().replace('source = "', f'source = "{SAMPLE}/')
    path = directory / "sample.toml"
    path.write_text(text.replace("epsilon = 10.0", "epsilon = 1000000.0"))
    return path


def cursor(directory: Path, cache: bool = False):
    """A dpsql cursor on the sample as alice in `directory` (made if need be), by default with the
    answer cache off so that every run draws fresh noise (and every auto-bounded query profiles
    afresh)."""
    directory.mkdir(parents=True, exist_ok=True)
    cur = dpsql.connect(write_policy(directory), user=USER, ledger=directory / "ledger.sqlite").cursor()
    if not cache:
        cur.execute("SET dpsql.cache = off")
    return cur


def policy() -> Policy:
    return load_policy(SAMPLE / "dpsql.toml")


def setup_statements(p: Policy | None = None) -> list[str]:
    """CREATE TABLE statements that load every table of the policy from its raw file into DuckDB:
    the truth, and the data the peers run on, are the very rows dpsql reads."""
    p = p or policy()
    out = []
    for name, table in p.tables.items():
        path = Path(SAMPLE, table.source)
        reader = f"read_csv('{path}')" if path.suffix == ".csv" else f"read_parquet('{path}')"
        out.append(f"CREATE TABLE {name} AS SELECT * FROM {reader}")
    return out


def truth_connection() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for statement in setup_statements():
        con.execute(statement)
    return con
