"""Analysts' commands: query, explain, plan (a PLD-planned batch) and release (randomized response)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..config import exact
from ..errors import Error
from ..pld_report import pld_report
from ..session import explain_lines
from ..sql.classify import Explain, Query, classify, split_statements
from .common import (
    _delta,
    _epsilon,
    _fail,
    _json_result,
    _ledger,
    _policy,
    _session,
    _user,
    render_table,
)
from .group import main


@main.command()
@_policy
@_user
@_ledger
@_epsilon
@_delta
@click.option("--json", "as_json", is_flag=True, help="Print rows, cost, remaining budget and intervals as JSON.")
@click.argument("sql")
def query(
    policy: str, user: str, ledger: str | None, epsilon: float | None, delta: float | None, as_json: bool, sql: str
) -> None:
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
    dp = result.dp
    if dp is not None and dp.confidence is not None and dp.cost is not None and dp.remaining is not None:
        pct = f"{dp.confidence * 100:g}%"
        origin = "from the cache, free" if dp.cached else f"cost epsilon={dp.cost.epsilon:g} delta={dp.cost.delta:g}"
        click.echo(
            f"{origin}; remaining epsilon={dp.remaining.epsilon:g} delta={dp.remaining.delta:g}; "
            f"± columns are {pct} intervals for the noise",
            err=True,
        )


@main.command()
@_policy
@_user
@_ledger
@_epsilon
@_delta
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option(
    "--target-error",
    type=float,
    default=None,
    help="Pick the smallest epsilon giving COUNT and SUM this 95% error (dpsql.target_error).",
)
@click.argument("sql")
def explain(
    policy: str,
    user: str,
    ledger: str | None,
    epsilon: float | None,
    delta: float | None,
    as_json: bool,
    target_error: float | None,
    sql: str,
) -> None:
    """Show the rewritten query, sensitivities, noise scales, expected error and cost. Charges nothing."""
    try:
        session = _session(policy, user, ledger, epsilon, delta)
        if target_error is not None:
            session.execute(f"SET dpsql.target_error = {target_error!r}")
        stmt = classify(sql, session.policy.limits)
        if isinstance(stmt, Explain):
            stmt = stmt.query
        if not isinstance(stmt, Query):
            raise Error("dpsql explain takes a SELECT query", sqlstate="0A000")
        info = session.explain_plan(stmt.tree, stmt.options)
    except Error as e:
        _fail(e)
        return
    click.echo(json.dumps(info, indent=2, default=str) if as_json else "\n".join(explain_lines(info)))


@main.command()
@_policy
@_user
@_ledger
@click.option("--epsilon", type=float, required=True, help="The whole batch's epsilon.")
@click.option("--delta", type=float, required=True, help="The whole batch's delta (at least 1e-12).")
@click.option("--run", is_flag=True, help="Answer the batch now, charging (epsilon, delta) once.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.argument("file", type=click.File("r"))
def plan(
    policy: str, user: str, ledger: str | None, epsilon: float, delta: float, run: bool, as_json: bool, file
) -> None:
    """Calibrate the queries of FILE (separated by ;) jointly with PLD accounting, beside what
    charging them one by one under USER's filter would give."""
    try:
        session = _session(policy, user, ledger)
        sqls = split_statements(file.read(), session.policy.limits)
        report = pld_report(session, sqls, exact(epsilon), exact(delta))
        results = session.execute_batch(sqls, epsilon, delta) if run else None
    except Error as e:
        _fail(e)
        return
    if as_json:
        out = dict(report)
        if results is not None:
            out["results"] = [json.loads(_json_result(r)) for r in results]
        click.echo(json.dumps(out, indent=2, default=str))
        return
    pct = f"{report['confidence'] * 100:g}%"
    click.echo(
        f"{len(sqls)} queries, batch (epsilon={epsilon:g}, delta={delta:g}), PLD noise multiplier "
        f"{report['noise_multiplier']:.6g}; one by one under the {report['filter']} filter each query "
        f"would get epsilon={report['separate_epsilon']:.6g}"
    )
    for i, q in enumerate(report["queries"], 1):
        click.echo(f"[{i}] {' '.join(q['sql'].split())}")
        for m in q["measures"]:
            click.echo(
                f"    {m['measure']}: {pct} error ±{m['pld_half_width']:.6g} planned, "
                f"±{m['separate_half_width']:.6g} one by one"
            )
    click.echo(f"noise saving: planned scales are {report['saving']:.3f} of the one-by-one scales (geometric mean)")
    if results is not None:
        for sql, r in zip(sqls, results):
            click.echo(f"\n{' '.join(sql.split())}\n{render_table(r)}")


