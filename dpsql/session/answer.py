"""Run, release, answer: the bounded query run (prepared before the charge), checked by the
release guard against the charge's receipt, noised and post-processed; then the release
recorded in the ledger and kept in the answer cache."""

from __future__ import annotations

import decimal
import secrets
from typing import TYPE_CHECKING, Any, Callable

from sqlglot import exp

from ..answer_record import Amount, AnswerRecord, MeasureNoise, frozen_ci
from ..guarantee.calibration import Calibration
from ..guarantee.plan import Plan
from ..guarantee.release import NoisyTable, release
from ..ledger import Charge, PendingCharge
from ..plan_cache import Bounded
from . import answer_cache
from .bounded import bounded_query, released_groups, run
from .charging import Stopper, failed
from .result import Result

if TYPE_CHECKING:
    from .pipeline import Session


def answer(
    session: Session,
    plan: Plan,
    bounded: Bounded,
    cal: Calibration,
    charge: Charge | None,
    detail: dict[str, Any],
    pending: PendingCharge | None = None,
    stopper: Stopper | None = None,
    adjust: Callable[[NoisyTable], None] | None = None,
) -> Result:
    """Run the bounded query (prepared before the charge), have the release guard check it
    against the charge's receipt, noise it and post-process. A sampled plan gets a fresh
    secret salt here. With `pending`, the charge is admitted (written in its open
    transaction) but its commit may still be on its way to the disk: the engine runs, the
    noise is drawn and the answer post-processed meanwhile, and none of it, nor any error,
    leaves until the commit is durable (if it cannot be, nothing was charged and the answer
    is dropped). With `stopper` too, its admission may still be under way (`charge` is None):
    a refusal stops the engine (charging.Stopper), and nothing of the run, its failure included, is
    told before the admission."""
    s = session.settings
    try:
        salted = None if plan.sample_rate is None else bounded_query(session, plan, secrets.token_hex(16))
        rs, failure = run(session, plan, salted or bounded, stopper and stopper.stop), None
    except Exception as e:  # told once the charge stands: whether a query fails can depend on the data
        rs, failure = None, e
    finally:
        if stopper is not None:
            stopper.ended.set()
    if pending is not None:
        charge = pending.admitted()  # a refusal, or a ledger that cannot record it: raised here, first
    if failure is not None:
        if pending is not None:
            pending.durable()  # raises instead, with nothing charged, if the commit fails
        failed(session, charge, failure)
    try:
        noisy = release(plan, cal, released_groups(plan, bounded, rs), s.confidence, charge, session.policy)
        if adjust is not None:
            adjust(noisy)  # post-processing of the noisy values (a correction of truncation)
        out = session._post.run_plan(plan, noisy)
        left = charge.filter.remaining(charge.totals)
        room = charge.filter.admits_cost(charge.totals, charge.cost) if pending is not None else None
    finally:
        if pending is not None:
            pending.durable()  # raises instead, with nothing charged, if the commit fails
    if pending is not None:
        session._headroom = (charge, room)
    rows = [tuple(_plain(v) for v in r) for r in out.rows]
    dp = AnswerRecord(
        cost=Amount.of(charge.cost.as_dict()),
        remaining=Amount.of(left),
        ci=frozen_ci(out.ci),
        confidence=s.confidence,
        mechanism=s.mechanism,
        cached=False,
        noise=tuple(MeasureNoise(**m) for m in detail["mechanisms"]),
        receipt=charge.id,
    )
    return Result(out.names, out.types, rows, f"SELECT {len(rows)}", dp)


def record(session: Session, result: Result, charge: Charge, key: str | None, bounds: bool = False) -> Result:
    """What left, as it left: the release record (the audit log and the console's history show
    it with its intervals, and `bounds`, the limits chosen per query) and the cache entry."""
    dp = result.dp if result.dp is not None else AnswerRecord()
    released = {"names": result.names, "rows": result.rows, "ci": dp.get("ci"), "confidence": dp.confidence}
    if bounds:
        released["bounds"] = dp.get("bounds")
    session.ledger.record_release(charge.id, released)
    if session.settings.cache:
        session.ledger.cache_put(session.user.name, key, answer_cache.entry(result))
    return result


def noise_detail(plan: Plan, cal: Calibration) -> dict[str, Any]:
    """Noise of each measure, in the value's units, for the audit log and cursor.dp (its `noise`)."""
    return {
        "mechanisms": [
            {"measure": m.describe(), "kind": mn.noise.kind, "scale": mn.noise.scale * m.unit_scale}
            for m, mn in zip(plan.measures, cal.measures)
        ],
        "selection_threshold": cal.selection.threshold if cal.selection else None,
    }


def null_by_construction(expr: exp.Expression) -> bool:
    """A key expression written to yield NULL for some rows (a NULL branch, NULLIF, a CASE
    without ELSE): PostgreSQL would show a NULL group, which a declared domain leaves out."""
    return any(
        isinstance(n, (exp.Null, exp.Nullif)) or isinstance(n, exp.Case) and n.args.get("default") is None
        for n in expr.walk()
    )


def _plain(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v
