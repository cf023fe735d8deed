"""Limits chosen per query (SET dpsql.bounds = auto, auto_bounds.py) in the pipeline: one charge
for the profile (or the correction) and the release, durable before anything of the data is
read; then the chosen plan's release, corrected for truncation where asked."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from .. import auto_bounds, auto_choice, auto_correction, auto_mean
from ..accounting.cost import Cost
from ..answer_record import AnswerRecord, ChosenBounds, TargetChoice
from ..errors import OperationalError, invalid_parameter
from ..guarantee.calibration import Calibration, calibrate, measure_weights, measures_of
from ..guarantee.families import family
from ..guarantee.guard import check_split
from ..guarantee.plan import Plan
from ..guarantee.release import NoisyTable
from ..ledger import Charge
from ..plan_cache import Bounded
from ..prepare import plan_query, query_delta, within_cap
from ..sql.allowlist import CLOCK_FUNCTIONS
from ..sql.classify import Query
from ..sql.options import QueryOptions
from ..sql.scope import text_as_written
from ..targets import round_up, smallest_meeting
from .answer import answer, noise_detail
from .bounded import bounded_query, built, domain_size, exact
from .charging import charged_work, charging
from .result import Result

if TYPE_CHECKING:
    from .pipeline import Session


def chosen_per_query(session: Session, plan: Plan, cal: Calibration, options: QueryOptions) -> bool:
    """Whether the query's limits are chosen per query (auto_bounds.py): SET dpsql.bounds = auto,
    a plan of a kind it can choose for, the filter planner at a plain epsilon, something to choose."""
    s = session.settings
    if s.bounds != "auto" or s.planner != "filter":
        return False
    if options.max_groups is not None or options.max_rows is not None:
        return False  # the query states its own limits (BigQuery's clause): they are kept as written
    if any(p.kind not in ("laplace", "selection") for p in cal.cost.parts):
        return False
    mechanism = s.mechanism
    units, domain, eligible = session._plans.derived(
        plan, f"choosable {mechanism}", lambda: _choosable(plan, mechanism)
    )
    if units:
        return cal.groups_per_unit < (domain or cal.groups_per_unit + 1)
    return eligible


def released_size(session: Session, plan: Plan) -> int | None:
    """`auto_bounds.released_groups` of the plan's declared domain as the engine lists it."""
    return auto_bounds.released_groups(plan, domain_size(session, plan))


def _choosable(plan: Plan, mechanism: str) -> tuple[bool, int | None, bool]:
    """What of the choice's conditions reads the plan alone (kept with it: a plan is frozen):
    whether it counts units per group, its declared domain's size, whether it is eligible with
    something to choose."""
    if auto_bounds.counts_units(plan, mechanism):
        return True, plan.literal_domain_size(), False
    eligible = auto_bounds.eligible(plan, mechanism) and (
        auto_bounds.ceiling(plan) > 1 or bool(auto_bounds.columns(plan))
    )
    return False, None, eligible


