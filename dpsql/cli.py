"""The `dpsql` command line: query, explain, budget (serve arrives with the wire protocol)."""

from __future__ import annotations

import json
import math
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import click

from . import __version__, owner_only, policy_report
from .accounting.cost import Cost, Part, show
from .accounting.filters import FILTERS, make_filter, simulate
from .config import Policy, SchemaMismatch, default_reserve, exact, load_policy
from .engines import Engine, open_engine
from .errors import Error, invalid_parameter
from .ledger import Ledger, failure_of, failure_text, open_ledger
from .ledger.integrity import identity_file
from .mechanisms import rho_for
from .planning import plan_report
from .server.scram import make_verifier
from .session import Result, Session, budget_summary, explain_lines
from .sql.classify import Explain, Query, classify, split_statements


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
    out = text_grid(headers, cells)
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(out)


def text_grid(headers: list[str], cells: list[list[str]]) -> list[str]:
    """psql's layout: headers over a rule, each column as wide as its widest cell, values right-aligned."""
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]
    out = [" | ".join(h.ljust(w) for h, w in zip(headers, widths)),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return out


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
@click.option("--target-error", type=float, default=None,
              help="Pick the smallest epsilon giving COUNT and SUM this 95% error (dpsql.target_error).")
@click.argument("sql")
def explain(policy: str, user: str, ledger: str | None, epsilon: float | None, delta: float | None,
            as_json: bool, target_error: float | None, sql: str) -> None:
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


@main.command("release")
@_policy
@_user
@_ledger
@click.argument("table")
@click.argument("columns", nargs=-1, required=True)
@click.option("--epsilon", type=float, required=True, help="What the release is charged (the size takes a tenth).")
@click.option("--epsilon-size", type=float, default=None, help="The part of epsilon for the noisy number of rows.")
@click.option("--method", type=click.Choice(["auto", "krr", "oue"]), default="auto",
              help="k-ary randomized response, optimized unary encoding, or whichever has the smaller variance.")
@click.option("--no-null-category", is_flag=True,
              help="A value outside the declared keys becomes a random declared one instead of its own category.")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="The released rows (.parquet or .csv).")
@click.option("--register", "name", default=None,
              help="Add the rows (as NAME) and their estimates (NAME_estimates) to the policy as public tables.")
@click.option("--confidence", type=float, default=0.95, help="Of the estimates' intervals.")
def release_command(policy: str, user: str, ledger: str | None, table: str, columns: tuple[str, ...], epsilon: float,
                    epsilon_size: float | None, method: str, no_null_category: bool, out: str, name: str | None,
                    confidence: float) -> None:
    """Release one randomized row per person of TABLE over COLUMNS (declared keys), charged to
    USER's budget, with debiased frequency estimates beside it."""
    from . import local_files

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
        types = ([schema.get(c, "VARCHAR") for c in rel.spec.columns] if rel.spec.method == "krr"
                 else ["BOOLEAN"] * rel.spec.k)
        local_files.write_table(path, rel.column_names(), types, rel.records())
        est = rel.estimates(confidence)
        names = list(rel.spec.columns) + ["estimate", "ci_low", "ci_high", "observed"]
        est_types = [schema.get(c, "VARCHAR") for c in rel.spec.columns] + ["DOUBLE"] * 3 + ["BIGINT"]
        local_files.write_table(local_files.estimates_path(path), names, est_types, [[e[n] for n in names] for e in est])
        if name:
            local_files.register(Path(policy), {name: path, f"{name}_estimates": local_files.estimates_path(path)})
    except Error as e:
        _fail(e)
        return
    p, q = rel.spec.p_q
    click.echo(f"released {len(rel.rows)} rows to {path} ({rel.spec.method}, epsilon {float(rel.spec.epsilon_rr):g} for "
               f"the rows and {float(rel.spec.epsilon_size):g} for their number; p={p:.6g}, q={q:.6g}); remaining "
               f"epsilon={rel.remaining['epsilon']:g}")
    click.echo(f"estimates: {local_files.estimates_path(path)}")
    if name:
        click.echo(f"registered as public tables {name} and {name}_estimates in {policy}; restart dpsql serve to serve them")


