"""PLD planning: calibrate a batch of mechanisms jointly (dp-accounting's privacy loss distributions).

Given the mechanisms of a batch (a dashboard's queries, or one query's aggregates) and a
target (ε, δ), find by binary search the smallest common noise multiplier m - mechanism i gets
noise scale m / weight_i times its sensitivity - whose composed PLD is (ε, δ)-DP. PLDs are built
with pessimistic discretization, so the certified ε is an upper bound. The batch is charged
once as one (ε, δ) release. PLD is never used as an adaptive filter across separately chosen
queries (not valid under full adaptivity, DESIGN §5).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

MIN_DELTA = 1e-12  # below this the PLD tails are not certified reliably
DISCRETIZATION = 1e-4


@dataclass(frozen=True)
class Planned:
    kind: str  # laplace | gaussian
    weight: float = 1.0


def _pld(kind: str, multiplier: float, sampling: float = 1.0):
    from dp_accounting.pld import privacy_loss_distribution as pld

    if kind == "laplace":
        return pld.from_laplace_mechanism(multiplier, sensitivity=1, value_discretization_interval=DISCRETIZATION,
                                          sampling_prob=sampling)
    return pld.from_gaussian_mechanism(multiplier, sensitivity=1, value_discretization_interval=DISCRETIZATION,
                                       sampling_prob=sampling)


def batch_epsilon(mechanisms: Sequence[Planned], multiplier: float, delta: float) -> float:
    """ε at δ of the composition, each mechanism with noise multiplier `multiplier / weight`."""
    groups = Counter((m.kind, multiplier / m.weight) for m in mechanisms)
    total = None
    for (kind, mult), count in groups.items():
        p = _pld(kind, mult)
        p = p.self_compose(count) if count > 1 else p
        total = p if total is None else total.compose(p)
    return total.get_epsilon_for_delta(delta)


def check_delta(delta: float) -> None:
    if not delta >= MIN_DELTA:
        raise ValueError(f"PLD planning needs delta >= {MIN_DELTA:g}: the privacy loss distribution's tails "
                         "cannot be certified below that; raise delta or plan with the analyst's filter instead")


def plan(mechanisms: Sequence[Planned], epsilon: float, delta: float, tolerance: float = 1e-4) -> float:
    """The smallest common noise multiplier (within `tolerance`, relative, rounded up) meeting (ε, δ)."""
    check_delta(delta)
    if not mechanisms:
        raise ValueError("nothing to plan")
    lo, hi = 1e-3, 1.0
    while batch_epsilon(mechanisms, hi, delta) > epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e9:
            raise ValueError("no noise scale meets this (epsilon, delta)")
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        if batch_epsilon(mechanisms, mid, delta) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def verify(mechanisms: Sequence[Planned], multiplier: float, delta: float) -> float:
    """ε of the planned batch by an independent route: DpEvents through dp-accounting's
    PLDAccountant (its own discretization and composition)."""
    from dp_accounting import dp_event, pld

    accountant = pld.PLDAccountant(value_discretization_interval=DISCRETIZATION / 2)
    for m in mechanisms:
        mult = multiplier / m.weight
        accountant.compose(dp_event.LaplaceDpEvent(mult) if m.kind == "laplace" else dp_event.GaussianDpEvent(mult))
    return accountant.get_epsilon(delta)
