"""From a plan and a query budget to noise scales, partition selection's odds and a cost (pure).

The query's ε (and δ) is split across its measures, equally unless the analyst weights the
select items, plus a share for partition selection when group keys have no declared domain.
Laplace measures get their share of ε each; Gaussian measures split, in the same proportions,
the ρ that the Gaussian part's (ε, δ) allows under the optimal conversion. Where the charge is
an (ε, δ) pair (`exact_curve`) and the Gaussian part is one integer coordinate per unit, its σ
comes from the discrete Gaussian's exact curve instead (`accounting/gaussian_curve.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from ..accounting.cost import Cost, Part
from ..accounting.filters import amplified_epsilon
from ..accounting.gaussian_curve import sigma_for
from ..errors import ProgrammingError, invalid_parameter
from .mechanisms import MAX_SCALE, Noise, gaussian_sigma, laplace_scale, rho_for, selection_threshold
from .plan import Estimate, Plan
from .selection import ReleaseOdds, release_odds


@dataclass(frozen=True)
class MeasureNoise:
    noise: Noise
    l1: int | None  # L1 sensitivity in the measure's integer units (None: not bounded, L2 clipping)
    l2_squared: int
    epsilon: Fraction | None
    rho: Fraction | None


@dataclass(frozen=True)
class Selection:
    """Partition selection at (epsilon, delta) for the whole query. With `odds` (the usual
    case, selection.py) a group is released with a probability that grows with its unit count,
    always from `threshold` units on, and `noise` is unused (scale 0); without (an epsilon per
    group too small for a table of odds), when its unit count plus discrete Laplace `noise`
    reaches `threshold`."""

    noise: Noise
    threshold: int
    epsilon: Fraction
    delta: Fraction
    odds: ReleaseOdds | None = None


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
        raise invalid_parameter(
            f"{len(weights)} weights for {len(items)} aggregate select items",
            hint="give at most one weight per aggregate in the select list, in order",
        )
    out = [Fraction(0)] * len(plan.measures)
    for w, ests in zip(list(weights) + [1.0] * len(items), items):
        for e in ests:
            for m in measures_of(plan.estimates[e]):
                out[m] = max(out[m], Fraction(repr(float(w))))
    return [w or Fraction(1) for w in out]


def measures_of(est: Estimate) -> list[int]:
    return [i for i in (est.count, est.total, est.squares) if i is not None]


def calibrate(
    plan: Plan,
    epsilon: Fraction,
    delta: Fraction,
    mechanism: str,
    domain_size: int | None = None,
    weights: Sequence[Fraction] | None = None,
    exact_curve: bool = False,
) -> Calibration:
    """Split (epsilon, delta) over the plan's measures in proportion to `weights` (equal by
    default), with one equal share for partition selection when it is needed. `exact_curve`:
    the filters charged compose (ε, δ) pairs, so a Gaussian part that fits the discrete
    Gaussian's one-coordinate curve is calibrated by it."""
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
        odds = release_odds(sel_eps / groups, sel_delta / groups)
        if odds is not None:
            selection = Selection(Noise("laplace", 0.0), odds.certain, sel_eps, sel_delta, odds)
        elif not math.isfinite(scale) or scale > MAX_SCALE:
            raise ProgrammingError(
                f"grouping by {', '.join(k.name for k in plan.keys if not k.declared)}: the noise partition selection "
                f"needs at this epsilon (scale {scale:.3g}) is too large to be useful",
                sqlstate="22003",
                hint="raise epsilon (SET dpsql.epsilon = 0.1), or declare the keys in the policy; nothing was charged",
            )
        else:
            selection = Selection(
                Noise("laplace", scale), selection_threshold(scale, sel_delta / groups), sel_eps, sel_delta
            )
        parts.append(Part("selection", sel_eps, sel_delta, rho=sel_eps * sel_eps / 2, noise_multiplier=scale / groups))
        delta_used += sel_delta
    measures = []
    if mechanism == "laplace":
        for m, w in zip(plan.measures, weights):
            eps = epsilon * w / whole
            l1 = plan.bounding.l1(m, domain_size)
            assert l1 is not None  # only L2 clipping (Gaussian) leaves L1 unbounded
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
            raise invalid_parameter(
                "epsilon and delta are too small for Gaussian noise",
                hint="raise dpsql.epsilon or dpsql.delta, or SET dpsql.mechanism = 'laplace'",
            )
        for m, w in zip(plan.measures, weights):
            rho = rho_total * w / sum(weights)
            l2_squared = plan.bounding.l2_squared(m, domain_size)
            noise = Noise("gaussian", gaussian_sigma(l2_squared, rho))
            measures.append(MeasureNoise(noise, plan.bounding.l1(m, domain_size), l2_squared, None, rho))
        if exact_curve:
            measures, rho_total = _by_curve(measures, gauss_eps, gauss_delta, rho_total)
        # Gaussian measures compose into one Gaussian mechanism of the summed rho.
        parts.append(
            Part(
                "gaussian", gauss_eps, gauss_delta, rho=rho_total, noise_multiplier=1 / math.sqrt(2 * float(rho_total))
            )
        )
    cost = Cost.of(parts)
    if plan.sample_rate is not None:
        cost = sampled_cost(cost, Fraction(repr(plan.sample_rate)))
    check_scales(plan, measures)
    return Calibration(measures, selection, cost, groups)