@main.group()
def synopsis() -> None:
    """Publish, list and drop the policy's synopses ([synopses.NAME]): one charge, then every
    query over one is answered from it, free."""


@synopsis.command("publish")
@_policy
@_ledger
@click.argument("name")
def synopsis_publish(policy: str, ledger: str | None, name: str) -> None:
    """Publish synopsis NAME for the data as it is now: charged once to its charged_to."""
    from .synopses.publish import payers, publish, spec_of

    try:
        pol = load_policy(policy, ledger_path=ledger)
        session = Session(pol, payers(spec_of(pol, name), pol)[0])
        try:
            done = publish(session, name)
        finally:
            session.close()
    except Error as e:
        _fail(e)
        return
    click.echo(f"published synopsis {done.name}: {done.cells} cells from {done.marginals} measured marginals, "
               f"charged epsilon {done.epsilon:g} (receipt {done.charge_id}), data version {done.data_version}, "
               f"in {done.seconds:.1f} s")


@synopsis.command("list")
@_policy
@_ledger
@click.option("--json", "as_json", is_flag=True)
def synopsis_list(policy: str, ledger: str | None, as_json: bool) -> None:
    """The declared synopses, and which are published for the data as it is now."""
    from .synopses import store

    try:
        pol = load_policy(policy, ledger_path=ledger)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
        engine = open_engine(pol)
        try:
            version, stored = engine.data_version(), store.listed(led)
        finally:
            engine.close()
            led.close()
    except Error as e:
        _fail(e)
        return
    rows = []
    for name, spec in sorted(pol.synopses.items()):
        mine = sorted((s for s in stored if s.name == name), key=lambda s: s.at)
        current = [s for s in mine if s.data_version == version]
        state = "published" if current else ("stale (the data changed: publish again)" if mine else "not published")
        rows.append({"name": name, "table": spec.table, "epsilon": float(spec.epsilon), "charged_to": spec.charged_to,
                     "dimensions": [d.describe() for d in spec.dimensions],
                     "measures": [m.name for m in spec.measures], "state": state,
                     "published_at": current[-1].at if current else None,
                     "receipt": current[-1].charge_id if current else None})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no synopses are declared in the policy")
    for r in rows:
        click.echo(f"{r['name']}: {r['table']} by {', '.join(r['dimensions'])}; {', '.join(r['measures'])}; "
                   f"epsilon {r['epsilon']:g} charged to {r['charged_to']}: {r['state']}")


@synopsis.command("drop")
@_policy
@_ledger
@click.argument("name")
def synopsis_drop(policy: str, ledger: str | None, name: str) -> None:
    """Stop answering from synopsis NAME (every data version). Its charge stays."""
    from .synopses import store
    from .synopses.publish import spec_of

    try:
        pol = load_policy(policy, ledger_path=ledger)
        spec_of(pol, name)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
        try:
            n = store.drop(led, name.lower())
        finally:
            led.close()
    except Error as e:
        _fail(e)
        return
    click.echo(f"dropped synopsis {name.lower()} ({n} published version(s)); its charge stays in the ledger")


@main.group()
def budget() -> None:
    """Inspect, grant and simulate privacy budgets."""


