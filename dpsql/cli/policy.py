"""`dpsql policy check`: the policy against the schema; with --data, the data owner's report on its limits."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .. import policy_report
from ..config import Policy, SchemaMismatch, load_policy
from ..engines import Engine, open_engine
from ..errors import Error
from .common import (
    _fail,
    _fmt,
    _policy,
    text_grid,
)
from .group import main


@main.group("policy")
def policy_group() -> None:
    """Check the policy file against the data; with --data, the data owner's report on its limits."""


@policy_group.command("check")
@_policy
@click.option(
    "--data",
    is_flag=True,
    help="Also read the data: what each limit cuts per table and column, and limits that fit it. Exact, "
    "without noise: the data owner's view, never for analysts.",
)
@click.option(
    "--keep",
    type=click.FloatRange(0.5, 1, max_open=True),
    default=policy_report.KEEP,
    show_default=True,
    help="With --data: the share of rows (units, values) a suggested limit keeps.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the problems, or the report, as JSON.")
def policy_check(policy: str, data: bool, keep: float, as_json: bool) -> None:
    """Check the policy against the engine's schema: "ok", or every problem with its fix (exit 1).
    With --data, read the private tables and report what max_contributions, max_rows, max_groups
    and each column's bounds cut, with suggested limits and their noise cost."""
    pol, engine, problems = _policy_problems(policy)
    try:
        if problems:
            _print_problems(problems, as_json)
            sys.exit(1)
        if not data:
            private = sum(not t.public for t in pol.tables.values())
            click.echo(
                json.dumps({"ok": True, "problems": []})
                if as_json
                else f"ok: {pol.path}: {len(pol.tables)} tables ({private} private), {len(pol.users)} analysts, "
                f"checked against the {pol.engine.kind} engine's schema"
            )
            return
        try:
            rep = policy_report.report(
                engine, pol, keep, progress=lambda text: click.echo(f"policy check: {text}", err=True)
            )
        except Error as e:
            _fail(e)
            return
        click.echo(json.dumps(rep, indent=2, default=str) if as_json else "\n".join(report_lines(rep)))
    finally:
        if engine is not None:
            engine.close()


def _policy_problems(path: str) -> tuple[Policy | None, Engine | None, list[Error]]:
    """The policy and its engine, opened (which checks the policy against the schema), or every
    problem found on the way: the file's first mistake, or each mismatch with the schema."""
    try:
        pol = load_policy(path)
    except Error as e:
        return None, None, [e]
    try:
        return pol, open_engine(pol), []
    except SchemaMismatch as e:
        return pol, None, list(e.problems)
    except Error as e:
        return pol, None, [e]


