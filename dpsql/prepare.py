"""One query's final plan and calibration: the one pure function every path plans with.

The single-query path, EXPLAIN, Describe, batches and `dpsql plan` all call `plan_query`, so
a batch member is bounded exactly as the same query alone. Everything here depends on the
query, its options, the session's settings, the policy and the schema, never on data: a
refusal reveals nothing and charges nothing. The plan it returns is frozen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Mapping

from sqlglot import exp

from .config import Policy, exact
from .errors import invalid_parameter
from .guarantee.calibration import Calibration, calibrate, measure_weights, needs_delta
from .guarantee.plan import Plan
from .sql.analyze import PublicQuery, analyze
from .sql.options import QueryOptions
from .targets import (
    batch_cost,
    batch_members,
    calibrate_planned,
    epsilon_for_target,
    pld_multiplier,
)


@dataclass
class Settings:
    """A session's settings (SET dpsql.*), the inputs of planning besides the query."""

    epsilon: Fraction
    delta: Fraction
    mechanism: str
    confidence: float
    cache: bool = True
    reuse: bool = True  # a repeated query's exact result kept per data version (noise still fresh)
    planner: str = "filter"
    target_error: float | None = None  # pick the smallest epsilon meeting this 95% error on COUNT/SUM
    exact_curve: bool = False  # every filter charged composes (ε, δ) pairs: Gaussian σ by its exact curve
    # Every filter charged adds up ε (basic): a part split after the data is read costs no more than
    # the whole charged before it, under the others a split costs less when fixed before (auto_bounds.rest_part).
    additive: bool = False
    bounds: str = "policy"  # "auto": limits chosen per query from part of its epsilon (auto_bounds.py)
    # PostgreSQL client settings, accepted and echoed only (session/setting_table.py has their defaults)
    client: dict[str, str] = field(default_factory=dict)


def plan_query(
    tree: exp.Query,
    policy: Policy,
    schema: Mapping[str, Mapping[str, str]],
    mechanism: str,
    options: QueryOptions | None = None,
) -> Plan | PublicQuery:
    """The final, frozen plan of one query (its options and the mechanism applied before any
    bounding or precision choice)."""
    return analyze(tree, policy, schema, options or QueryOptions(), mechanism)


def prepare(
    tree: exp.Query,
    policy: Policy,
    schema: Mapping[str, Mapping[str, str]],
    settings: Settings,
    options: QueryOptions | None = None,
) -> tuple[Plan | PublicQuery, Calibration | None]:
    """Plan and calibrate one query at the session's (or the query's own) epsilon and delta."""
    options = options or QueryOptions()
    s = settings
    plan = plan_query(tree, policy, schema, s.mechanism, options)
    if isinstance(plan, PublicQuery):
        return plan, None
    epsilon = within_cap(
        policy,
        s.epsilon if options.epsilon is None else positive(options.epsilon, "epsilon", "write OPTIONS (epsilon = 0.1)"),
    )
    delta = query_delta(s, options)
    domain = plan.literal_domain_size()
    if s.planner == "pld" and len(plan.measures) > 1:
        if options.weights:
            raise invalid_parameter(
                "weights apply to the filter planner", hint="SET dpsql.planner = 'filter', or drop the weights"
            )
        if delta <= 0:
            raise invalid_parameter("the PLD planner needs delta > 0", hint="SET dpsql.delta = 1e-8")
        mechanisms = batch_members(plan, s.mechanism, domain)
        multiplier = pld_multiplier(mechanisms, epsilon, delta)
        cal = calibrate_planned(plan, s.mechanism, multiplier, domain)
        return plan, replace(cal, cost=batch_cost(epsilon, delta, multiplier, len(mechanisms)))
    delta = delta if needs_delta(plan, s.mechanism) else Fraction(0)
    weights = measure_weights(plan, options.weights)
    if s.target_error is not None and options.epsilon is None:
        epsilon = epsilon_for_target(
            plan, s.target_error, delta, s.mechanism, domain, weights, s.confidence, exact_curve=s.exact_curve
        )
        if s.bounds != "auto":  # else checked where the limits are chosen (session/auto.py: targeted)
            within_cap(
                policy,
                epsilon,
                hint="raise dpsql.target_error: a smaller error costs more epsilon than one query may spend",
            )
    return plan, calibrate(plan, epsilon, delta, s.mechanism, domain, weights, s.exact_curve)


EPSILON_CEILING = Fraction(10**6)  # e^(1e6): no guarantee is left, and the accountants' exact arithmetic overflows


def within_cap(policy: Policy, epsilon: Fraction, hint: str | None = None) -> Fraction:
    """`epsilon`, refused (free) above the policy's max_query_epsilon: the most one release may
    spend, so that no single answer is nearly exact however large the analyst's budget."""
    if epsilon > EPSILON_CEILING:
        raise invalid_parameter(
            f"epsilon={float(epsilon):g} is beyond any privacy guarantee; a query may spend at most "
            f"epsilon={float(EPSILON_CEILING):g}",
            hint=hint or "SET dpsql.epsilon to a value such as 1 or less; nothing was charged",
        )
    cap = policy.privacy.max_query_epsilon
    if cap is not None and epsilon > cap:
        raise invalid_parameter(
            f"a query may spend at most epsilon={float(cap):g} (max_query_epsilon in the policy); "
            f"this one asks for {float(epsilon):g}",
            hint=hint or f"SET dpsql.epsilon = {float(cap):g} or less; nothing was charged",
        )
    return epsilon


def positive(value: str | Fraction, name: str, example: str | None = None) -> Fraction:
    """`example`: how to write a valid value where it was given (default: a SET)."""
    example = example or f"SET {name} = 0.1"
    try:
        v = exact(float(value)) if not isinstance(value, Fraction) else value
    except ValueError:
        raise invalid_parameter(f"invalid value for {name}: {value!r}", hint=example) from None
    if v <= 0:
        raise invalid_parameter(f"{name} must be greater than 0", hint=example)
    return v


def open_unit(value: str, name: str) -> float:
    """A probability strictly between 0 and 1 (a confidence level)."""
    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if not 0 < v < 1:
        raise invalid_parameter(
            f"{name} must be greater than 0 and below 1, not {value!r}", hint=f"for example SET {name} = 0.95"
        )
    return v


def probability(value: str, name: str) -> Fraction:
    try:
        v = exact(float(value))
    except ValueError:
        raise invalid_parameter(f"invalid value for {name}: {value!r}") from None
    if not 0 <= v < 1:
        raise invalid_parameter(f"{name} must be at least 0 and below 1")
    return v


def query_delta(s: Settings, options: QueryOptions) -> Fraction:
    """The query's delta: its OPTIONS' where given, else the session's."""
    return s.delta if options.delta is None else probability(str(float(options.delta)), "delta")
