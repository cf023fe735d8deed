"""The `dpsql` command line: query, explain, budget (serve arrives with the wire protocol)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .config import load_policy
from .errors import Error
from .accounting.ledger import open_ledger
from .session import Result, Session, budget_summary, explain_lines
from .sql.classify import Query, classify


def _session(policy: str, user: str, ledger: str | None, epsilon: float | None = None,
             delta: float | None = None) -> Session:
    """A session with this command's --epsilon/--delta applied as session settings."""
    session = Session(load_policy(policy, ledger_path=ledger), user)
    if epsilon is not None:
        session.execute(f"SET dpsql.epsilon = {epsilon!r}")
    if delta is not None:
        session.execute(f"SET dpsql.delta = {delta!r}")
    return session


def _fail(e: Error) -> None:
    click.echo(f"ERROR [{e.sqlstate}]: {e.message}", err=True)
    if e.hint:
        click.echo(f"HINT: {e.hint}", err=True)
    sys.exit(1)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.1f}"
    return str(v)


def render_table(result: Result) -> str:
    """A psql-style table, with each noisy column's interval beside it."""
    ci = (result.dp or {}).get("ci", {})
    headers, cells = [], []
    for name in result.names:
        headers.append(name)
        if ci.get(name) is not None:
            headers.append(f"{name} ±")
    for i, row in enumerate(result.rows):
        line = []
        for name, v in zip(result.names, row):
            line.append(_fmt(v))
            intervals = ci.get(name)
            if intervals is not None:
                iv = intervals[i]
                line.append("" if iv is None else f"[{_fmt(iv[0])}, {_fmt(iv[1])}]")
        cells.append(line)
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]
    out = [" | ".join(h.ljust(w) for h, w in zip(headers, widths)),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(out)


def _json_result(result: Result) -> str:
    return json.dumps({"columns": result.names, "types": result.types, "rows": [list(r) for r in result.rows],
                       "dp": result.dp}, default=str, indent=2)


_policy = click.option("--policy", "-p", required=True, type=click.Path(dir_okay=False), envvar="DPSQL_POLICY",
                       help="The policy file (TOML).")
_user = click.option("--user", "-U", required=True, envvar="DPSQL_USER", help="The analyst, as declared in the policy.")
_epsilon = click.option("--epsilon", type=float, default=None,
                        help="The query's epsilon (default: the policy's query_epsilon).")
_delta = click.option("--delta", type=float, default=None,
                      help="The query's delta (for Gaussian noise or partition selection).")
_ledger = click.option("--ledger", type=click.Path(dir_okay=False), default=None,
                       help="Ledger database (default: beside the policy file).")


@click.group()
@click.version_option(package_name="dpsql")
def main() -> None:
    """dpsql: differentially private SQL over your own database."""


@main.command()
@_policy
@_user
@_ledger
@_epsilon
@_delta
@click.option("--json", "as_json", is_flag=True, help="Print rows, cost, remaining budget and intervals as JSON.")
@click.argument("sql")
def query(policy: str, user: str, ledger: str | None, epsilon: float | None, delta: float | None,
          as_json: bool, sql: str) -> None:
    """Answer one SQL query with differential privacy, charging USER's budget."""
    try:
        session = _session(policy, user, ledger, epsilon, delta)
        result = session.execute(sql)
    except Error as e:
        _fail(e)
        return
    if as_json:
        click.echo(_json_result(result))
        return
    if result.names:
        click.echo(render_table(result))
    else:
        click.echo(result.status)
    if result.dp and "confidence" in result.dp:
        dp = result.dp
        pct = f"{dp['confidence'] * 100:g}%"
        origin = "from the cache, free" if dp.get("cached") else f"cost epsilon={dp['cost']['epsilon']:g} delta={dp['cost']['delta']:g}"
        click.echo(f"{origin}; remaining epsilon={dp['remaining']['epsilon']:g} delta={dp['remaining']['delta']:g}; "
                   f"± columns are {pct} intervals for the noise", err=True)


@main.command()
@_policy
@_user
@_ledger
@_epsilon
@_delta
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.argument("sql")
def explain(policy: str, user: str, ledger: str | None, epsilon: float | None, delta: float | None,
            as_json: bool, sql: str) -> None:
    """Show the rewritten query, sensitivities, noise scales, expected error and cost. Charges nothing."""
    try:
        session = _session(policy, user, ledger, epsilon, delta)
        stmt = classify(sql)
        if not isinstance(stmt, Query):
            raise Error("dpsql explain takes a SELECT query", sqlstate="0A000")
        info = session.explain_plan(stmt.tree)
    except Error as e:
        _fail(e)
        return
    click.echo(json.dumps(info, indent=2, default=str) if as_json else "\n".join(explain_lines(info)))


@main.group()
def budget() -> None:
    """Inspect analysts' privacy budgets."""


@budget.command("show")
@_policy
@_ledger
@click.argument("user", required=False)
@click.option("--json", "as_json", is_flag=True)
def budget_show(policy: str, ledger: str | None, user: str | None, as_json: bool) -> None:
    """Spent and remaining budget of USER (or of every analyst in the policy)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        led = open_ledger(pol.ledger_path, pol.ledger_url)
        rows = [budget_summary(pol, led, name) for name in ([user] if user else list(pol.users))]
    except Error as e:
        _fail(e)
        return
    if as_json:
        click.echo(json.dumps(rows, default=lambda x: float(x), indent=2))
        return
    for b in rows:
        click.echo(f"{b['user']}: {b['filter']} filter, epsilon {float(b['epsilon']['spent']):g} of "
                   f"{float(b['epsilon']['total']):g} spent ({float(b['epsilon']['remaining']):g} left), delta "
                   f"{float(b['delta']['spent']):g} of {float(b['delta']['total']):g}, {b['queries']} queries")


if __name__ == "__main__":
    main()