def _by_curve(
    measures: list[MeasureNoise], epsilon: Fraction, delta: Fraction, rho: Fraction
) -> tuple[list[MeasureNoise], Fraction]:
    """The Gaussian part recalibrated by the discrete Gaussian's exact (ε, δ) curve when it is
    one measure whose unit moves one coordinate (L2² = L1², so the release is one-dimensional
    for any neighbour), else unchanged. The part's ρ is then the true Δ²/2σ² (larger than the
    conversion's), which the (ε, δ) filters never read but the audit log keeps honest."""
    m = one_coordinate(measures)
    if m is None:
        return measures, rho
    sigma = sigma_for(epsilon, delta, m.l1, m.noise.scale)
    if sigma >= m.noise.scale:
        return measures, rho
    true_rho = Fraction(m.l2_squared) / (2 * Fraction(sigma) ** 2)
    return [MeasureNoise(Noise("gaussian", sigma), m.l1, m.l2_squared, None, true_rho)], true_rho


def one_coordinate(measures: Sequence[MeasureNoise]) -> MeasureNoise | None:
    """The Gaussian part's only measure when a unit moves one integer coordinate of it (L2² =
    L1²): where the discrete Gaussian's one-coordinate curve applies; None otherwise."""
    if len(measures) == 1 and measures[0].l1 is not None and measures[0].l1 ** 2 == measures[0].l2_squared:
        return measures[0]
    return None


MAX_VALUE = float(2**53)  # largest |value| a measure may take: beyond it doubles lose integers


def check_scales(plan: Plan, measures: Sequence[MeasureNoise]) -> None:
    """Refuse, before anything is charged, noise that could not be drawn or would drown the
    answer: a non-finite scale, or one beyond what 64-bit integer sampling holds."""
    for m, mn in zip(plan.measures, measures):
        scale = mn.noise.scale
        span = max(abs(m.lower), abs(m.upper))
        if span > MAX_VALUE:
            raise ProgrammingError(
                f"{m.describe()}: its values may reach {span:.3g}, beyond the ±2^53 that sums keep exactly",
                sqlstate="22003",
                hint="declare tighter bounds for the value, or clamp it in the query with "
                "LEAST(GREATEST(x, low), high); nothing was charged",
            )
        if not math.isfinite(scale * m.unit_scale) or scale > MAX_SCALE:
            raise ProgrammingError(
                f"{m.describe()}: the noise this needs (scale {scale * m.unit_scale:.3g}) is too large to be useful",
                sqlstate="22003",
                hint="raise epsilon (SET dpsql.epsilon = 0.1), lower the weight of this query in its "
                "batch, or declare tighter bounds for the value; nothing was charged",
            )


def sampled_cost(cost: Cost, rate: Fraction) -> Cost:
    """The whole query ran on a Poisson sample of units: (ε, δ) -> (ln(1 + q(e^ε - 1)), qδ)."""
    eps = amplified_epsilon(cost.epsilon, rate)
    delta = cost.delta * rate
    return Cost.of([Part("sampled", eps, delta, rho=eps * eps / 2 if not delta else None, sampling=float(rate))])


def _needs_delta(plan: Plan) -> ProgrammingError:
    undeclared = [k.name for k in plan.keys if not k.declared]
    if undeclared:
        return invalid_parameter(
            f"grouping by {', '.join(undeclared)} needs delta > 0: the groups that exist are private, "
            "so they are released by partition selection",
            hint=f"declare the keys in the policy (columns.{undeclared[0]} = {{ keys = [...] }}), "
            "or SET dpsql.delta = 1e-8",
        )
    return invalid_parameter(
        "Gaussian noise needs delta > 0", hint="SET dpsql.delta = 1e-8, or SET dpsql.mechanism = 'laplace'"
    )