@budget.command("show")
@_policy
@_ledger
@click.argument("user", required=False)
@click.option("--json", "as_json", is_flag=True)
def budget_show(policy: str, ledger: str | None, user: str | None, as_json: bool) -> None:
    """Spent and remaining budget of USER (or of every analyst in the policy)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
        rows = [budget_summary(pol, led, name) for name in ([user] if user else list(pol.users))]
    except Error as e:
        _fail(e)
        return
    if as_json:
        click.echo(json.dumps(rows, default=lambda x: float(x), indent=2))
        return
    for b in rows:
        window = f" this window (refreshes {b['window']['refreshes']})" if b.get("window") else ""
        click.echo(f"{b['user']}: {b['filter']} filter, epsilon {float(b['epsilon']['spent']):g} of "
                   f"{float(b['epsilon']['total']):g} spent{window} ({float(b['epsilon']['remaining']):g} left), delta "
                   f"{float(b['delta']['spent']):g} of {float(b['delta']['total']):g}, {b['queries']} queries")
        if b.get("lifetime"):
            life = b["lifetime"]
            click.echo(f"  lifetime cap: epsilon {float(life['epsilon']['spent']):g} of "
                       f"{float(life['epsilon']['total']):g} spent over all windows (never refreshes)")


@budget.command("grant")
@_policy
@_ledger
@click.argument("user")
@click.option("--epsilon", type=float, required=True, help="Epsilon to add.")
@click.option("--delta", type=float, default=None, help="Delta to add (default: 0 under basic, else the analyst's delta).")
def budget_grant(policy: str, ledger: str | None, user: str, epsilon: float, delta: float | None) -> None:
    """Give USER more budget (under non-basic filters: a new budget segment of this size)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        u = pol.user(user)
        eps = _positive_fraction(epsilon, "--epsilon")
        d = exact(delta) if delta is not None else (Fraction(0) if u.filter == "basic" else u.delta)
        if u.filter != "basic" and d <= 0:
            raise invalid_parameter(f"the {u.filter} filter needs --delta > 0 for a grant")
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
        led.grant(u.name, eps, d, u.budget)
        b = budget_summary(pol, led, u.name)
    except Error as e:
        _fail(e)
        return
    click.echo(f"granted epsilon={show(eps)} delta={show(d)} to {u.name}: {b['detail']}")