def targeted(
    session: Session,
    plan: Plan,
    cal: Calibration,
    options: QueryOptions,
    tree: exp.Query,
    kept: Kept | None = None,
) -> tuple[Calibration, dict[str, Any] | None]:
    """The calibration a query runs at under dpsql.target_error, and what chose its epsilon.

    `cal` is at the smallest epsilon meeting the target at the policy's limits (prepare.py,
    public). Under limits chosen per query the epsilon is chosen instead from the model of the
    profile last released for this query to this analyst on this data (`expected`'s profile:
    already charged, so free), the smallest at which every COUNT and SUM's noise half-width at
    the limits the model chooses, plus the bias those limits cut, is within the target; without
    such a profile, the smallest at which the release's share of epsilon meets the target at the
    policy's limits (the chosen ones are no looser; what they cut is not known yet). Refused
    (free: before any charge) when the policy's max_query_epsilon cannot meet it. `kept`: the
    statement's look-up of that profile, when it has one (EXPLAIN's)."""
    s = session.settings
    if s.target_error is None or options.epsilon is not None:
        return cal, None
    hint = "raise dpsql.target_error, or group by fewer keys: nothing was charged"
    if not chosen_per_query(session, plan, cal, options):
        within_cap(session.policy, cal.cost.epsilon, hint=hint)
        return cal, None
    cap = session.policy.privacy.max_query_epsilon
    ceiling = min(cap, TARGET_CEILING) if cap is not None else TARGET_CEILING
    size = released_size(session, plan)
    groups = 1 if size is None else size
    released = None
    if not auto_bounds.counts_units(plan, s.mechanism):
        released = (kept or Kept(session, plan, size)).profile
    if released is None:
        correct = auto_bounds.corrected(plan, groups)
        cols = auto_bounds.columns(plan)
        again = auto_bounds.again_share(plan, cols, correct, s.additive)
        share = 1 - auto_bounds.release_epsilon(Fraction(1), correct) + again
        if auto_bounds.counts_units(plan, s.mechanism):
            share = auto_bounds.correction_share(plan, s.mechanism, groups)
        epsilon = round_up(float(cal.cost.epsilon / (1 - share)))
        within_cap(
            session.policy,
            epsilon,
            hint=f"{hint}; the release gets {float(1 - share):.0%} of the epsilon after choosing its limits "
            "(SET dpsql.bounds = policy to spend it all on the release)",
        )
        info = {"error": s.target_error, "from": "policy", "epsilon": float(epsilon)}
    else:
        predicted = partial(target_error_at, session, plan, released, tree, options, groups)
        if predicted(ceiling) > s.target_error:
            raise invalid_parameter(
                f"no epsilon up to {float(ceiling):g} gives a {s.confidence:.0%} error within "
                f"±{s.target_error:g} (noise plus the bias of the limits chosen) by the model of this "
                "query's profile",
                hint=f"{hint}; or SET dpsql.bounds = policy to keep the policy's limits",
            )
        epsilon = smallest_meeting(lambda e: predicted(e) <= s.target_error, ceiling, steps=40)
        info = {"error": s.target_error, "from": "profile", "epsilon": float(epsilon), "expected": predicted(epsilon)}
    # Kept per epsilon (3 significant digits: few), so that what is derived from it is kept too.
    at = session._plans.derived(
        cal,
        f"target {epsilon}",
        lambda: calibrated_at(session, plan, epsilon, options),
    )
    return at, info


TARGET_CEILING = Fraction(100)  # as targets.epsilon_for_target's


def target_error_at(
    session: Session,
    plan: Plan,
    profile: auto_bounds.Profile,
    tree: exp.Query,
    options: QueryOptions,
    groups: int,
    epsilon: Fraction,
) -> float:
    """The model's largest expected error of a COUNT or SUM of the plan at `epsilon`, in its own
    units: the noise half-width at the limits the profile's model chooses (at the release's share
    of epsilon) plus the bias they cut (`auto_bounds.Choice.absolute_bias`). Post-processing of a
    released profile: free."""
    s = session.settings
    top, cols = auto_bounds.ceiling(plan), auto_bounds.columns(plan)
    correct = auto_bounds.corrected(plan, groups)
    choice = auto_choice.choose(plan, profile, cols, top, epsilon, groups, correct, s.additive)
    at = session._plans.derived(
        plan,
        f"chosen plan {choice.options(QueryOptions())}",
        lambda: plan_query(tree, session.policy, session.engine.schema(), s.mechanism, choice.options(options)),
    )
    cal = calibrated_at(session, at, auto_bounds.release_epsilon(epsilon, choice.after), options)
    worst = 0.0
    for i, est in enumerate(at.estimates):
        if not family(est).targetable:
            continue
        widths = (cal.measures[m].noise.half_width(s.confidence) * at.measures[m].unit_scale for m in measures_of(est))
        worst = max(worst, max(widths) + choice.absolute_bias(i))
    return worst


