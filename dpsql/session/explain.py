"""EXPLAIN: a query's plan, noise, cost and what the budget would say, without running it or
charging anything."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp

from .. import auto_bounds
from ..answer_record import Amount, AnswerRecord, TargetChoice
from ..guarantee import shrinkage
from ..guarantee.families import family
from ..guarantee.measures import FINE_COUNT_BITS
from ..sql.analyze import PublicQuery
from ..sql.clock import now as clock_now
from ..sql.clock import pinned
from ..sql.narrow import narrowing, unlisted
from ..sql.options import QueryOptions
from ..sql.reads import case_conditions
from ..sql.scope import text_as_written
from ..synopses import route as synopsis_route
from . import auto
from .bounded import bounded_query, domain_size
from .budget import admits_more
from .result import Result

if TYPE_CHECKING:
    from .pipeline import Session


def explain_plan(session: Session, tree: exp.Query, options: QueryOptions | None = None) -> dict[str, Any]:
    plan, cal = session._prepare(pinned(tree, clock_now()), options)
    if isinstance(plan, PublicQuery):
        return {"public": True, "sql": session.engine.sql_of(plan.tree)}
    kept = auto.Kept(session, plan, domain_size(session, plan))  # looked up once, if at all
    cal, target = auto.targeted(session, plan, cal, options or QueryOptions(), tree, kept)
    s = session.settings
    auto_info = auto.explained(session, plan, cal, options or QueryOptions(), tree, kept)
    cost = auto_info.pop("auto_cost") or cal.cost  # less a profile's share when one released before is reused
    f, totals = session.ledger.state(session.user.name, session.budget_policy)
    after = totals.plus(f.usage(cost))
    mechanisms = []
    scaled_up = 1 / plan.sample_rate if plan.sample_rate else 1.0  # TABLESAMPLE's estimates are divided by the rate
    for m, mn in zip(plan.measures, cal.measures):
        unit = m.unit_scale * scaled_up
        mechanisms.append(
            {
                "measure": m.describe(),
                "noise": mn.noise.kind,
                "l1_sensitivity": None if mn.l1 is None else mn.l1 * unit,
                "l2_sensitivity": math.sqrt(mn.l2_squared) * unit,
                "scale": mn.noise.scale * unit,
                "half_width": mn.noise.half_width(s.confidence) * unit,
                "epsilon": None if mn.epsilon is None else float(mn.epsilon),
                "rho": None if mn.rho is None else float(mn.rho),
            }
        )
    return {
        "public": False,
        "sql": _pretty(bounded_query(session, plan, None).sql, session.engine.dialect),
        "sample_rate": plan.sample_rate,
        "ratios": [e.text for e in plan.estimates if family(e).centred_sum],
        "means_read": [list(pair) for pair in plan.means_read],
        "shrunk": [e.text for e in plan.estimates if family(e).shrunk] if plan.keys else [],
        "partly_read": partly_read(plan),
        "fine_counts": [
            e.text for e in plan.estimates if e.squares is not None and plan.measures[e.count].bits == FINE_COUNT_BITS
        ],
        "max_groups_per_unit": cal.groups_per_unit,
        "max_rows_per_group": plan.max_rows,
        "max_rows_per_unit": plan.total_rows if plan.total_bound else None,
        "groups": domain_size(session, plan),
        "narrowed_by": list(narrowing(plan).used),
        "unlisted": list(unlisted(plan)),
        **auto_info,
        "mechanisms": mechanisms,
        "selection": None
        if cal.selection is None
        else {
            "threshold": cal.selection.threshold,
            "scale": None if cal.selection.odds else cal.selection.noise.scale,
            "even": cal.selection.odds.even if cal.selection.odds else None,
            "epsilon": float(cal.selection.epsilon),
            "delta": float(cal.selection.delta),
        },
        "confidence": s.confidence,
        "target_error": None if options and options.epsilon is not None else s.target_error,
        "target": target,
        "cost": cost.as_dict(),
        "admitted": f.admits(after),
        "admits_more": admits_more(session.ledger, session.user.name, session.budget_policy, f, totals, cost),
        "filter": f.name,
        "remaining_after": {k: float(v) for k, v in f.remaining(after).items()},
        "remaining_now": {k: float(v) for k, v in f.remaining(totals).items()},
    }


def partly_read(plan) -> list[str]:
    """The aggregates that read only the rows where their own condition holds (a FILTER, a CASE
    without ELSE) beside aggregates of every row, whose rows the bounded query keeps (sql/reads.py):
    each gets the same noise for fewer rows, and auto bounds take each as holding every row of
    its group. From the query's text only."""
    if plan.relation.reads:
        return []
    conditional = [
        e.text
        for e in plan.estimates
        if case_conditions(plan.measures[e.total if e.total is not None else e.count].value) is not None
    ]
    return conditional if len(conditional) < len(plan.estimates) else []