@budget.command("history")
@_policy
@_ledger
@click.argument("user")
@click.option("--json", "as_json", is_flag=True)
def budget_history(policy: str, ledger: str | None, user: str, as_json: bool) -> None:
    """Every charged release of USER: time, SQL, cost, noise scales, whether an answer left."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        rows = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).history(pol.user(user).name)
    except Error as e:
        _fail(e)
        return
    if as_json:
        click.echo(json.dumps([{**r, "cost": r["cost"].as_dict()} for r in rows], default=str, indent=2))
        return
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["at"]))
        failure = failure_of(r["released"])
        status = (failure_text(failure) if failure is not None else "released" if r["released"] is not None
                  else "charged, no answer recorded")
        click.echo(f"#{r['id']} {when} epsilon={show(r['cost'].epsilon)} delta={show(r['cost'].delta)} "
                   f"[{status}] {' '.join(r['sql'].split())}")
    click.echo(f"({len(rows)} releases)")


@budget.command("simulate")
@click.option("--filter", "kind", type=click.Choice(FILTERS), default=None, help="One filter (default: every filter).")
@click.option("--epsilon", type=float, required=True, help="The budget's epsilon.")
@click.option("--delta", type=float, required=True, help="The budget's delta.")
@click.option("--query-epsilon", type=float, required=True, help="Each query's epsilon.")
@click.option("--query-delta", type=float, default=None, help="Each Gaussian query's delta (default: delta / 100).")
@click.option("--mechanism", type=click.Choice(["laplace", "gaussian", "mixed"]), default="laplace",
              help="The queries' noise; mixed: Laplace and Gaussian queries in turn.")
@click.option("--delta-reserve", type=float, default=None,
              help="Delta kept for releases' own delta (default as in a policy: a tenth of delta under zcdp, rdp and whitehouse).")
@click.option("--rdp-order", type=float, default=None, help="Order of the rdp filter (default: the best integer order for this budget).")
@click.option("--json", "as_json", is_flag=True)
def budget_simulate(kind: str | None, epsilon: float, delta: float, query_epsilon: float, query_delta: float | None,
                    mechanism: str, delta_reserve: float | None, rdp_order: float | None, as_json: bool) -> None:
    """How many queries each filter admits from a budget: identical queries, or Laplace and
    Gaussian ones in turn."""
    kinds = [kind] if kind else list(FILTERS)
    counts = {}
    try:
        q_eps = _positive_fraction(query_epsilon, "--query-epsilon")
        laplace = Cost.pure(q_eps)
        q_delta = exact(query_delta) if query_delta is not None else exact(delta) / 100
        rho = rho_for(q_eps, q_delta) if mechanism != "laplace" else None
        gaussian = (Cost.of([Part("gaussian", q_eps, q_delta, rho=rho, noise_multiplier=1 / math.sqrt(2 * float(rho)))])
                    if rho is not None else None)
        workload = {"laplace": [laplace], "gaussian": [gaussian], "mixed": [laplace, gaussian]}[mechanism]
        for k in kinds:
            reserve = default_reserve(k, exact(delta)) if delta_reserve is None else exact(delta_reserve)
            f = make_filter(k, exact(epsilon), exact(delta), reserve=reserve,
                            rdp_order=None if rdp_order is None or k != "rdp" else exact(rdp_order))
            counts[k] = simulate(f, workload)
    except ValueError as e:
        _fail(invalid_parameter(str(e)))
        return
    except Error as e:
        _fail(e)
        return
    if as_json:
        common = {"epsilon": epsilon, "delta": delta, "query_epsilon": query_epsilon, "mechanism": mechanism}
        if kind:
            click.echo(json.dumps({"queries": counts[kind], "filter": kind, **common}))
        else:
            click.echo(json.dumps({"queries": counts, **common}))
        return
    what = "Laplace and Gaussian queries in turn" if mechanism == "mixed" else f"{mechanism} queries"
    click.echo(f"{what} of epsilon={query_epsilon:g} that fit in ({epsilon:g}, {delta:g}):")
    for k, n in counts.items():
        click.echo(f"  {k:<11} {n}")


@main.command()
@_policy
@_user
@_ledger
@click.option("--epsilon", type=float, required=True, help="The whole batch's epsilon.")
@click.option("--delta", type=float, required=True, help="The whole batch's delta (at least 1e-12).")
@click.option("--run", is_flag=True, help="Answer the batch now, charging (epsilon, delta) once.")
@click.option("--json", "as_json", is_flag=True)
@click.argument("file", type=click.File("r"))
def plan(policy: str, user: str, ledger: str | None, epsilon: float, delta: float, run: bool, as_json: bool,
         file) -> None:
    """Calibrate the queries of FILE (separated by ;) jointly with PLD accounting, beside what
    charging them one by one under USER's filter would give."""
    try:
        session = _session(policy, user, ledger)
        sqls = split_statements(file.read(), session.policy.limits)
        report = plan_report(session, sqls, exact(epsilon), exact(delta))
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
    click.echo(f"{len(sqls)} queries, batch (epsilon={epsilon:g}, delta={delta:g}), PLD noise multiplier "
               f"{report['noise_multiplier']:.6g}; one by one under the {report['filter']} filter each query "
               f"would get epsilon={report['separate_epsilon']:.6g}")
    for i, q in enumerate(report["queries"], 1):
        click.echo(f"[{i}] {' '.join(q['sql'].split())}")
        for m in q["measures"]:
            click.echo(f"    {m['measure']}: {pct} error ±{m['pld_half_width']:.6g} planned, "
                       f"±{m['separate_half_width']:.6g} one by one")
    click.echo(f"noise saving: planned scales are {report['saving']:.3f} of the one-by-one scales (geometric mean)")
    if results is not None:
        for sql, r in zip(sqls, results):
            click.echo(f"\n{' '.join(sql.split())}\n{render_table(r)}")


@main.command()
@_policy
@_ledger
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=5433, show_default=True, type=int)
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--require-tls", is_flag=True, help="Refuse connections that do not use TLS.")
@click.option("--max-connections", default=200, show_default=True, type=int, help="Authenticated sessions at once.")
@click.option("--max-pending", default=64, show_default=True, type=int,
              help="Connections still logging in at once (a cap of their own, so they never take analysts' slots).")
