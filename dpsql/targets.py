"""Calibration toward other targets than one query's (ε, δ): a batch's common PLD-planned noise
multiplier (charged once for the whole batch, `accounting/pld.py`), and the smallest ε that
meets an error target (dpsql.target_error). Both only calibrate, so they reveal nothing."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Sequence

from .accounting.cost import Cost, Part
from .accounting.pld import BatchMember, joint_multiplier
from .errors import invalid_parameter
from .guarantee.calibration import Calibration, MeasureNoise, calibrate, check_scales, measures_of
from .guarantee.families import family
from .guarantee.measures import Histogram
from .guarantee.mechanisms import Noise
from .guarantee.plan import Plan


def epsilon_for_target(
    plan: Plan,
    target: float,
    delta: Fraction,
    mechanism: str,
    domain_size: int | None,
    weights: Sequence[Fraction] | None,
    confidence: float,
    ceiling: Fraction = Fraction(100),
    exact_curve: bool = False,
) -> Fraction:
    """The smallest epsilon (3 significant digits, rounded up) at which every COUNT and SUM of
    the plan is within ±target of its pre-noise value at the confidence level. Pure: it only
    calibrates, so choosing it reveals nothing and costs nothing."""
    targeted = sorted({m for e in plan.estimates if family(e).targetable for m in measures_of(e)})
    if not targeted:
        raise invalid_parameter(
            "dpsql.target_error applies to COUNT and SUM",
            hint="SET dpsql.target_error = 0 to turn it off, and set dpsql.epsilon instead",
        )

    def meets(eps: Fraction) -> bool:
        cal = calibrate(plan, eps, delta, mechanism, domain_size, weights, exact_curve)
        return all(
            cal.measures[m].noise.half_width(confidence) * plan.measures[m].unit_scale <= target for m in targeted
        )

    if not meets(ceiling):
        raise invalid_parameter(
            f"no epsilon up to {ceiling} gives a {confidence:.0%} error within ±{target:g}",
            hint="raise dpsql.target_error, or group by fewer keys",
        )
    return smallest_meeting(meets, ceiling)


def smallest_meeting(meets: Callable[[Fraction], bool], ceiling: Fraction, steps: int = 80) -> Fraction:
    """The smallest epsilon up to `ceiling` (which meets) at which `meets`, found by bisection on
    a log scale and rounded up to 3 significant digits (still meeting)."""
    lo, hi = 1e-9, float(ceiling)
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if meets(Fraction(mid)):
            hi = mid
        else:
            lo = mid
    eps = round_up(hi)
    digits = 2 - math.floor(math.log10(hi))
    while eps < ceiling and not meets(eps):  # rounding up keeps it met; guard float edge cases all the same
        eps += Fraction(1, 10 ** max(digits, 0))
    return min(eps, ceiling)


def round_up(x: float) -> Fraction:
    """`x` rounded up to 3 significant digits, exactly."""
    digits = 2 - math.floor(math.log10(x))
    if digits >= 0:
        return Fraction(math.ceil(Fraction(x) * 10**digits)) / 10**digits
    return Fraction(math.ceil(Fraction(x) / 10**-digits) * 10**-digits)


def batch_members(plan: Plan, mechanism: str, domain_size: int | None, weight: float = 1.0) -> list[BatchMember]:
    """A plan's measures as PLD-planned mechanisms. A Laplace measure over G groups bounded per
    group moves each of its G independent coordinates by at most max_rows * R: G one-dimensional
    mechanisms of that sensitivity dominate it; under a total bound the whole vector is one
    mechanism of its L1. A Gaussian measure is one mechanism at its L2."""
    if plan.sample_rate is not None:
        raise invalid_parameter("TABLESAMPLE queries cannot be PLD-planned", hint="run the sampled query on its own")
    if plan.needs_selection:
        raise invalid_parameter(
            "partition selection cannot be PLD-planned",
            hint="declare the group keys in the policy, or run this query on its own",
        )
    if any(isinstance(m, Histogram) for m in plan.measures):
        raise invalid_parameter(
            "quantiles cannot be PLD-planned yet",
            hint="SET dpsql.planner = 'filter' for this query, or send it outside the batch",
        )
    per_measure = plan.bounding.planned_copies(mechanism, domain_size)
    return [BatchMember(mechanism, weight) for m in plan.measures if m.row_bound for _ in range(per_measure)]


def calibrate_planned(
    plan: Plan, mechanism: str, multiplier: float, domain_size: int | None, weight: float = 1.0
) -> Calibration:
    """Noise for a plan's measures at a common PLD-planned multiplier (scale: multiplier / weight
    times the sensitivity the bounding plans it at, rounded up); the cost is charged by the caller, once for the
    whole batch."""
    measures = []
    for m in plan.measures:
        sensitivity = plan.bounding.planned(m, mechanism, domain_size)
        scale = math.nextafter(multiplier / weight * sensitivity, math.inf) if sensitivity else 0.0
        measures.append(
            MeasureNoise(
                Noise(mechanism, scale),
                plan.bounding.l1(m, domain_size),
                plan.bounding.l2_squared(m, domain_size),
                None,
                None,
            )
        )
    check_scales(plan, measures)
    return Calibration(measures, None, Cost(Fraction(0)), plan.groups_per_unit(domain_size), weight)


def batch_cost(epsilon: Fraction, delta: Fraction, multiplier: float, n_mechanisms: int) -> Cost:
    """A PLD-planned batch is one (ε, δ) release."""
    return Cost.of([Part("approx", epsilon, delta, noise_multiplier=multiplier, count=n_mechanisms)])


def pld_multiplier(mechanisms: list[BatchMember], epsilon: Fraction, delta: Fraction) -> float:
    """PLD-plan at a float target no larger than the exact ε that will be charged."""
    target = float(epsilon)
    if Fraction(target) > epsilon:
        target = math.nextafter(target, 0.0)
    try:
        return joint_multiplier(mechanisms, target, float(delta))
    except ValueError as e:
        raise invalid_parameter(str(e)) from None
