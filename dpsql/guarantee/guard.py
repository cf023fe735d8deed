"""The release guard: every noisy answer passes here, after the charge and before any noise is
drawn, and is refused unless it is what was charged for.

It is deliberately independent of the planner: it re-derives what it checks from the policy,
the plan's declared limits, the calibration and the engine's result, so a bug that changed a
plan after calibration, duplicated a group or lost a charge is caught here rather than
released. It checks that
- a durable charge receipt exists (`Charge`, returned by the ledger only after its transaction
  committed) and that it covers the calibration's cost;
- released key tuples are unique, and a declared domain yields at most its own size of groups;
- the result has exactly the cells the calibration noises (one noise per measure column);
- the plan's contribution limits are within the policy's for its tables; a spread's squares
  within the square of its clamp's reach from its centre (`_spread_squares`); over a per-unit
  subquery, each summed value's clamp within the bounds its derived table states (a clamp
  chosen per query, `dpsql.bounds = auto`, only narrows them);
- every noise scale is finite, and at least sensitivity/epsilon (Laplace) or has
  sensitivity^2 / (2 sigma^2) <= rho (Gaussian) for its share, the shares summing to at most
  the charged cost; a PLD-planned measure's scale is at least the charged multiplier times its
  sensitivity; a Gaussian part's (ε, δ) follows from its ρ by the zCDP conversion, or from
  its one measure's σ by the discrete Gaussian's exact curve;
- partition selection's odds pass their exact (ε/g, δ/g)-per-group check for the plan's g
  groups per unit (or its Laplace scale is at least g/ε and its threshold keeps a one-unit
  group's release within δ/g), at the ε and δ its share was charged.
A refusal releases nothing; the charge stays (it was recorded, and the failure may depend on data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

from sqlglot import exp

from ..accounting.cost import Cost, Part
from ..accounting.filters import amplified_epsilon
from ..accounting.gaussian_curve import discrete_gaussian_delta
from ..config import Policy
from ..engines.base import ResultSet
from ..errors import InternalError
from ..ledger import Charge
from ..sql.bounds import interval
from ..sql.scope import column_bounds
from .calibration import Calibration, one_coordinate
from .measures import Histogram, Sum
from .mechanisms import Noise, rho_for, selection_threshold
from .plan import Plan
from .selection import odds_private


class ReleaseRefused(InternalError):
    """A release that does not match its charge: nothing is released."""

    def __init__(self, why: str):
        super().__init__(
            f"release refused by the guard: {why}; nothing was released",
            hint="this is a bug in dpsql, please report it; the query's cost stays charged",
        )


def check(plan: Plan, cal: Calibration, rs: ResultSet, charge: Charge, policy: Policy) -> None:
    """Raise ReleaseRefused unless releasing `rs` noised by `cal` is what `charge` paid for."""
    _receipt(charge, cal)
    _cells(plan, cal, rs)
    _unique_keys(plan, rs)
    _limits(plan, policy)
    _scales(plan, cal, charge.cost)
    _selection(plan, cal, charge.cost)


@dataclass(frozen=True)
class SynopsisDraw:
    """One measurement of a synopsis: the plan's measure it noises, its share of the charge (an
    epsilon for Laplace noise, a rho for Gaussian), the noise, how many partitions of the cube
    it releases (1 for a marginal, a hierarchy's levels), and whether the cube's own cells are
    one of them (their L2 sensitivity is the plan's; any partition merging cells has the L1's)."""

    measure: int
    share: Fraction
    noise: Noise
    partitions: int
    cells: bool


def check_synopsis(
    plan: Plan, rs: ResultSet, charge: Charge, policy: Policy, draws: Sequence[SynopsisDraw], cells: int
) -> None:
    """Raise ReleaseRefused unless noising a synopsis's measurements of `rs` (the bounded cube)
    with `draws` is what `charge` paid for: a durable receipt; the cube's cells exactly its
    declared domain's, each key tuple once; the policy's limits; every Laplace scale at least the
    partitions times the measure's L1 sensitivity over the cube (which bounds every partition's)
    over its epsilon, and every Gaussian sigma at least what its rho allows for the
    measurement's L2 sensitivity; the epsilons within the charged Laplace parts, the rhos within
    the charged Gaussian parts, whose (epsilon, delta) must allow their rho."""
    if not isinstance(charge, Charge) or not isinstance(charge.id, int):
        raise ReleaseRefused("no durable charge receipt")
    if rs.row_count != cells:
        raise ReleaseRefused(f"{rs.row_count} cells where the synopsis's domain has {cells}")
    _unique_keys(plan, rs)
    _limits(plan, policy)
    spent = {"laplace": Fraction(0), "gaussian": Fraction(0)}
    for d in draws:
        m = plan.measures[d.measure]
        l1 = plan.bounding.l1(m, cells)
        scale = d.noise.scale
        if (
            l1 is None
            or not isinstance(d.partitions, int)
            or d.partitions < 1
            or d.noise.kind not in spent
            or not math.isfinite(scale)
            or d.share <= 0
        ):
            raise ReleaseRefused(f"{m.describe()}: a synopsis measurement that is not calibrated")
        if d.noise.kind == "laplace" and Fraction(scale) < Fraction(l1 * d.partitions) / d.share:
            raise ReleaseRefused(f"{m.describe()}: a measurement's Laplace scale below its L1 sensitivity / epsilon")
        if d.noise.kind == "gaussian":
            merged = d.partitions - (1 if d.cells else 0)
            l2_squared = (plan.bounding.l2_squared(m, cells) if d.cells else 0) + merged * l1 * l1
            if scale <= 0 or Fraction(l2_squared) / (2 * Fraction(scale) ** 2) > d.share:
                raise ReleaseRefused(f"{m.describe()}: a measurement's Gaussian sigma below what its rho allows")
        spent[d.noise.kind] += d.share
    parts = charge.cost.parts
    charged_eps = sum((p.epsilon for p in parts if p.kind == "laplace"), Fraction(0))
    charged_rho = sum((p.rho or Fraction(0) for p in parts if p.kind == "gaussian"), Fraction(0))
    if spent["laplace"] > charged_eps or spent["gaussian"] > charged_rho or charged_eps > charge.cost.epsilon:
        raise ReleaseRefused("the synopsis's noise shares exceed the charged cost")
    for p in parts:
        if p.kind == "gaussian" and (p.rho is None or p.rho > rho_for(p.epsilon, p.delta)):
            raise ReleaseRefused("a Gaussian part's rho beyond what its epsilon and delta allow")


def check_cached(cached: dict[str, Any], recorded: Callable[[int], bool]) -> None:
    """A cached answer is released again only if it came from a charged, recorded release of
    this analyst (`recorded(id)`: the ledger holds that charge with its release)."""
    receipt = (cached.get("dp") or {}).get("receipt")
    if not isinstance(receipt, int) or isinstance(receipt, bool) or not recorded(receipt):
        raise ReleaseRefused("a cached answer without the receipt of its charge")


def check_split(cost: Cost, part: Part, spent: Sequence[Fraction], release: Cost) -> None:
    """Parts chosen after the charge, from released values (a corrected count's correction and
    release, split after its profile: auto_bounds.adapted; a small population's value histograms
    released again and the release: auto_bounds.extra), are what one charged part paid for:
    `cost` holds `part` (a Laplace part without δ), and the chosen parts' epsilons `spent` (each
    positive) and the release's Laplace parts together sum to at most its epsilon. Every filter's
    statistic is superadditive in ε, so parts summing to at most a part's ε cost at most it."""
    if part.kind != "laplace" or part.delta or part not in cost.parts:
        raise ReleaseRefused("no charged Laplace part for the parts chosen after the charge")
    if any(p.kind != "laplace" or p.delta for p in release.parts):
        raise ReleaseRefused("a release split after the charge with other than Laplace parts")
    if any(e <= 0 for e in spent) or sum(spent, Fraction(0)) + release.epsilon > part.epsilon:
        raise ReleaseRefused("the parts chosen after the charge exceed the part charged for them")


