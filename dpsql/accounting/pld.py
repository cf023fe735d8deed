"""PLD planning: calibrate a batch of mechanisms jointly (dp-accounting's privacy loss distributions).

Given the mechanisms of a batch (a dashboard's queries, or one query's aggregates) and a
target (ε, δ), find the smallest common noise multiplier m - mechanism i gets noise scale
m / weight_i times its sensitivity - whose composition is (ε, δ)-DP. The batch is charged once
as one (ε, δ) release. PLD is never used as an adaptive filter across separately chosen queries
(not valid under full adaptivity, DESIGN.md).

The noise is OpenDP's *discrete* Laplace and Gaussian, so the continuous mechanisms' PLDs do not
apply (at shift 1 a discrete Laplace's delta is up to 3x the continuous one's):
- a discrete Laplace of scale b at integer shift k <= Δ is (Δ/b)-DP, and every ε-DP pair is
  dominated by randomized response at ε (Kairouz, Oh, Viswanath 2015), which is the discrete
  Laplace at shift 1: its PLD (dp-accounting's discrete Laplace, sensitivity 1, parameter ε)
  bounds the mechanism at any integer sensitivity and scale;
- a discrete Gaussian of σ is exactly (Δ²/2σ²)-zCDP, also for vectors (Canonne, Kamath, Steinke
  2020, Thm 14), so Gaussian batches compose their ρ and convert with the optimal conversion.
PLDs are built with pessimistic discretization, so the certified ε is an upper bound.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .zcdp import epsilon_from_rho, rho_from_epsilon

if TYPE_CHECKING:  # dp-accounting ships no type information: these are Any to mypy
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

MIN_DELTA = 1e-12  # below this the PLD tails are not certified reliably
DISCRETIZATION = 1e-4


@dataclass(frozen=True)
class BatchMember:
    kind: str  # laplace | gaussian
    weight: float = 1.0


def _pld(multiplier: float) -> PrivacyLossDistribution:
    """Randomized response at ε = 1/multiplier: the dominating pair of a discrete Laplace of
    scale multiplier * Δ at any integer shift up to Δ (see the module's docstring)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    return pld.from_discrete_laplace_mechanism(
        1.0 / multiplier, sensitivity=1, value_discretization_interval=DISCRETIZATION
    )


def _kind(mechanisms: Sequence[BatchMember]) -> str:
    kinds = {m.kind for m in mechanisms}
    if len(kinds) != 1:
        raise ValueError("a planned batch holds Laplace or Gaussian mechanisms, not both")
    return kinds.pop()


def batch_epsilon(mechanisms: Sequence[BatchMember], multiplier: float, delta: float) -> float:
    """ε at δ of the composition, each mechanism with noise multiplier `multiplier / weight`."""
    if _kind(mechanisms) == "gaussian":
        return epsilon_from_rho(gaussian_rho(mechanisms, multiplier), delta)
    groups = Counter(multiplier / m.weight for m in mechanisms)
    total = None
    for mult, count in groups.items():
        p = _pld(mult)
        p = p.self_compose(count) if count > 1 else p
        total = p if total is None else total.compose(p)
    assert total is not None  # _kind refused an empty batch
    return float(total.get_epsilon_for_delta(delta))


def gaussian_rho(mechanisms: Sequence[BatchMember], multiplier: float) -> float:
    """ρ of discrete Gaussians with σ_i = multiplier / weight_i times their L2 sensitivity."""
    return sum(m.weight * m.weight for m in mechanisms) / (2 * multiplier * multiplier)


def check_delta(delta: float) -> None:
    if not delta >= MIN_DELTA:
        raise ValueError(
            f"PLD planning needs delta >= {MIN_DELTA:g}: the privacy loss distribution's tails "
            "cannot be certified below that; raise delta or plan with the analyst's filter instead"
        )


def joint_multiplier(mechanisms: Sequence[BatchMember], epsilon: float, delta: float, tolerance: float = 1e-4) -> float:
    """The smallest common noise multiplier (within `tolerance`, relative, rounded up) meeting (ε, δ)."""
    check_delta(delta)
    if not mechanisms:
        raise ValueError("nothing to plan")
    if _kind(mechanisms) == "gaussian":  # closed form: the largest admissible ρ, rounded safe
        rho = rho_from_epsilon(epsilon, delta)
        if rho <= 0:
            raise ValueError("no noise scale meets this (epsilon, delta)")
        multiplier = math.nextafter(math.sqrt(sum(m.weight * m.weight for m in mechanisms) / (2 * rho)), math.inf)
        while epsilon_from_rho(gaussian_rho(mechanisms, multiplier), delta) > epsilon:
            multiplier = math.nextafter(multiplier * (1 + 1e-12), math.inf)
        return multiplier
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


def verify(mechanisms: Sequence[BatchMember], multiplier: float, delta: float) -> float:
    """ε of the planned batch by an independent route: DpEvents through dp-accounting's own
    accountants (PLD for discrete Laplace at shift 1, RDP for the Gaussians' zCDP bound)."""
    from dp_accounting import dp_event, pld, rdp

    if _kind(mechanisms) == "gaussian":
        accountant = rdp.RdpAccountant()
        for m in mechanisms:
            accountant.compose(dp_event.GaussianDpEvent(multiplier / m.weight))
        return float(accountant.get_epsilon(delta))
    accountant = pld.PLDAccountant(value_discretization_interval=DISCRETIZATION / 2)
    for m in mechanisms:
        accountant.compose(dp_event.DiscreteLaplaceDpEvent(m.weight / multiplier, 1))
    return float(accountant.get_epsilon(delta))