def explain_result(session: Session, tree: exp.Query, options: QueryOptions | None = None) -> Result:
    info = session.explain_plan(tree, options)
    dp = (
        None
        if info["public"]
        else AnswerRecord(
            cost=Amount.of(info["cost"]),
            remaining=Amount.of(info["remaining_after"]),
            explain=True,
            admits_more=info["admits_more"],
            admitted=info["admitted"],
            remaining_now=Amount.of(info["remaining_now"]),
        )
    )
    lines = explain_lines(info) + (synopsis_route.explain(session, tree, options) if not info["public"] else [])
    return Result(["QUERY PLAN"], ["VARCHAR"], [(line,) for line in lines], "EXPLAIN", dp)


def _chosen(info: dict[str, Any]) -> str:
    """What auto bounds choose: clamps only where a unit has one row (a per-unit subquery)."""
    if info.get("auto_rows", True):
        return "a total bound on a unit's rows and clamps of summed values"
    return "clamps of summed values (a unit has one row here)"


def explain_lines(info: dict[str, Any]) -> list[str]:
    if info["public"]:
        return ["public query (no private tables): runs as written, free", info["sql"]]
    pct = f"{info['confidence'] * 100:g}%"
    lines = [
        f"cost: epsilon={info['cost']['epsilon']:g} delta={info['cost']['delta']:g}"
        f" ({'admitted' if info['admitted'] else 'REFUSED: over budget'}; EXPLAIN itself charges nothing)",
        f"remaining after: epsilon={info['remaining_after']['epsilon']:g} delta={info['remaining_after']['delta']:g}",
        f"the budget admits {info['admits_more']} more queries like this one",
        *(
            [
                f"epsilon chosen as the smallest giving COUNT and SUM a {pct} error within ±{info['target_error']:g} "
                "(dpsql.target_error)"
            ]
            if info.get("target_error") and not info.get("target")
            else [
                f"epsilon {info['target']['epsilon']:g} chosen as the smallest giving COUNT and SUM a {pct} error "
                f"within ±{info['target_error']:g} (dpsql.target_error) "
                f"{auto_bounds.chose(TargetChoice.of(info['target']))}"
                + ("; the profile's share of it is not charged (reused)" if info.get("auto_reused") else "")
            ]
            if info.get("target")
            else []
        ),
        (
            f"contribution bounds: {info['max_rows_per_unit']} row(s) per unit in all, in any groups "
            "(a unit with more has each row scaled down)"
            if info.get("max_rows_per_unit")
            else f"contribution bounds: {info['max_groups_per_unit']} group(s) per unit, "
            f"{info['max_rows_per_group']} row(s) per group"
        ),
        *(
            [
                f"groups: the {info['groups']} key tuple(s) of the declared domain"
                + (
                    f" that the conditions on the keys allow ({'; '.join(info['narrowed_by'])}), evaluated over the "
                    "declared values and public tables only"
                    if info.get("narrowed_by")
                    else ""
                )
                + ", each answered with noise whether or not it has rows"
            ]
            if info.get("groups") is not None
            else []
        ),
        *[f"note: {u}" for u in info.get("unlisted", ())],
        *(
            [
                f"limits chosen when the query runs (dpsql.bounds = auto): {info['auto_bounds']:.0%} of its epsilon "
                f"profiles its rows, then {_chosen(info)} are chosen within the policy's limits above; the noise "
                "below is at the policy's limits (the chosen ones are shown with the answer); SET dpsql.bounds = "
                "policy to keep them"
                + (
                    f"; {info['auto_kept'][0]} of the profile's {info['auto_kept'][1]} histograms were released to "
                    "this analyst before (same rows): those precise enough are reused free and the others released "
                    "again and combined with them (the same charge, a more precise profile)"
                    if info.get("auto_kept", (0, 0))[0]
                    else ""
                )
            ]
            if info.get("auto_bounds") and not info.get("auto_reused")
            else [
                "limits chosen when the query runs (dpsql.bounds = auto) from this query's profile released before "
                f"(this analyst, this data; reused free): the {info['auto_bounds']:.0%} of epsilon a profile would "
                "spend is not charged, the cost above is the release's (and any correction's) only; "
                f"{_chosen(info)} are chosen within the policy's limits above; "
                "SET dpsql.cache = off to profile afresh"
            ]
            if info.get("auto_bounds")
            else []
        ),
        *(
            [
                f"counts corrected for truncation (dpsql.bounds = auto): up to {info['auto_correction']:.0%} of its "
                "epsilon counts the rows (or groups) a unit's limits keep and those they cut, and the counts are "
                "scaled by (kept + cut) / kept; the release gets the rest (for counts of rows the split, or no "
                "correction at all, is chosen with the limits from the profile; the charge is the same)"
            ]
            if info.get("auto_correction") and not info.get("auto_unit_count")
            else []
        ),
        *(
            [
                f"a per-unit count corrected for truncation (dpsql.bounds = auto): up to {info['auto_correction']:.0%} "
                f"of its epsilon counts the rows the cap on {info['auto_unit_count']} keeps and those it cuts up to "
                "the reach, and its sums and means are scaled by (kept + cut) / kept; the release gets the rest "
                "(under the basic filter the split, or no correction at all, is chosen from the profile; the "
                "charge is the same)"
            ]
            if info.get("auto_correction") and info.get("auto_unit_count")
            else []
        ),
        *(_expected_lines(info["auto_expected"], pct) if info.get("auto_bounds") else []),
    ]
    for m in info["mechanisms"]:
        share = (
            f"epsilon {m['epsilon']:.6g}"
            if m["epsilon"] is not None
            else f"rho {m['rho']:.6g}"
            if m["rho"] is not None
            else "PLD-planned"
        )
        lines.append(
            f"{text_as_written(m['measure'])}: {share}, {m['noise']} noise, scale {m['scale']:.6g}, "
            f"L1 sensitivity {m['l1_sensitivity']:.6g}, {pct} error within ±{m['half_width']:.6g}"
        )
    if info.get("auto_bounds") or info.get("auto_correction"):
        lines.append(
            "dpsql.bounds = auto: the release gets "
            + ("at least " if info.get("auto_again") else "")
            + f"{1 / info['auto_release']:.0%} of the epsilon"
            + (
                f" (up to {info['auto_again']:.0%} of it may go to profiling a small population again)"
                if info.get("auto_again")
                else ""
            )
            + f", at limits no looser than these, so each noise above is at most {info['auto_release']:.4g} "
            "times as large (scale and interval), plus what the chosen limits cut; the limits, and any "
            "correction, come with the answer"
            + (
                f"; a mean's sum, centred at the profile's mean when the query runs, at most "
                f"{2 * info['auto_release']:.4g} times (its per-row bound is the centre's distance to the "
                "farther end of its clamp, at most twice the middle's)"
                if info.get("auto_centred")
                else ""
            )
        )
    if info.get("ratios"):
        lines.append(
            f"{', '.join(sorted(set(info['ratios'])))}: a ratio of the noisy totals above to the noisy count, "
            "so its error shrinks as its group grows (about ±(total error + |value| × count error) / count)"
        )
    for written, mean in info.get("means_read") or ():
        lines.append(
            f"{text_as_written(written)} is answered as {text_as_written(mean)}: the same value on any data, "
            "released as one mean (its own estimator) rather than a noisy sum over a noisy count"
        )
    if info.get("partly_read"):
        lines.append(
            f"{', '.join(sorted(set(info['partly_read'])))}: reads only the rows where its condition holds, "
            "beside aggregates of every row: its noise does not shrink with its rows, so it is larger "
            "relative to its value"
            + (" (and the limits are chosen as if it held every row of its group)" if info.get("auto_bounds") else "")
            + "; to give it more of the epsilon, put weights before the query, one per aggregating select "
            "item in order: /* dpsql: weights 1, 4 */"
        )
    if info.get("shrunk"):
        lines.append(
            f"{', '.join(sorted(set(info['shrunk'])))}: over {shrinkage.MIN_GROUPS} groups or more, each group's "
            f"answer is moved toward the groups' median by at most {shrinkage.REACH:g} of its interval's "
            "half-width, never out of it (post-processing, free)"
        )
    if info.get("fine_counts"):
        lines.append(
            f"{', '.join(sorted(set(info['fine_counts'])))}: its count is kept to 2^-{FINE_COUNT_BITS} of a row "
            "where a unit's shares are scaled, as its squares are, so that their centring (half their range "
            "times the count) is taken back out without bias"
        )
    if info.get("sample_rate"):
        lines.append(
            f"TABLESAMPLE: estimates are divided by the rate {info['sample_rate']:g}, and so is the noise "
            "above; the sample's own error comes on top (the answer's intervals include both)"
        )
    if info["selection"]:
        sel = info["selection"]
        if sel["scale"] is None:
            rule = (
                f"a group is shown with a probability that grows with its unit count: at least even from "
                f"{sel['even']} units, always from {sel['threshold']}"
            )
        else:
            rule = (
                f"a group is shown when its noisy unit count (laplace scale {sel['scale']:.6g}) "
                f"reaches {sel['threshold']}"
            )
        lines.append(f"partition selection: {rule}; epsilon={sel['epsilon']:g} delta={sel['delta']:g}")
    lines.append("rewritten query:")
    lines.extend(info["sql"].splitlines())
    return lines