def explained(
    session: Session,
    plan: Plan,
    cal: Calibration,
    options: QueryOptions,
    tree: exp.Query | None = None,
    kept: Kept | None = None,
) -> dict[str, Any]:
    """What EXPLAIN says of limits chosen per query: the profile's and the correction's shares
    of epsilon, and by how much the release's smaller share scales the noise up. `kept`: the
    statement's look-up of the query's kept profile (shared with `targeted`), else its own."""
    if not chosen_per_query(session, plan, cal, options):
        return {
            "auto_bounds": None,
            "auto_correction": None,
            "auto_release": 1.0,
            "auto_again": None,
            "auto_expected": None,
            "auto_reused": False,
            "auto_kept": (0, 0),
            "auto_cost": None,
            "auto_rows": False,
            "auto_centred": False,
            "auto_unit_count": None,
        }
    fix = auto_bounds.correction_share(
        plan, session.settings.mechanism, 1 if (size := released_size(session, plan)) is None else size
    )
    units = auto_bounds.counts_units(plan, session.settings.mechanism)
    profile = Fraction(0) if units else auto_bounds.SHARE
    # the most a small population's profile may take again from the release (auto_bounds.extra)
    again = (
        Fraction(0)
        if units
        else auto_bounds.again_share(
            plan,
            auto_bounds.columns(plan),
            auto_bounds.corrected(plan, 1 if size is None else size),
            session.settings.additive,
        )
    )
    stored = kept or Kept(session, plan, size)
    reusing = [] if units else stored.reusable
    new = auto_bounds.fresh(reusing, cal.cost.epsilon)
    reused = bool(reusing) and not any(new)  # every histogram reused: the profile's share is not charged
    return {
        "auto_bounds": float(profile) or None,
        "auto_correction": float(fix) or None,
        "auto_release": float(1 / (1 - profile - fix - again)),
        "auto_again": float(again) or None,
        "auto_expected": expected(session, plan, stored.profile, cal.cost.epsilon, size, options, tree)
        if profile
        else None,
        "auto_reused": reused,
        "auto_kept": (sum(k is not None for k in reusing), len(reusing)),
        "auto_cost": auto_cost(session, plan, cal.cost.epsilon, options, 1 if size is None else size, new)[0]
        if reused
        else None,
        # a per-unit count corrected for its cap (as the query wrote it)
        "auto_unit_count": None if (unit := auto_bounds.unit_count(plan)) is None else text_as_written(unit),
        "auto_rows": auto_bounds.ceiling(plan) > 1,  # one row per unit (a per-unit subquery): clamps only
        # a mean centred at the profile's mean (auto_mean.py): its sum's per-row bound, the centre's
        # distance to the farther end of its clamp, may be up to twice the middle's
        "auto_centred": session.settings.additive
        and bool(auto_mean.centred_means(plan, [c.expr for c in auto_bounds.columns(plan)])),
    }


def expected(
    session: Session,
    plan: Plan,
    released: auto_bounds.Profile | None,
    epsilon: Fraction,
    size: int | None,
    options: QueryOptions | None = None,
    tree: exp.Query | None = None,
) -> dict[str, Any] | None:
    """The limits and the model's error (`auto_bounds.Choice.describe`) that the profile last
    released to this analyst for this query, on the current data version (`released`:
    `Kept.profile`), gives at `epsilon`,
    and (with the query's `tree`) each measure's noise half-width at those limits and the
    release's share of epsilon: post-processing of a release already charged, so free; None
    when there is none yet (the bias of chosen limits is unknown until a profile is released)."""
    top, cols = auto_bounds.ceiling(plan), auto_bounds.columns(plan)
    groups = 1 if size is None else size
    if released is None:
        return None
    correct = auto_bounds.corrected(plan, groups)
    choice = auto_choice.choose(plan, released, cols, top, epsilon, groups, correct, session.settings.additive)
    out = choice.describe().as_dict()  # the JSON form: EXPLAIN shows it, the console too
    if tree is not None:
        rest = auto_bounds.release_epsilon(epsilon, choice.after)
        at, cal, _ = session._plans.derived(
            plan,
            f"chosen {choice.options(QueryOptions())} {rest}",
            lambda: chosen(session, tree, options or QueryOptions(), choice, rest),
        )
        confidence = session.settings.confidence
        out["half_widths"] = {
            m.describe(): mn.noise.half_width(confidence) * m.unit_scale for m, mn in zip(at.measures, cal.measures)
        }
    return out