def _print_problems(problems: list[Error], as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": False,
                    "problems": [{"message": p.message, "fix": p.hint, "sqlstate": p.sqlstate} for p in problems],
                },
                indent=2,
            )
        )
        return
    for p in problems:
        click.echo(f"PROBLEM: {p.message}", err=True)
        if p.hint:
            click.echo(f"  FIX: {p.hint}", err=True)
    click.echo(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in the policy", err=True)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.2%}"


def report_lines(rep: dict[str, Any]) -> list[str]:
    """The owner's report (policy_report.report) as text: per table, then the suggestions' rules."""
    out = [
        f"dpsql policy check --data: {rep['policy']} ({rep['engine']})",
        "The data owner's view: exact counts from the raw rows, without noise. Never show it to analysts;",
        "limits copied from it into the policy, which is public, disclose what they were computed from.",
        "",
    ]
    rules: dict[str, str] = {}
    for t in rep["tables"]:
        out += _table_lines(t, rep["keep"])
        out.append("")
        for s in t["suggestions"]:
            rules.setdefault(s["rule"], "bounds" if s["limit"].startswith("columns.") else s["limit"])
    out.append("Suggested limits:")
    out += [f"  {name}: {rule}" for rule, name in rules.items()]
    return out


def _table_lines(t: dict[str, Any], keep: float) -> list[str]:
    without = f" ({t['rows_without_unit']:,} rows without a unit, never counted)" if t["rows_without_unit"] else ""
    if t["privacy_unit"] == "row":
        out = [f"{t['table']}: {t['rows']:,} rows, each its own unit: no contribution limits apply"]
    else:
        per, total = t["rows_per_unit"], t["total_bound"]
        origin = "max_contributions" if total["declared"] else "max_groups × max_rows"
        out = [
            f"{t['table']}: {t['rows']:,} rows, {t['units']:,} units of {t['privacy_unit']}{without}",
            f"  rows per unit: p50 {per['p50']}, p90 {per['p90']}, p99 {per['p99']}, max {per['max']}",
            f"  total bound {total['limit']} ({origin}): cuts {_pct(total['rows_cut_share'])} of rows; "
            f"{_pct(total['units_over_share'])} of units, holding {_pct(total['rows_of_units_over_share'])} of "
            "rows, are over it",
        ]
        if t["keys"]:
            out.append("  per-group caps, grouping by each declared-key column:")
            out += ["    " + line for line in _keys_grid(t["keys"])]
    if t["columns"]:
        out.append("  bounded columns:")
        out += ["    " + line for line in _columns_grid(t["columns"])]
    if t["suggestions"]:
        out.append(f"  suggested limits (keeping {keep:.0%}):")
        out += ["    " + _suggestion_line(s) for s in t["suggestions"]]
    return out


def _keys_grid(keys: list[dict[str, Any]]) -> list[str]:
    headers = [
        "column",
        "domain",
        "outside domain",
        "rows/unit/key p99, max",
        "max_rows cuts",
        "keys/unit p99, max",
        "units over max_groups",
        "their rows",
    ]
    cells = [
        [
            k["column"],
            k["domain"],
            _pct(k["rows_outside_domain_share"]),
            f"{k['rows_per_unit_and_key']['p99']}, {k['rows_per_unit_and_key']['max']}",
            f"{_pct(k['max_rows']['rows_cut_share'])} (max_rows {k['max_rows']['limit']})",
            f"{k['keys_per_unit']['p99']}, {k['keys_per_unit']['max']}",
            f"{_pct(k['max_groups']['units_over_share'])} (max_groups {k['max_groups']['limit']})",
            _pct(k["max_groups"]["rows_of_units_over_share"]),
        ]
        for k in keys
    ]
    return text_grid(headers, cells)


def _columns_grid(columns: list[dict[str, Any]]) -> list[str]:
    headers = ["column", "bounds", "NULL", "below lower", "above upper", "sum clipped", "p1", "p50", "p99"]
    cells = [
        [
            c["column"],
            f"[{_fmt(c['lower'])}, {_fmt(c['upper'])}]",
            _pct(c["null_share"]),
            _pct(c["below_lower_share"]),
            _pct(c["above_upper_share"]),
            _pct(c["sum_clipped_share"]),
            _fmt(c["p1"]),
            _fmt(c["p50"]),
            _fmt(c["p99"]),
        ]
        for c in columns
    ]
    return text_grid(headers, cells)


def _suggestion_line(s: dict[str, Any]) -> str:
    """`max_rows 10 → 4 would cut 3.10% of rows (now 0.20%) and scale sum/count noise by 0.4`."""
    now, then = s["current"], s["suggested"]
    if s["cut_of"] == "values":
        now, then = (f"[{_fmt(v[0])}, {_fmt(v[1])}]" for v in (now, then))
        return (
            f"{s['limit']} {now} → {then} would clip {_pct(s['cut_suggested'])} of values and "
            f"{_pct(s['sum_clipped_suggested'])} of the sum (now {_pct(s['cut_now'])} and "
            f"{_pct(s['sum_clipped_now'])}) and scale SUM noise by {s['noise_ratio']:.3g}, "
            f"AVG noise by {s['avg_noise_ratio']:.3g}"
        )
    cut = "would leave" if s["cut_of"] == "units" else "would cut"
    over = " over it" if s["cut_of"] == "units" else ""
    if now == then:
        return f"{s['limit']} {now}: keep it ({_pct(s['cut_now'])} of {s['cut_of']}{over})"
    return (
        f"{s['limit']} {now} → {then} {cut} {_pct(s['cut_suggested'])} of {s['cut_of']}{over} "
        f"(now {_pct(s['cut_now'])}) and scale sum/count noise by {s['noise_ratio']:.3g}"
    )