@click.option("--max-pending-per-address", default=16, show_default=True, type=int,
              help="Of those, from one client address. A full pool drops a connection idle for 1 s for a newcomer.")
@click.option("--login-timeout", default=10.0, show_default=True, type=float, help="Seconds from connect to logged in.")
@click.option("--login-delay", default=0.25, show_default=True, type=float,
              help="Seconds a failed login's answer is held, doubling with the name's and the address's recent "
                   "failures up to 32x; a right password is answered at once.")
@click.option("--login-lockout-after", default=10, show_default=True, type=int,
              help="Failed logins in a row that lock a user name for 5 minutes; an address may spend twice as "
                   "many (refilled at this many per 5 minutes) before only users who logged in from it recently "
                   "are let in from it.")
@click.option("--log-statements", is_flag=True,
              help="Log every statement's text and outcome (command tag or SQLSTATE) to standard error: what "
                   "tools send, never the values answered.")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Also serve the web console (budgets, history, EXPLAIN, audit log) here, e.g. 127.0.0.1:8080; "
                   "over HTTPS with --tls-cert/--tls-key.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Server processes sharing the port and the ledger, to use more than one core (about one per "
                   "core). Each has its own engine, memory limit and weighted copies; the connection caps and "
                   "the failed logins before a lockout are split among them.")
def serve(policy: str, ledger: str | None, host: str, port: int, tls_cert: str | None, tls_key: str | None,
          require_tls: bool, max_connections: int, max_pending: int, max_pending_per_address: int,
          login_timeout: float, login_delay: float, login_lockout_after: int, log_statements: bool, http: str | None,
          workers: int) -> None:
    """Serve the PostgreSQL wire protocol: psql, JDBC, ODBC and every Postgres driver connect unchanged."""
    from .server.launch import ServeOptions, build_server, checked, ensure_logins
    from .server.listener import run

    options = ServeOptions(policy, ledger, host, port, tls_cert, tls_key, require_tls, max_connections, max_pending,
                           max_pending_per_address, login_timeout, login_delay, login_lockout_after, log_statements,
                           http)
    store = None
    try:
        if workers > 1:  # the supervisor keeps the ledger open: its writer writes every worker's charges
            pol = checked(options)
            store = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
            ensure_logins(store, pol, click.echo)
        else:
            server = build_server(options)
            pol = server.policy
            ensure_logins(server.ledger, pol, click.echo)
        _warn_loose(store if workers > 1 else server.ledger)
    except Error as e:
        if store is not None:
            store.close()
        _fail(e)
        return

    def announce(bound: int, console: str | None) -> None:
        processes = f", {workers} workers" if workers > 1 else ""
        click.echo(f"dpsql {__version__} serving {pol.path} on {host}:{bound} "
                   f"({len(pol.tables)} tables, {len(pol.users)} analysts{', TLS' if tls_cert else ''}{processes})")
        click.echo(f"connect with: psql \"host={host} port={bound} dbname=dpsql "
                   f"user={next(iter(sorted(pol.users)), 'NAME')}\"")
        if console is not None:
            click.echo(f"privacy console: {console} (the same logins)")

    if workers == 1:
        announce(port, server.console_url())
        run(server)
        return
    from .server.supervisor import Supervisor

    try:
        status = Supervisor(options, workers, say=lambda text: click.echo(text, err=True), ledger=store).run(announce)
    except Error as e:
        _fail(e)
        return
    finally:
        store.close()
    sys.exit(status)


@main.group()
def users() -> None:
    """Manage analysts' logins (SCRAM-SHA-256 verifiers in the ledger database)."""