def _expected_lines(model: dict[str, Any] | None, pct: str) -> list[str]:
    """What the profile last released for this query (to this analyst, on this data) expects of
    the limits it would choose, per aggregate, and each measure's noise at them; or that the
    bias is not known before a profile is."""
    if model is None:
        return [
            "expected error of the chosen limits: what they cut is unknown until a profile of this query is "
            "released (run it once; EXPLAIN then reads that profile, free); the noise below is an upper bound"
        ]
    limits = [f"{model['max_contributions']} row(s) per unit"] if model.get("max_contributions") else []
    limits += [f"{text_as_written(expr)} clamped to [{lo:g}, {hi:g}]" for expr, (lo, hi) in model["clamps"].items()]
    e = model["expected"]
    lines = [
        f"expected error of the chosen limits (from the profile last released for this query, reused free): "
        f"{'; '.join(limits) or 'the policy limits'}, about {e['bias']:.1%} cut by them and {e['noise']:.1%} "
        f"of noise, relative, summed over the aggregates ({e['at_policy_limits']:.1%} at the policy's limits)"
    ]
    lines += [
        f"  {text}: about {part['bias']:.1%} cut, {part['noise']:.1%} noise (the model's expected relative error)"
        for text, part in e.get("by_aggregate", {}).items()
    ]
    lines += [
        f"  {text_as_written(measure)} at the chosen limits: {pct} error within ±{hw:.6g}"
        for measure, hw in model.get("half_widths", {}).items()
    ]
    return lines


def _pretty(sql: str, dialect: str) -> str:
    """The bounded query laid out one clause a line, for people (EXPLAIN): as the engine runs it
    when the engine's own SQL cannot be read back."""
    try:
        return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
    except sqlglot.errors.SqlglotError:
        return sql
