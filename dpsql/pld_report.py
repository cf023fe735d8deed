"""What PLD planning buys for a batch, beside charging its queries one by one (`dpsql plan`)."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any, Sequence

from .accounting.filters import Totals
from .errors import invalid_parameter, unsupported
from .guarantee.calibration import calibrate, needs_delta
from .guarantee.plan import Plan
from .ledger import segment_filter
from .prepare import plan_query
from .session import Session
from .sql.analyze import PublicQuery
from .sql.classify import Query, classify
from .targets import (
    batch_members,
    calibrate_planned,
    pld_multiplier,
)


def _plans(session: Session, sqls: Sequence[str]) -> list[Plan]:
    plans = []
    for sql in sqls:
        stmt = classify(sql, session.policy.limits)
        if not isinstance(stmt, Query):
            raise unsupported("a batch holds SELECT queries only")
        plan = plan_query(stmt.tree, session.policy, session.engine.schema(), session.settings.mechanism, stmt.options)
        if isinstance(plan, PublicQuery):
            raise unsupported("a query over public tables only needs no planning")
        plans.append(plan)
    return plans


def separate_epsilon(
    session: Session, plans: list[Plan], epsilon: Fraction, delta: Fraction
) -> tuple[Fraction, Fraction]:
    """The largest per-query (ε_q, δ_q) such that charging every query of the batch one by one
    fits in a fresh (ε, δ) budget under the analyst's filter."""
    mech = session.settings.mechanism
    n = len(plans)
    q_delta = delta / n
    f = segment_filter(replace(session.budget_policy, epsilon=epsilon, delta=delta), [])[1]

    def fits(eps_q: Fraction) -> bool:
        totals = Totals()
        for p in plans:
            d = q_delta if needs_delta(p, mech) else Fraction(0)
            totals = totals.plus(f.usage(calibrate(p, eps_q, d, mech, p.literal_domain_size()).cost))
        return f.admits(totals)

    lo, hi = Fraction(0), epsilon
    for _ in range(40):
        mid = (lo + hi) / 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    if lo == 0:
        raise invalid_parameter("these queries do not fit in the budget even one by one")
    return lo, q_delta


def pld_report(session: Session, sqls: Sequence[str], epsilon: Fraction, delta: Fraction) -> dict[str, Any]:
    plans = _plans(session, sqls)
    mech = session.settings.mechanism
    conf = session.settings.confidence
    mechanisms = [m for p in plans for m in batch_members(p, mech, p.literal_domain_size())]
    multiplier = pld_multiplier(mechanisms, epsilon, delta)
    eps_q, delta_q = separate_epsilon(session, plans, epsilon, delta)
    queries, ratios = [], []
    for sql, p in zip(sqls, plans):
        planned = calibrate_planned(p, mech, multiplier, p.literal_domain_size())
        separate = calibrate(p, eps_q, delta_q if needs_delta(p, mech) else Fraction(0), mech, p.literal_domain_size())
        measures = []
        for m, a, b in zip(p.measures, planned.measures, separate.measures):
            if b.noise.scale:
                ratios.append(a.noise.scale / b.noise.scale)
            measures.append(
                {
                    "measure": m.describe(),
                    "pld_scale": a.noise.scale * m.unit_scale,
                    "separate_scale": b.noise.scale * m.unit_scale,
                    "pld_half_width": a.noise.half_width(conf) * m.unit_scale,
                    "separate_half_width": b.noise.half_width(conf) * m.unit_scale,
                }
            )
        queries.append({"sql": sql, "measures": measures})
    saving = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else 1.0
    return {
        "epsilon": float(epsilon),
        "delta": float(delta),
        "noise_multiplier": multiplier,
        "filter": session.budget_policy.filter,
        "separate_epsilon": float(eps_q),
        "confidence": conf,
        "queries": queries,
        "saving": saving,
    }
