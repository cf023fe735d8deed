"""What the command groups share: a session with --epsilon/--delta, errors and warnings as the CLI
prints them, psql-style tables, and the common options."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from typing import Any

import click

from .. import owner_only
from ..config import exact, load_policy
from ..errors import Error, invalid_parameter
from ..ledger import Ledger
from ..session import Result, Session


def _session(
    policy: str, user: str, ledger: str | None, epsilon: float | None = None, delta: float | None = None
) -> Session:
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


def _warn_loose(ledger: Ledger) -> None:
    """A warning, with the chmod that fixes it, per ledger file others may use (created by an
    older dpsql, or copied): the ledger holds every analyst's login verifier, query and answer,
    and the identity file its key. Neither verify nor serve refuses for it: the operator decides."""
    for warning in owner_only.loose(ledger.private_files()):
        click.echo(f"WARNING: ledger file {warning}", err=True)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.1f}"
    return str(v)


def render_table(result: Result) -> str:
    """A psql-style table, with each noisy column's interval beside it."""
    ci = (result.dp.ci if result.dp is not None else None) or {}
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
    out = text_grid(headers, cells)
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(out)


def text_grid(headers: list[str], cells: list[list[str]]) -> list[str]:
    """psql's layout: headers over a rule, each column as wide as its widest cell, values right-aligned."""
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]
    out = [" | ".join(h.ljust(w) for h, w in zip(headers, widths)), "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return out


def _json_result(result: Result) -> str:
    return json.dumps(
        {
            "columns": result.names,
            "types": result.types,
            "rows": [list(r) for r in result.rows],
            "dp": None if result.dp is None else result.dp.as_dict(),
        },
        default=str,
        indent=2,
    )


_policy = click.option(
    "--policy",
    "-p",
    required=True,
    type=click.Path(dir_okay=False),
    envvar="DPSQL_POLICY",
    help="The policy file (TOML).",
)


_user = click.option("--user", "-U", required=True, envvar="DPSQL_USER", help="The analyst, as declared in the policy.")


_epsilon = click.option(
    "--epsilon", type=float, default=None, help="The query's epsilon (default: the policy's query_epsilon)."
)


_delta = click.option(
    "--delta", type=float, default=None, help="The query's delta (for Gaussian noise or partition selection)."
)


_ledger = click.option(
    "--ledger", type=click.Path(dir_okay=False), default=None, help="Ledger database (default: beside the policy file)."
)


def _positive_fraction(value: float, name: str) -> Fraction:
    try:
        v = exact(value)
    except ValueError:
        v = Fraction(0)
    if v <= 0:
        raise invalid_parameter(f"{name} must be a positive number")
    return v