def auto_cost(
    session: Session,
    plan: Plan,
    epsilon: Fraction,
    options: QueryOptions,
    groups: int,
    new: tuple[bool, ...] | None = None,
) -> tuple[Cost, Calibration]:
    """What a query whose limits are chosen is charged at `epsilon` (its profile's histograms it
    releases, `new` as in auto_bounds.epsilons: all by default; its release's, or where the rest
    is split after the profile (auto_bounds.lumped: a count that may be corrected, a plan with
    value histograms, under basic filters) one part for the release and what the profile chooses
    to spend of it, auto_bounds.rest_part), and the release's calibration at the policy's limits at
    the rest after the profile (the chosen limits cost the same; a corrected count's release
    gets part of it)."""
    s = session.settings
    top, cols = auto_bounds.ceiling(plan), auto_bounds.columns(plan)
    correct = auto_bounds.corrected(plan, groups)
    split_after = auto_bounds.split_after_profile(plan, s.additive)
    # the correction's and the release's one part (or the release's and a small population's profile
    # again), split after the profile
    lump = auto_bounds.lumped(plan, cols, correct, s.additive)
    rest = auto_bounds.release_epsilon(epsilon, () if split_after else correct)
    at_rest = calibrated_at(session, plan, rest, options)
    by_group = bool(auto_bounds.profiled_groups(plan, groups if groups > 1 else 0))
    own = auto_bounds.parts(epsilon, cols, top, correct, by_group, new, split_after)
    return Cost.of(own + (() if lump else at_rest.cost.parts)), at_rest


class Kept:
    """The histograms of a query's profile released before to this analyst on this data version
    (`size`: its released domain's), looked up once, when first asked for: EXPLAIN asks twice
    (dpsql.target_error's epsilon, then what it shows of the choice), from one Kept."""

    def __init__(self, session: Session, plan: Plan, size: int | None):
        self._session, self._plan, self._size = session, plan, size

    @cached_property
    def _profile(self) -> tuple[tuple[auto_bounds.Column, ...], int, bool]:  # what it is of, as piece_keys takes
        plan = self._plan
        return (
            auto_bounds.columns(plan),
            auto_bounds.ceiling(plan),
            bool(auto_bounds.profiled_groups(plan, self._size or 0)),
        )

    @cached_property
    def keys(self) -> tuple | None:
        """Where each histogram is kept (`piece_keys`); None when the profile reads the clock."""
        return piece_keys(self._session, self._plan, *self._profile)

    @cached_property
    def _pieces(self) -> list[auto_bounds.Piece | None] | None:
        return None if self.keys is None else [self._session._plans.profile(k) for k in self.keys]

    @property
    def reusable(self) -> list[auto_bounds.Piece | None]:
        """Each histogram of the profile, None for each not kept; all None with dpsql.cache =
        off, where each run stands alone, or when the profile reads the clock."""
        if self._pieces is None or not self._session.settings.cache:
            return [None] * len(auto_bounds.pieces(*self._profile))
        return self._pieces

    @cached_property
    def profile(self) -> auto_bounds.Profile | None:
        """The query's profile when every one of its histograms is kept (for EXPLAIN and
        dpsql.target_error: free), whatever dpsql.cache says, else None."""
        if self._pieces is None or any(p is None for p in self._pieces):
            return None
        return auto_bounds.assembled(self._pieces, *self._profile)