@users.command("add")
@_policy
@_ledger
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.option("--role", type=click.Choice(["analyst", "admin"]), default="analyst", show_default=True)
def users_add(policy: str, ledger: str | None, name: str, password_stdin: bool, role: str) -> None:
    """Create or update NAME's login (a random password is printed unless --password-stdin)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        pol.user(name)
        password = sys.stdin.readline().rstrip("\n") if password_stdin else secrets.token_urlsafe(12)
        if not password:
            raise invalid_parameter("the password is empty")
        open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).set_user(name, make_verifier(password), role)
    except Error as e:
        _fail(e)
        return
    click.echo(f"login for {name} ({role}) saved" + ("" if password_stdin else f"; password {password}"))


@users.command("list")
@_policy
@_ledger
def users_list(policy: str, ledger: str | None) -> None:
    """Analysts with a login."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        rows = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).list_users()
    except Error as e:
        _fail(e)
        return
    for name, role, created in rows:
        click.echo(f"{name}\t{role}\t{time.strftime('%Y-%m-%d %H:%M', time.localtime(created))}"
                   + ("" if name in pol.users else "\t(not in the policy: cannot query)"))


@users.command("remove")
@_policy
@_ledger
@click.argument("name")
def users_remove(policy: str, ledger: str | None, name: str) -> None:
    """Remove NAME's login (the budget and audit log stay)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        removed = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).remove_user(name)
    except Error as e:
        _fail(e)
        return
    click.echo(f"login for {name} removed" if removed else f"{name} has no login")
    if not removed:
        sys.exit(1)


@main.group()
def ledger() -> None:
    """Create, verify and back up the ledger (budgets, audit log, logins)."""


@ledger.command("init")
@_policy
@_ledger
def ledger_init(policy: str, ledger: str | None) -> None:
    """Create the policy's ledger and record its identity (refused if one exists)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        marker = pol.ledger_identity
        if marker.exists() or (pol.ledger_url is None and pol.ledger_path.exists()):
            raise invalid_parameter(f"a ledger already exists for this policy ({marker if marker.exists() else pol.ledger_path})",
                                    hint="dpsql ledger verify checks it; remove it only to forget every budget spent")
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
    except Error as e:
        _fail(e)
        return
    click.echo(f"ledger {led.identity.ledger_id} created at {led.where}; its identity file is {marker} "
               "(keep it with the ledger's backups)")


@ledger.command("verify")
@_policy
@_ledger
def ledger_verify(policy: str, ledger: str | None) -> None:
    """Check every record's chain and the totals: exit 1 if anything was edited or removed."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity, create=False)
        problems = led.verify()
    except Error as e:
        _fail(e)
        return
    _warn_loose(led)
    for p in problems:
        click.echo(f"PROBLEM: {p}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"ledger {led.identity.ledger_id} verified: every charge, grant and total is as recorded")


@ledger.command("backup")
@_policy
@_ledger
@click.argument("target", type=click.Path(dir_okay=False))
def ledger_backup(policy: str, ledger: str | None, target: str) -> None:
    """Copy the ledger to TARGET consistently, even while dpsql serves it (with its identity file)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        if Path(target).exists():
            raise invalid_parameter(f"{target} exists", hint="name a new file")
        open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity, create=False).backup(Path(target))
    except Error as e:
        _fail(e)
        return
    click.echo(f"ledger backed up to {target} (identity in {identity_file(Path(target))})")


@main.group("policy")
def policy_group() -> None:
    """Check the policy file against the data; with --data, the data owner's report on its limits."""


@policy_group.command("check")
@_policy
@click.option("--data", is_flag=True,
              help="Also read the data: what each limit cuts per table and column, and limits that fit it. Exact, "
                   "without noise: the data owner's view, never for analysts.")