def _receipt(charge: Charge, cal: Calibration) -> None:
    if not isinstance(charge, Charge) or not isinstance(charge.id, int):
        raise ReleaseRefused("no durable charge receipt")
    if cal.cost.epsilon and not (charge.cost.epsilon >= cal.cost.epsilon and charge.cost.delta >= cal.cost.delta):
        raise ReleaseRefused("the charge does not cover the calibration's cost")


def _cells(plan: Plan, cal: Calibration, rs: ResultSet) -> None:
    if len(cal.measures) != len(plan.measures):
        raise ReleaseRefused(f"{len(plan.measures)} measures but {len(cal.measures)} calibrated")
    expected = len(plan.keys) + 1 + sum(m.width for m in plan.measures)
    if len(rs.names) != expected:
        raise ReleaseRefused(f"{len(rs.names)} result columns where {expected} are noised")
    if plan.needs_selection and cal.selection is None:
        raise ReleaseRefused("undeclared group keys without partition selection")
    size = plan.literal_domain_size()
    if plan.keys and plan.declared and size is not None and rs.row_count > size:
        raise ReleaseRefused(f"{rs.row_count} groups from a declared domain of {size}")
    if not plan.keys and rs.row_count > 1:
        raise ReleaseRefused("several rows for an ungrouped query")