@main.command("release")
@_policy
@_user
@_ledger
@click.argument("table")
@click.argument("columns", nargs=-1, required=True)
@click.option("--epsilon", type=float, required=True, help="What the release is charged (the size takes a tenth).")
@click.option("--epsilon-size", type=float, default=None, help="The part of epsilon for the noisy number of rows.")
@click.option(
    "--method",
    type=click.Choice(["auto", "krr", "oue"]),
    default="auto",
    help="k-ary randomized response, optimized unary encoding, or whichever has the smaller variance.",
)
@click.option(
    "--no-null-category",
    is_flag=True,
    help="A value outside the declared keys becomes a random declared one instead of its own category.",
)
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="The released rows (.parquet or .csv).")
@click.option(
    "--register",
    "name",
    default=None,
    help="Add the rows (as NAME) and their estimates (NAME_estimates) to the policy as public tables.",
)
@click.option("--confidence", type=float, default=0.95, help="Of the estimates' intervals.")
def release_command(
    policy: str,
    user: str,
    ledger: str | None,
    table: str,
    columns: tuple[str, ...],
    epsilon: float,
    epsilon_size: float | None,
    method: str,
    no_null_category: bool,
    out: str,
    name: str | None,
    confidence: float,
) -> None:
    """Release one randomized row per person of TABLE over COLUMNS (declared keys), charged to
    USER's budget, with debiased frequency estimates beside it."""
    from .. import local_files

    try:
        path = Path(out).resolve()
        local_files.check_target(path)  # before the charge
        local_files.check_target(local_files.estimates_path(path))
        if name:
            local_files.check_register(Path(policy), [name, f"{name}_estimates"])
        session = _session(policy, user, ledger, None, None)
        click.echo(f"randomizing {table} ({', '.join(columns)}) at epsilon={epsilon:g}...", err=True)
        rel = session.randomized_response(table, columns, epsilon, method, epsilon_size, not no_null_category)
        schema = session.engine.schema().get(rel.spec.table, {})
        types = (
            [schema.get(c, "VARCHAR") for c in rel.spec.columns]
            if rel.spec.method == "krr"
            else ["BOOLEAN"] * rel.spec.k
        )
        local_files.write_table(path, rel.column_names(), types, rel.records())
        est = rel.estimates(confidence)
        names = list(rel.spec.columns) + ["estimate", "ci_low", "ci_high", "observed"]
        est_types = [schema.get(c, "VARCHAR") for c in rel.spec.columns] + ["DOUBLE"] * 3 + ["BIGINT"]
        local_files.write_table(
            local_files.estimates_path(path), names, est_types, [[e[n] for n in names] for e in est]
        )
        if name:
            local_files.register(Path(policy), {name: path, f"{name}_estimates": local_files.estimates_path(path)})
    except Error as e:
        _fail(e)
        return
    p, q = rel.spec.p_q
    click.echo(
        f"released {len(rel.rows)} rows to {path} ({rel.spec.method}, epsilon {float(rel.spec.epsilon_rr):g} for "
        f"the rows and {float(rel.spec.epsilon_size):g} for their number; p={p:.6g}, q={q:.6g}); remaining "
        f"epsilon={rel.remaining['epsilon']:g}"
    )
    click.echo(f"estimates: {local_files.estimates_path(path)}")
    if name:
        click.echo(
            f"registered as public tables {name} and {name}_estimates in {policy}; restart dpsql serve to serve them"
        )