def piece_keys(
    session: Session, plan: Plan, cols: tuple[auto_bounds.Column, ...], top: int, by_group: bool
) -> tuple | None:
    """Where each histogram of the query's profile (`auto_bounds.pieces`) is kept: per analyst,
    data version, the rows it is of (the profile's CTEs up to `filtered`, without the measures'
    columns: the same FROM, JOIN, WHERE and group keys) and what it counts (the row-count
    histogram at the policy's bound; a column's clamped values over its bins' range; the groups'
    masses). Another query over the same rows that needs one of them (another aggregate of the
    column, another measure) finds it; a query over other rows (another WHERE) does not.
    None when the rows depend on more than the data (a clock)."""
    rows, timeless = session._plans.derived(
        plan, "profile rows", lambda: prepared_sql(session, auto_bounds.rows_query(plan))
    )
    if not timeless:
        return None
    who = (session.user.name, session.engine.data_version(), rows)
    what = {0: ("rows", top), 1 + len(cols): ("groups",)}
    what.update({1 + i: ("values", c.expr, c.lower, c.upper) for i, c in enumerate(cols)})
    return tuple(who + what[i] for i in auto_bounds.pieces(cols, top, by_group))


def answer_auto(
    session: Session,
    stmt: Query,
    tree: exp.Query,
    policy_plan: Plan,
    policy_cal: Calibration,
    options: QueryOptions,
    groups: tuple | None,
    target: dict[str, Any] | None = None,
) -> tuple[Result, Charge]:
    """One charge for the profile and the release, durable before the profile runs (so no
    refusal or failure after it depends on the data); then the chosen plan's release. `target`:
    how dpsql.target_error chose the epsilon (`targeted`), told with the limits."""
    s = session.settings
    if auto_bounds.counts_units(policy_plan, s.mechanism):
        return units_answer(session, stmt, policy_plan, policy_cal, options, groups, target)
    top, cols = auto_bounds.ceiling(policy_plan), auto_bounds.columns(policy_plan)
    size = auto_bounds.released_groups(policy_plan, len(groups) if groups else None)
    correct = auto_bounds.corrected(policy_plan, size or 1)
    epsilon = policy_cal.cost.epsilon
    by_group = auto_bounds.profiled_groups(policy_plan, size or 0)  # public
    # one part for the release (and a correction, or a small population's profile again), split after the profile
    lump = auto_bounds.lumped(policy_plan, cols, correct, s.additive)
    # The profile's SQL is built (and kept) before the charge, so that a query it cannot be built
    # for is refused free; the data version is read before the profile's rows.
    profile_sql(session, policy_plan, cols, top, bool(by_group))
    stored = Kept(session, policy_plan, size or 0)
    keys, kept = stored.keys, stored.reusable  # charged before: free
    new = auto_bounds.fresh(kept, epsilon)  # released (again) by this query, the others reused
    cost, at_rest = auto_cost(session, policy_plan, epsilon, options, size or 1, new)
    pending = charging(session, cost, stmt.sql, json.dumps(noise_detail(policy_plan, at_rest), default=str))
    charge = pending.admitted()
    with charged_work(
        session, pending, charge, "the query's cost stays charged: its limits were being chosen from the data"
    ):
        pieces, spent = released_profile(session, policy_plan, cols, top, epsilon, by_group, keys, kept, new)
        profile = auto_bounds.assembled(pieces, cols, top, bool(by_group))
        again = auto_bounds.extra(profile, cols, epsilon) if lump else ()
        if again:  # a small population: its value histograms released again, from the release's part
            pieces = released_again(session, policy_plan, cols, top, by_group, keys, pieces, again)
            profile = auto_bounds.assembled(pieces, cols, top, bool(by_group))
        extra = sum((e for _, e in again), Fraction(0)) / epsilon
        choice = auto_choice.choose(policy_plan, profile, cols, top, epsilon, size or 1, correct, s.additive, extra)
        choice = replace(choice, epsilon=spent + extra * epsilon, reused=any(k is not None for k in kept))
        rest = auto_bounds.release_epsilon(epsilon, choice.after)
        plan, cal, bounded = session._plans.derived(
            policy_plan,
            f"chosen {choice.options(QueryOptions())} {rest}",
            lambda: chosen(session, tree, options, choice, rest),
        )
        if _shares(cal.cost) != _shares(at_policy(session, policy_plan, at_rest, rest, options)):
            raise OperationalError(
                "the chosen limits changed the release's cost",
                sqlstate="XX000",
                hint="this is a bug in dpsql, please report it",
            )
        if lump:  # the split chosen from the profile within the part charged for it
            spent_after = [epsilon * x for x in choice.shares] + [e for _, e in again]
            check_split(charge.cost, auto_bounds.rest_part(epsilon), spent_after, cal.cost)
        correction = correction_of(session, policy_plan, choice, epsilon, choice.shares) if choice.shares else None
    result = answer(
        session,
        plan,
        bounded,
        cal,
        charge,
        noise_detail(plan, cal),
        pending,
        adjust=None if correction is None else partial(_corrected, plan, correction),
    )
    bounds = ChosenBounds(
        limits=choice.describe(),
        correction=None if correction is None else correction.describe(),
        target=None if not target else TargetChoice.of(target),
    )
    result.dp = replace(result.dp or AnswerRecord(), bounds=bounds)
    return result, charge


