"""From a plan and a query budget to noise scales, a selection threshold and a cost (pure).

The query's ε (and δ) is split across its measures, equally unless the analyst weights the
select items, plus a share for partition selection when group keys have no declared domain.
Laplace measures get their share of ε each; Gaussian measures split, in the same proportions,
the ρ that the Gaussian part's (ε, δ) allows under the optimal conversion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from .accounting.cost import Cost, Part
from .accounting.filters import amplified_epsilon
from .accounting.planner import Planned, plan
from .errors import ProgrammingError, invalid_parameter
from .families import family
from .mechanisms import (
    MAX_SCALE,
    Noise,
    gaussian_sigma,
    laplace_scale,
    rho_for,
    selection_threshold,
)
from .sql.analyze import Estimate, Plan
from .sql.measures import Histogram, Measure


@dataclass(frozen=True)
class MeasureNoise:
    noise: Noise
    l1: int | None  # L1 sensitivity in the measure's integer units (None: not bounded, L2 clipping)
    l2_squared: int
    epsilon: Fraction | None
    rho: Fraction | None


@dataclass(frozen=True)
class Selection:
    noise: Noise
    threshold: int
    epsilon: Fraction
    delta: Fraction


@dataclass(frozen=True)
class Calibration:
    measures: list[MeasureNoise]
    selection: Selection | None
    cost: Cost
    groups_per_unit: int
    planned_weight: float = 1.0  # a PLD-planned plan's weight in its batch (noise = multiplier / weight)


def needs_delta(plan: Plan, mechanism: str) -> bool:
    return mechanism == "gaussian" or plan.needs_selection


def measure_weights(plan: Plan, weights: Sequence[float] | None) -> list[Fraction]:
    """Each measure's share of the query's epsilon, from the analyst's weights, one per select
    item that aggregates (group keys are skipped), in order: a
    measure shared by several items (AVG and SUM of one column share a noisy sum) takes the
    largest of their weights; a measure used only by HAVING or ORDER BY gets 1."""
    if weights is None:
        return [Fraction(1)] * len(plan.measures)
    items = [ests for ests in plan.item_estimates if ests]  # group keys take no weight
    if len(weights) > len(items):
        raise invalid_parameter(f"{len(weights)} weights for {len(items)} aggregate select items",
                                hint="give at most one weight per aggregate in the select list, in order")
    out = [Fraction(0)] * len(plan.measures)
    for w, ests in zip(list(weights) + [1.0] * len(items), items):
        for e in ests:
            for m in measures_of(plan.estimates[e]):
                out[m] = max(out[m], Fraction(repr(float(w))))
    return [w or Fraction(1) for w in out]


def measures_of(est: Estimate) -> list[int]:
    return [i for i in (est.count, est.total, est.squares) if i is not None]


def calibrate(plan: Plan, epsilon: Fraction, delta: Fraction, mechanism: str,
              domain_size: int | None = None, weights: Sequence[Fraction] | None = None) -> Calibration:
    """Split (epsilon, delta) over the plan's measures in proportion to `weights` (equal by
    default), with one equal share for partition selection when it is needed."""
    if epsilon <= 0:
        raise invalid_parameter("epsilon must be positive", hint="SET dpsql.epsilon = 0.1")
    groups = plan.groups_per_unit(domain_size)
    k = len(plan.measures)
    weights = list(weights) if weights is not None else [Fraction(1)] * k
    whole = sum(weights) + (1 if plan.needs_selection else 0)
    parts: list[Part] = []
    selection = None
    delta_used = Fraction(0)
    if plan.needs_selection:
        if delta <= 0:
            raise _needs_delta(plan)
        sel_eps = epsilon / whole
        sel_delta = delta if mechanism == "laplace" else delta / 2
        scale = laplace_scale(groups, sel_eps)
        selection = Selection(Noise("laplace", scale), selection_threshold(scale, sel_delta / groups), sel_eps, sel_delta)
        parts.append(Part("selection", sel_eps, sel_delta, rho=sel_eps * sel_eps / 2,
                          noise_multiplier=scale / groups))
        delta_used += sel_delta
    measures = []
    if mechanism == "laplace":
        for m, w in zip(plan.measures, weights):
            eps = epsilon * w / whole
            l1 = plan.bounding.l1(m, domain_size)
            noise = Noise("laplace", laplace_scale(l1, eps))
            measures.append(MeasureNoise(noise, l1, plan.bounding.l2_squared(m, domain_size), eps, None))
            parts.append(Part("laplace", eps, rho=eps * eps / 2, noise_multiplier=noise.scale / l1 if l1 else None))
    else:
        gauss_eps = epsilon * sum(weights) / whole
        gauss_delta = delta - delta_used
        if gauss_delta <= 0:
            raise _needs_delta(plan)
        rho_total = rho_for(gauss_eps, gauss_delta)
        if rho_total <= 0:
            raise invalid_parameter("epsilon and delta are too small for Gaussian noise",
                                    hint="raise dpsql.epsilon or dpsql.delta, or SET dpsql.mechanism = 'laplace'")
        for m, w in zip(plan.measures, weights):
            rho = rho_total * w / sum(weights)
            l2_squared = plan.bounding.l2_squared(m, domain_size)
            noise = Noise("gaussian", gaussian_sigma(l2_squared, rho))
            measures.append(MeasureNoise(noise, plan.bounding.l1(m, domain_size), l2_squared, None, rho))
        # Gaussian measures compose into one Gaussian mechanism of the summed rho.
        parts.append(Part("gaussian", gauss_eps, gauss_delta, rho=rho_total,
                          noise_multiplier=1 / math.sqrt(2 * float(rho_total))))
    cost = Cost.of(parts)
    if plan.sample_rate is not None:
        cost = sampled_cost(cost, Fraction(repr(plan.sample_rate)))
    _check_scales(plan, measures)
    return Calibration(measures, selection, cost, groups)


MAX_VALUE = float(2**53)  # largest |value| a measure may take: beyond it doubles lose integers


def _check_scales(plan: Plan, measures: Sequence[MeasureNoise]) -> None:
    """Refuse, before anything is charged, noise that could not be drawn or would drown the
    answer: a non-finite scale, or one beyond what 64-bit integer sampling holds."""
    for m, mn in zip(plan.measures, measures):
        scale = mn.noise.scale
        span = max(abs(m.lower), abs(m.upper))
        if span > MAX_VALUE or not math.isfinite(scale * m.unit_scale):
            raise ProgrammingError(
                f"{m.describe()}: its values may reach {span:.3g}, beyond the ±2^53 that sums keep exactly",
                sqlstate="22003", hint="declare tighter bounds for the value, or clamp it in the query with "
                                       "LEAST(GREATEST(x, low), high); nothing was charged")
        if not math.isfinite(scale) or scale > MAX_SCALE:
            raise ProgrammingError(
                f"{m.describe()}: the noise this needs (scale {scale * m.unit_scale:.3g}) is too large to be useful",
                sqlstate="22003", hint="declare tighter bounds for the value, or clamp it in the query with "
                                       "LEAST(GREATEST(x, low), high); nothing was charged")


def epsilon_for_target(plan: Plan, target: float, delta: Fraction, mechanism: str, domain_size: int | None,
                       weights: Sequence[Fraction] | None, confidence: float,
                       ceiling: Fraction = Fraction(100)) -> Fraction:
    """The smallest epsilon (3 significant digits, rounded up) at which every COUNT and SUM of
    the plan is within ±target of its pre-noise value at the confidence level. Pure: it only
    calibrates, so choosing it reveals nothing and costs nothing."""
    targeted = sorted({m for e in plan.estimates if family(e).targetable for m in measures_of(e)})
    if not targeted:
        raise invalid_parameter("dpsql.target_error applies to COUNT and SUM",
                                hint="SET dpsql.target_error = 0 to turn it off, and set dpsql.epsilon instead")

    def meets(eps: Fraction) -> bool:
        cal = calibrate(plan, eps, delta, mechanism, domain_size, weights)
        return all(cal.measures[m].noise.half_width(confidence) * plan.measures[m].unit_scale <= target
                   for m in targeted)

    if not meets(ceiling):
        raise invalid_parameter(f"no epsilon up to {ceiling} gives a {confidence:.0%} error within ±{target:g}",
                                hint="raise dpsql.target_error, or group by fewer keys")
    lo, hi = 1e-9, float(ceiling)
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if meets(Fraction(mid)):
            hi = mid
        else:
            lo = mid
    digits = 2 - math.floor(math.log10(hi))
    eps = Fraction(math.ceil(hi * 10**digits)) / 10**digits if digits >= 0 else Fraction(math.ceil(hi / 10**-digits) * 10**-digits)
    while not meets(eps):  # rounding up keeps it met; guard float edge cases all the same
        eps += Fraction(1, 10**max(digits, 0))
    return eps


def sampled_cost(cost: Cost, rate: Fraction) -> Cost:
    """The whole query ran on a Poisson sample of units: (ε, δ) -> (ln(1 + q(e^ε - 1)), qδ)."""
    eps = amplified_epsilon(cost.epsilon, rate)
    delta = cost.delta * rate
    return Cost.of([Part("sampled", eps, delta, rho=eps * eps / 2 if not delta else None, sampling=float(rate))])


def _needs_delta(plan: Plan):
    undeclared = [k.name for k in plan.keys if not k.declared]
    if undeclared:
        return invalid_parameter(
            f"grouping by {', '.join(undeclared)} needs delta > 0: the groups that exist are private, "
            "so they are released by partition selection",
            hint=f"declare the keys in the policy (columns.{undeclared[0]} = {{ keys = [...] }}), "
                 "or SET dpsql.delta = 1e-8")
    return invalid_parameter("Gaussian noise needs delta > 0", hint="SET dpsql.delta = 1e-8, or SET dpsql.mechanism = 'laplace'")


def planned_sensitivity(plan: Plan, m: Measure, mechanism: str, domain_size: int | None) -> int:
    """The sensitivity a PLD-planned measure's noise is scaled to, per planned mechanism: its
    L2 (Gaussian: one mechanism); for Laplace its L1 over all groups under a total bound (one
    mechanism: the whole vector), else one group's bound (one mechanism per group)."""
    return plan.bounding.planned(m, mechanism, domain_size)