def _unique_keys(plan: Plan, rs: ResultSet) -> None:
    n = len(plan.keys)
    if not n or not rs.row_count:
        return
    keys = rs.columns[0] if n == 1 else list(zip(*rs.columns[:n]))  # one column: no tuples to build
    if len(set(keys)) != len(keys):
        raise ReleaseRefused("a group key tuple appears more than once")


def _limits(plan: Plan, policy: Policy) -> None:
    found = [policy.table(s.table.name) for s in plan.relation.private_sources if s.derived is None]
    private = [t for t in found if t is not None]
    _derived_clamps(plan)
    _spread_squares(plan)
    if not private:
        return  # a per-unit subquery's derived table: its limits are the base tables' (sql/derived.py)
    if plan.max_groups > max(t.max_groups for t in private) or plan.max_rows > max(t.max_rows for t in private):
        raise ReleaseRefused("contribution limits above the policy's")
    if plan.total_bound:
        allowed = max((t.max_contributions or t.max_groups * t.max_rows) for t in private)
        if plan.total_rows > allowed:
            raise ReleaseRefused("a total contribution bound above the policy's")


def _derived_clamps(plan: Plan) -> None:
    """Over a per-unit subquery (one row per unit, its columns bounded by sql/derived.py from the
    policy), every summed or binned value is clamped within the bounds the derived table states
    for what it reads: a clamp chosen per query may narrow them, never widen them."""
    sources = plan.relation.sources
    derived = {s.alias for s in sources if s.derived is not None}
    if not derived:
        return
    bounds = column_bounds(sources)
    for m in plan.measures:
        if not isinstance(m, (Sum, Histogram)) or m.value is None or getattr(m, "categories", None) is not None:
            continue
        if not any(c.table in derived for c in m.value.find_all(exp.Column)):
            continue
        allowed = interval(m.value, bounds)
        if not (allowed.lo <= m.lower and m.upper <= allowed.hi):
            raise ReleaseRefused(f"{m.describe()} clamped beyond its per-unit subquery's bounds")


def _spread_squares(plan: Plan) -> None:
    """A VAR/STDDEV's sum of squares about a centre (the middle of its clamp, which may itself be
    chosen per query): the centre lies within the clamp its sum states, and the squares'
    range is at most [0, R^2], R the centre's distance to the farther end of that clamp, so
    never more than the square of the clamp's width, itself within the policy's bounds."""
    bounds = None
    for est in plan.estimates:
        if est.squares is None or est.total is None:
            continue
        total, squares = plan.measures[est.total], plan.measures[est.squares]
        bounds = bounds or column_bounds(plan.relation.sources)
        allowed = interval(total.read(), bounds)
        if not (allowed.lo <= total.lower and total.upper <= allowed.hi):
            raise ReleaseRefused(f"{total.describe()} clamped beyond its column's bounds")
        reach = max(total.upper - total.centre, total.centre - total.lower)
        if not total.lower <= total.centre <= total.upper:
            raise ReleaseRefused(f"{total.describe()} centred outside its clamp")
        if squares.lower < 0 or squares.upper > reach * reach or squares.centre > squares.upper:
            raise ReleaseRefused(f"{squares.describe()} beyond the squares of its clamp's reach")


