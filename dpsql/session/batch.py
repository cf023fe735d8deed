"""Batches: several DP queries calibrated jointly by PLD planning and charged once as one
(epsilon, delta) release, as a script of DP queries, or execute_batch, sends them."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from ..answer_record import AnswerRecord
from ..config import Policy
from ..errors import invalid_parameter, unsupported
from ..guarantee.plan import Plan
from ..plan_cache import Bounded
from ..prepare import plan_query, positive, probability, within_cap
from ..sql.analyze import PublicQuery, touches_private
from ..sql.classify import Query, classify
from ..sql.clock import now as clock_now
from ..sql.clock import pinned
from ..sql.route import Routed
from ..targets import batch_cost, batch_members, calibrate_planned, pld_multiplier
from .answer import answer, noise_detail
from .bounded import bounded_query
from .result import Result

if TYPE_CHECKING:
    from .pipeline import Session


def batchable(policy: Policy, routes: Sequence[Routed]) -> bool:
    """Whether the statements are all DP queries, which a script answers as one batch (the first
    refused one's refusal is raised)."""
    read = [r.checked() if r.statement is not None or r.error is not None else None for r in routes]
    return all(isinstance(s, Query) and touches_private(s.tree, policy) for s in read)


def answer_batch(
    session: Session,
    sqls: Sequence[str],
    epsilon: float | Fraction | None,
    delta: float | Fraction | None,
    weights: Sequence[float] | None,
) -> list[Result]:
    """Several DP queries planned jointly and charged once (Session.execute_batch)."""
    s = session.settings
    deadline = session.policy.limits.deadline()
    eps = within_cap(
        session.policy,
        s.epsilon if epsilon is None else positive(str(epsilon), "epsilon", "execute_batch(..., epsilon=0.1)"),
    )
    dlt = s.delta if delta is None else probability(str(delta), "delta")
    weights = list(weights) if weights is not None else [1.0] * len(sqls)
    if len(weights) != len(sqls) or any(not (w > 0 and math.isfinite(w)) for w in weights):
        raise invalid_parameter("weights must be positive numbers, one per query")
    if not sqls:
        raise invalid_parameter("the batch is empty")
    plans: list[Plan] = []
    bound: list[Bounded] = []  # each plan's bounded query, prepared before the charge
    at = clock_now()  # one instant for the batch's clocks
    for sql in sqls:
        stmt = classify(sql, session.policy.limits)
        if not isinstance(stmt, Query):
            raise unsupported("a batch holds SELECT queries only", hint="send SET and SHOW on their own")
        plan = plan_query(pinned(stmt.tree, at), session.policy, session.engine.schema(), s.mechanism, stmt.options)
        if isinstance(plan, PublicQuery):
            raise unsupported("a query over public tables only needs no planning", hint="send it on its own")
        bound.append(bounded_query(session, plan, None))  # an engine's refusal comes before the charge
        plans.append(plan)
        deadline.check()
    mechanisms = [m for p, w in zip(plans, weights) for m in batch_members(p, s.mechanism, p.literal_domain_size(), w)]
    multiplier = pld_multiplier(mechanisms, eps, dlt)
    cost = batch_cost(eps, dlt, multiplier, len(mechanisms))
    cals = [calibrate_planned(p, s.mechanism, multiplier, p.literal_domain_size(), w) for p, w in zip(plans, weights)]
    detail = {
        "batch": len(sqls),
        "noise_multiplier": multiplier,
        "queries": [noise_detail(p, c) for p, c in zip(plans, cals)],
    }
    session._headroom = None  # _overlapping judges by the session's latest charge
    charge = session.ledger.charge(
        session.user.name, session.budget_policy, cost, "\n;\n".join(sqls), detail, session.global_budget
    )
    results = [answer(session, p, q, c, charge, d) for p, q, c, d in zip(plans, bound, cals, detail["queries"])]
    session.ledger.record_release(charge.id, [r.rows for r in results])
    for r in results:
        r.dp = replace(r.dp or AnswerRecord(), batch=len(results))  # each carries the batch's one charge
    return results
