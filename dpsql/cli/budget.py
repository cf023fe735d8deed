"""`dpsql budget`: show, grant, history, and simulate a filter."""

from __future__ import annotations

import json
import math
import time
from fractions import Fraction

import click

from ..accounting.cost import Cost, Part, show
from ..accounting.filters import FILTERS, make_filter, simulate
from ..config import default_reserve, exact, load_policy
from ..errors import Error, invalid_parameter
from ..guarantee.mechanisms import rho_for
from ..ledger import failure_of, failure_text, open_ledger
from ..session import budget_summary
from .common import (
    _fail,
    _ledger,
    _policy,
    _positive_fraction,
)
from .group import main


@main.group()
def budget() -> None:
    """Inspect, grant and simulate privacy budgets."""


@budget.command("show")
@_policy
@_ledger
@click.argument("user", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print each analyst's budget as JSON.")
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
        click.echo(
            f"{b['user']}: {b['filter']} filter, epsilon {float(b['epsilon']['spent']):g} of "
            f"{float(b['epsilon']['total']):g} spent{window} ({float(b['epsilon']['remaining']):g} left), delta "
            f"{float(b['delta']['spent']):g} of {float(b['delta']['total']):g}, "
            f"{_count(b['queries'], 'query', 'queries')}"
        )
        if b.get("lifetime"):
            life = b["lifetime"]
            click.echo(
                f"  lifetime cap: epsilon {float(life['epsilon']['spent']):g} of "
                f"{float(life['epsilon']['total']):g} spent over all windows (never refreshes)"
            )


@budget.command("grant")
@_policy
@_ledger
@click.argument("user")
@click.option("--epsilon", type=float, required=True, help="Epsilon to add.")
@click.option(
    "--delta", type=float, default=None, help="Delta to add (default: 0 under basic, else the analyst's delta)."
)
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
@click.option("--json", "as_json", is_flag=True, help="Print the releases as JSON.")
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
        status = (
            failure_text(failure)
            if failure is not None
            else "released"
            if r["released"] is not None
            else "charged, no answer recorded"
        )
        click.echo(
            f"#{r['id']} {when} epsilon={show(r['cost'].epsilon)} delta={show(r['cost'].delta)} "
            f"[{status}] {' '.join(r['sql'].split())}"
        )
    click.echo(f"({_count(len(rows), 'release', 'releases')})")


@budget.command("simulate")
@click.option("--filter", "kind", type=click.Choice(FILTERS), default=None, help="One filter (default: every filter).")
@click.option("--epsilon", type=float, required=True, help="The budget's epsilon.")
@click.option("--delta", type=float, required=True, help="The budget's delta.")
@click.option("--query-epsilon", type=float, required=True, help="Each query's epsilon.")
@click.option("--query-delta", type=float, default=None, help="Each Gaussian query's delta (default: delta / 100).")
@click.option(
    "--mechanism",
    type=click.Choice(["laplace", "gaussian", "mixed"]),
    default="laplace",
    help="The queries' noise; mixed: Laplace and Gaussian queries in turn.",
)
@click.option(
    "--delta-reserve",
    type=float,
    default=None,
    help=(
        "Delta kept for releases' own delta (default as in a policy: a tenth of delta under zcdp, rdp and whitehouse)."
    ),
)
@click.option(
    "--rdp-order",
    type=float,
    default=None,
    help="Order of the rdp filter (default: the best integer order for this budget).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the admitted queries as JSON.")
def budget_simulate(
    kind: str | None,
    epsilon: float,
    delta: float,
    query_epsilon: float,
    query_delta: float | None,
    mechanism: str,
    delta_reserve: float | None,
    rdp_order: float | None,
    as_json: bool,
) -> None:
    """How many queries each filter admits from a budget: identical queries, or Laplace and
    Gaussian ones in turn."""
    kinds = [kind] if kind else list(FILTERS)
    counts = {}
    try:
        q_eps = _positive_fraction(query_epsilon, "--query-epsilon")
        laplace = Cost.pure(q_eps)
        q_delta = exact(query_delta) if query_delta is not None else exact(delta) / 100
        rho = rho_for(q_eps, q_delta) if mechanism != "laplace" else None
        gaussian = (
            Cost.of([Part("gaussian", q_eps, q_delta, rho=rho, noise_multiplier=1 / math.sqrt(2 * float(rho)))])
            if rho is not None
            else None
        )
        workload = {"laplace": [laplace], "gaussian": [gaussian], "mixed": [laplace, gaussian]}[mechanism]
        for k in kinds:
            reserve = default_reserve(k, exact(delta)) if delta_reserve is None else exact(delta_reserve)
            f = make_filter(
                k,
                exact(epsilon),
                exact(delta),
                reserve=reserve,
                rdp_order=None if rdp_order is None or k != "rdp" else exact(rdp_order),
            )
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


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