def _scales(plan: Plan, cal: Calibration, cost: Cost) -> None:
    laplace_eps, gauss_rho = Fraction(0), Fraction(0)
    multipliers = [p.noise_multiplier for p in cost.parts if p.kind == "approx"]
    planned = [m for m in multipliers if m is not None] if None not in multipliers else []  # any missing: refused
    for m, mn in zip(plan.measures, cal.measures):
        scale = mn.noise.scale
        sensitive = m.row_bound > 0
        if not math.isfinite(scale) or scale < 0 or (sensitive and scale == 0):
            raise ReleaseRefused(f"noise scale {scale!r} for {m.describe()}")
        if not sensitive:
            continue
        l1 = plan.bounding.l1(m, plan.literal_domain_size())
        l2_squared = plan.bounding.l2_squared(m, plan.literal_domain_size())
        if (mn.l1 is not None and l1 is not None and mn.l1 < l1) or mn.l2_squared < l2_squared:
            raise ReleaseRefused(f"{m.describe()} calibrated below the plan's sensitivity")
        if mn.epsilon is not None:
            if mn.noise.kind != "laplace" or mn.l1 is None or Fraction(scale) < Fraction(mn.l1) / mn.epsilon:
                raise ReleaseRefused(f"{m.describe()}: Laplace scale below L1 sensitivity / epsilon")
            laplace_eps += mn.epsilon
        elif mn.rho is not None:
            if mn.noise.kind != "gaussian" or Fraction(mn.l2_squared) / (2 * Fraction(scale) ** 2) > mn.rho:
                raise ReleaseRefused(f"{m.describe()}: Gaussian sigma below what its rho allows")
            gauss_rho += mn.rho
        else:  # PLD-planned: the charged multiplier times the sensitivity it was planned at
            need = plan.bounding.planned(m, mn.noise.kind, plan.literal_domain_size())
            if not planned or Fraction(scale) < Fraction(min(planned)) / Fraction(cal.planned_weight) * need:
                raise ReleaseRefused(f"{m.describe()}: noise scale below the planned multiplier")
    if cal.selection is not None:
        laplace_eps += cal.selection.epsilon
    charged_eps = sum((p.epsilon for p in cost.parts if p.kind in ("laplace", "selection")), Fraction(0))
    charged_rho = sum((p.rho or 0 for p in cost.parts if p.kind == "gaussian"), Fraction(0))
    sampled = [p for p in cost.parts if p.kind == "sampled"]
    if sampled:  # the whole query ran on a Poisson sample: its shares are charged amplified
        spent = amplified_epsilon(laplace_eps, Fraction(repr(sampled[0].sampling)))
        if gauss_rho or spent > sampled[0].epsilon:
            raise ReleaseRefused("the sampled shares exceed the amplified charge")
    elif laplace_eps > charged_eps or gauss_rho > charged_rho:
        raise ReleaseRefused("the noise shares exceed the charged cost")
    _gaussian_pairs(cal, cost)


def _gaussian_pairs(cal: Calibration, cost: Cost) -> None:
    """A Gaussian part's charged (ε, δ) must follow from its noise: through zCDP (its ρ within
    what the optimal conversion allows at (ε, δ)), or, for one one-coordinate measure, by the
    discrete Gaussian's exact curve at that measure's σ."""
    m = one_coordinate([mn for mn in cal.measures if mn.noise.kind == "gaussian" and mn.rho is not None])
    for p in cost.parts:
        if p.kind != "gaussian" or p.rho is None or p.rho <= rho_for(p.epsilon, p.delta):
            continue
        if m is None or discrete_gaussian_delta(float(p.epsilon), m.noise.scale, m.l1) > float(p.delta):
            raise ReleaseRefused("a Gaussian part charged less (epsilon, delta) than its noise allows")


def _selection(plan: Plan, cal: Calibration, cost: Cost) -> None:
    """Partition selection is what its (ε, δ) share pays for, at the plan's groups per unit."""
    sel = cal.selection
    if sel is None:
        return
    if sel.epsilon <= 0 or sel.delta <= 0:
        raise ReleaseRefused("partition selection without a positive (epsilon, delta)")
    if not any(p.kind == "sampled" for p in cost.parts) and sel.delta > cost.delta:
        raise ReleaseRefused("partition selection's delta exceeds the charged delta")
    g = plan.groups_per_unit(plan.literal_domain_size())
    if sel.odds is not None:
        odds = sel.odds
        if odds.epsilon * g > sel.epsilon or odds.delta * g > sel.delta or sel.threshold != odds.certain:
            raise ReleaseRefused("partition selection's odds are laxer than its share for the groups per unit")
        if not odds_private(odds):
            raise ReleaseRefused("partition selection's odds fail their exact privacy check")
        return
    scale = sel.noise.scale
    if sel.noise.kind != "laplace" or not math.isfinite(scale) or Fraction(scale) < Fraction(g) / sel.epsilon:
        raise ReleaseRefused("partition selection's Laplace scale is below groups per unit / epsilon")
    if sel.threshold < selection_threshold(scale, sel.delta / g):
        raise ReleaseRefused("partition selection's threshold is below what its delta allows")