def units_answer(
    session: Session,
    stmt: Query,
    plan: Plan,
    policy_cal: Calibration,
    options: QueryOptions,
    groups: tuple | None,
    target: dict[str, Any] | None = None,
) -> tuple[Result, Charge]:
    """Units per group at the policy's limits, corrected for the groups max_groups cuts: one
    charge for the correction (auto_correction.groups_query) and the release at the rest."""
    s = session.settings
    epsilon = policy_cal.cost.epsilon
    g, far = policy_cal.groups_per_unit, max(len(groups or ()), policy_cal.groups_per_unit)
    share = auto_bounds.correction_share(plan, s.mechanism)
    at_rest = calibrated_at(session, plan, epsilon * (1 - share), options)
    parts = tuple(auto_bounds.laplace_part(epsilon * auto_bounds.UNITS_SHARE) for _ in range(2))
    pending = charging(
        session, Cost.of(parts + at_rest.cost.parts), stmt.sql, json.dumps(noise_detail(plan, at_rest), default=str)
    )
    charge = pending.admitted()
    with charged_work(
        session, pending, charge, "the query's cost stays charged: the groups its limits cut were being counted"
    ):
        row = correction_row(session, plan, f"groups {g} {far}", lambda: auto_correction.groups_query(plan, g, far))
        correction = auto_correction.noised_correction(
            row, g, far, epsilon, s.confidence, (auto_bounds.UNITS_SHARE, auto_bounds.UNITS_SHARE)
        )
        bounded = bounded_query(session, plan, None)
    result = answer(
        session,
        plan,
        bounded,
        at_rest,
        charge,
        noise_detail(plan, at_rest),
        pending,
        adjust=partial(_corrected, plan, correction),
    )
    bounds = ChosenBounds(
        max_groups=g, correction=correction.describe(), target=None if not target else TargetChoice.of(target)
    )
    result.dp = replace(result.dp or AnswerRecord(), bounds=bounds)
    return result, charge


def at_policy(session: Session, plan: Plan, at_rest: Calibration, rest: Fraction, options: QueryOptions) -> Cost:
    """The cost of the policy plan's release at `rest`: `at_rest`'s when it is its epsilon, else
    calibrated again (a corrected count's release gets the share chosen after the profile)."""
    return at_rest.cost if at_rest.cost.epsilon == rest else calibrated_at(session, plan, rest, options).cost