def planned_mechanisms(plan: Plan, mechanism: str, domain_size: int | None, weight: float = 1.0) -> list[Planned]:
    """A plan's measures as PLD-planned mechanisms. A Laplace measure over G groups bounded per
    group moves each of its G independent coordinates by at most max_rows * R: G one-dimensional
    mechanisms of that sensitivity dominate it; under a total bound the whole vector is one
    mechanism of its L1. A Gaussian measure is one mechanism at its L2."""
    if plan.sample_rate is not None:
        raise invalid_parameter("TABLESAMPLE queries cannot be PLD-planned", hint="run the sampled query on its own")
    if plan.needs_selection:
        raise invalid_parameter("partition selection cannot be PLD-planned",
                                hint="declare the group keys in the policy, or run this query on its own")
    if any(isinstance(m, Histogram) for m in plan.measures):
        raise invalid_parameter("quantiles cannot be PLD-planned yet",
                                hint="SET dpsql.planner = 'filter' for this query, or send it outside the batch")
    per_measure = plan.bounding.planned_copies(mechanism, domain_size)
    return [Planned(mechanism, weight) for m in plan.measures if m.row_bound for _ in range(per_measure)]


def calibrate_planned(plan: Plan, mechanism: str, multiplier: float, domain_size: int | None,
                      weight: float = 1.0) -> Calibration:
    """Noise for a plan's measures at a common PLD-planned multiplier (scale: multiplier / weight
    times planned_sensitivity, rounded up); the cost is charged by the caller, once for the
    whole batch."""
    measures = []
    for m in plan.measures:
        sensitivity = planned_sensitivity(plan, m, mechanism, domain_size)
        scale = math.nextafter(multiplier / weight * sensitivity, math.inf) if sensitivity else 0.0
        measures.append(MeasureNoise(Noise(mechanism, scale), plan.bounding.l1(m, domain_size),
                                     plan.bounding.l2_squared(m, domain_size), None, None))
    _check_scales(plan, measures)
    return Calibration(measures, None, Cost(Fraction(0)), plan.groups_per_unit(domain_size), weight)


def batch_cost(epsilon: Fraction, delta: Fraction, multiplier: float, n_mechanisms: int) -> Cost:
    """A PLD-planned batch is one (ε, δ) release."""
    return Cost.of([Part("approx", epsilon, delta, noise_multiplier=multiplier, count=n_mechanisms)])


def pld_multiplier(mechanisms: list[Planned], epsilon: Fraction, delta: Fraction) -> float:
    """PLD-plan at a float target no larger than the exact ε that will be charged."""
    target = float(epsilon)
    if Fraction(target) > epsilon:
        target = math.nextafter(target, 0.0)
    try:
        return plan(mechanisms, target, float(delta))
    except ValueError as e:
        raise invalid_parameter(str(e)) from None