@click.option("--keep", type=click.FloatRange(0.5, 1, max_open=True), default=policy_report.KEEP, show_default=True,
              help="With --data: the share of rows (units, values) a suggested limit keeps.")
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
            click.echo(json.dumps({"ok": True, "problems": []}) if as_json else
                       f"ok: {pol.path}: {len(pol.tables)} tables ({private} private), {len(pol.users)} analysts, "
                       f"checked against the {pol.engine.kind} engine's schema")
            return
        try:
            rep = policy_report.report(engine, pol, keep,
                                       progress=lambda text: click.echo(f"policy check: {text}", err=True))
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
        click.echo(json.dumps({"ok": False, "problems": [{"message": p.message, "fix": p.hint, "sqlstate": p.sqlstate}
                                                         for p in problems]}, indent=2))
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
    out = [f"dpsql policy check --data: {rep['policy']} ({rep['engine']})",
           "The data owner's view: exact counts from the raw rows, without noise. Never show it to analysts;",
           "limits copied from it into the policy, which is public, disclose what they were computed from.", ""]
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
        out = [f"{t['table']}: {t['rows']:,} rows, {t['units']:,} units of {t['privacy_unit']}{without}",
               f"  rows per unit: p50 {per['p50']}, p90 {per['p90']}, p99 {per['p99']}, max {per['max']}",
               f"  total bound {total['limit']} ({origin}): cuts {_pct(total['rows_cut_share'])} of rows; "
               f"{_pct(total['units_over_share'])} of units, holding {_pct(total['rows_of_units_over_share'])} of "
               "rows, are over it"]
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
    headers = ["column", "domain", "outside domain", "rows/unit/key p99, max", "max_rows cuts",
               "keys/unit p99, max", "units over max_groups", "their rows"]
    cells = [[k["column"], k["domain"], _pct(k["rows_outside_domain_share"]),
              f"{k['rows_per_unit_and_key']['p99']}, {k['rows_per_unit_and_key']['max']}",
              f"{_pct(k['max_rows']['rows_cut_share'])} (max_rows {k['max_rows']['limit']})",
              f"{k['keys_per_unit']['p99']}, {k['keys_per_unit']['max']}",
              f"{_pct(k['max_groups']['units_over_share'])} (max_groups {k['max_groups']['limit']})",
              _pct(k["max_groups"]["rows_of_units_over_share"])] for k in keys]
    return text_grid(headers, cells)


def _columns_grid(columns: list[dict[str, Any]]) -> list[str]:
    headers = ["column", "bounds", "NULL", "below lower", "above upper", "sum clipped", "p1", "p50", "p99"]
    cells = [[c["column"], f"[{_fmt(c['lower'])}, {_fmt(c['upper'])}]", _pct(c["null_share"]),
              _pct(c["below_lower_share"]), _pct(c["above_upper_share"]), _pct(c["sum_clipped_share"]),
              _fmt(c["p1"]), _fmt(c["p50"]), _fmt(c["p99"])] for c in columns]
    return text_grid(headers, cells)


def _suggestion_line(s: dict[str, Any]) -> str:
    """`max_rows 10 → 4 would cut 3.10% of rows (now 0.20%) and scale sum/count noise by 0.4`."""
    now, then = s["current"], s["suggested"]
    if s["cut_of"] == "values":
        now, then = (f"[{_fmt(v[0])}, {_fmt(v[1])}]" for v in (now, then))
        return (f"{s['limit']} {now} → {then} would clip {_pct(s['cut_suggested'])} of values and "
                f"{_pct(s['sum_clipped_suggested'])} of the sum (now {_pct(s['cut_now'])} and "
                f"{_pct(s['sum_clipped_now'])}) and scale SUM noise by {s['noise_ratio']:.3g}, "
                f"AVG noise by {s['avg_noise_ratio']:.3g}")
    cut = "would leave" if s["cut_of"] == "units" else "would cut"
    over = " over it" if s["cut_of"] == "units" else ""
    if now == then:
        return f"{s['limit']} {now}: keep it ({_pct(s['cut_now'])} of {s['cut_of']}{over})"
    return (f"{s['limit']} {now} → {then} {cut} {_pct(s['cut_suggested'])} of {s['cut_of']}{over} "
            f"(now {_pct(s['cut_now'])}) and scale sum/count noise by {s['noise_ratio']:.3g}")


def _positive_fraction(value: float, name: str) -> Fraction:
    try:
        v = exact(value)
    except ValueError:
        v = Fraction(0)
    if v <= 0:
        raise invalid_parameter(f"{name} must be a positive number")
    return v


if __name__ == "__main__":
    main()