def calibrated_at(session: Session, plan: Plan, epsilon: Fraction, options: QueryOptions) -> Calibration:
    """The plan's release calibrated at `epsilon` (no δ) under the session's mechanism, with the
    query's measure weights: every part of an auto-bounded query is calibrated this way. Where
    every filter charged is basic, a mean whose clamp is chosen spends most of its share on its
    sum (`auto_mean.weights`: from the plan's shape, the same for the policy's plan and the
    chosen one)."""
    weights = measure_weights(plan, options.weights)
    if session.settings.additive:
        weights = auto_mean.weights(plan, weights, [c.expr for c in auto_bounds.columns(plan)])
    # partition selection's delta (undeclared keys), the query's own: as at the policy's limits
    delta = query_delta(session.settings, options) if plan.needs_selection else Fraction(0)
    return calibrate(plan, epsilon, delta, session.settings.mechanism, plan.literal_domain_size(), weights)


def correction_row(session: Session, plan: Plan, name: str, query) -> tuple:
    """A correction query's exact row (kept per analyst and data version like a profile's)."""
    sql, timeless = session._plans.derived(plan, name, lambda: prepared_sql(session, query()))
    rs = exact(session, sql, timeless)
    return next(zip(*rs.columns)) if rs.row_count else (0, 0)


def correction_of(
    session: Session, plan: Plan, choice: auto_bounds.Choice, epsilon: Fraction, shares: tuple[Fraction, ...]
) -> auto_correction.Correction:
    """The rows the chosen total bound keeps and cuts (auto_correction.Correction), noised: part of
    the query's charge, drawn once it is durable."""
    unit = auto_bounds.unit_count(plan)
    if unit is not None:  # a per-unit count: what its cap R keeps and cuts up to the reach
        (col,) = [c for c in auto_bounds.columns(plan) if c.expr == unit]
        cap, far = auto_bounds.unit_cap(plan), choice.reach or auto_bounds.unit_reach(plan)
        # the clamp chosen with the correction (a whole number of rows, at most the cap)
        u = next((int(hi) for expr, _, hi in choice.clips if expr == unit), cap)
        row = correction_row(
            session,
            plan,
            f"unit correction {u} {far}",
            lambda: auto_correction.unit_count_query(plan, col.j, cap, u, far),
        )
        return auto_correction.noised_correction(row, u, far, epsilon, session.settings.confidence, shares)
    c, far = choice.max_contributions or 1, choice.reach or auto_bounds.reach(plan)
    row = correction_row(session, plan, f"correction {c} {far}", lambda: auto_correction.correction_query(plan, c, far))
    return auto_correction.noised_correction(row, c, far, epsilon, session.settings.confidence, shares)


def chosen(
    session: Session, tree: exp.Query, options: QueryOptions, choice: auto_bounds.Choice, rest: Fraction
) -> tuple[Plan, Calibration, Bounded]:
    """The plan at the chosen limits, calibrated at the release's epsilon, and its bounded query
    (kept per policy plan and choice: a repeated query's choices repeat)."""
    s = session.settings
    plan = plan_query(tree, session.policy, session.engine.schema(), s.mechanism, choice.options(options))
    cal = calibrated_at(session, plan, rest, options)
    return plan, cal, built(session, plan, None, copies=False)


def released_profile(
    session: Session,
    plan: Plan,
    cols: tuple[auto_bounds.Column, ...],
    top: int,
    epsilon: Fraction,
    groups: int,
    keys: tuple | None,
    kept: list[auto_bounds.Piece | None],
    new: tuple[bool, ...],
) -> tuple[list[auto_bounds.Piece], Fraction]:
    """The query's profile, once charged: the histograms it releases (`new`) noised from the
    profile query's exact rows (kept per analyst and data version like a bounded result; the
    noise drawn afresh) and combined with those kept, the others as kept; each kept again.
    Returns the profile's histograms (`auto_bounds.pieces` order) and the epsilon its new ones spent."""
    by_group = bool(groups)
    shares = list(auto_bounds.epsilons(epsilon, cols, top, by_group, new))
    spent = sum(shares, Fraction(0))
    rows = profile_rows(session, plan, cols, top, by_group) if shares else []
    exact_hists = auto_bounds.histograms(rows, cols, top, groups)
    out = []
    for i, k, is_new in zip(auto_bounds.pieces(cols, top, by_group), kept, new):
        if is_new:
            e = shares.pop(0)
            k = auto_bounds.combined(k, auto_bounds.noisy(exact_hists[i], e), float(e))
        out.append(k)
    if keys is not None:
        for key, piece in zip(keys, out):
            session._plans.put_profile(key, piece)
    return out, spent


def released_again(
    session: Session,
    plan: Plan,
    cols: tuple[auto_bounds.Column, ...],
    top: int,
    groups: int,
    keys: tuple | None,
    pieces: list[auto_bounds.Piece],
    again: tuple[tuple[int, Fraction], ...],
) -> list[auto_bounds.Piece]:
    """A small population's profile (`auto_bounds.extra`): each value histogram noised again from
    the same exact rows at its epsilon in `again` (sensitivity MASS, as the first release) and
    combined with the piece released (`auto_bounds.combined`), each kept again. Part of the charge:
    the release's part, split after the profile (`guard.check_split`)."""
    by_group = bool(groups)
    exact_hists = auto_bounds.histograms(profile_rows(session, plan, cols, top, by_group), cols, top, groups)
    out = list(pieces)
    order = auto_bounds.pieces(cols, top, by_group)
    for i, e in again:
        at = order.index(i)
        out[at] = auto_bounds.combined(out[at], auto_bounds.noisy(exact_hists[i], e), float(e))
        if keys is not None:
            session._plans.put_profile(keys[at], out[at])
    return out


def profile_rows(
    session: Session, plan: Plan, cols: tuple[auto_bounds.Column, ...], top: int, by_group: bool
) -> list[tuple]:
    """The profile's exact rows; like a bounded result, kept per analyst and data version when
    the data alone determines them."""
    rs = exact(session, *profile_sql(session, plan, cols, top, by_group))
    return list(zip(*rs.columns)) if rs.row_count else []


def profile_sql(
    session: Session, plan: Plan, cols: tuple[auto_bounds.Column, ...], top: int, by_group: bool
) -> tuple[str, bool]:
    """The profile query's SQL and whether it is timeless, kept per policy plan."""
    return session._plans.derived(
        plan, f"profile {by_group}", lambda: prepared_sql(session, auto_bounds.profile_query(plan, cols, top, by_group))
    )


def prepared_sql(session: Session, tree: exp.Select) -> tuple[str, bool]:
    return session.engine.sql_of(tree, owned=True), tree.find(*CLOCK_FUNCTIONS) is None


def rows_of(session: Session, tree: exp.Select) -> list[tuple]:
    rs = session.engine.execute(session.engine.sql_of(tree, owned=True))
    return list(zip(*rs.columns)) if rs.row_count else []


def _corrected(plan: Plan, correction: auto_correction.Correction, noisy: NoisyTable) -> None:
    """Counts and sums scaled by the correction of truncation, in place (post-processing); over a
    per-unit count (`auto_bounds.unit_count`), its SUMs and AVGs, not the counts of its rows."""
    unit = auto_bounds.unit_count(plan)
    for i, est in enumerate(plan.estimates):
        if unit is None and est.func not in auto_bounds.CORRECTED + ("units",):
            continue
        if unit is not None and auto_bounds.summed(plan, i) != unit:
            continue
        noisy.estimates[i], noisy.intervals[i] = auto_correction.scaled(
            noisy.estimates[i], noisy.intervals[i], correction, noisy.estimate_types[i] == "BIGINT"
        )


def _shares(cost: Cost) -> list[tuple]:
    """What a cost charges, part by part (not the noise multipliers it reports, which are rounded)."""
    return [(p.kind, p.epsilon, p.delta, p.rho, p.count) for p in cost.parts]
