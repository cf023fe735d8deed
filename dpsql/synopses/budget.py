"""A synopsis's budget: which noise, the charge, and each measurement's share and noise. Pure:
the policy, the spec and the cube's plan (its sensitivities), never the data.

Laplace (pure epsilon): measurement t of measure j at epsilon_jt has scale
P_t * Delta1_j / epsilon_jt (P_t the partitions it releases: axes.py); the epsilons add up to the
synopsis's epsilon, charged as Laplace parts.

Gaussian (zCDP): the synopsis's (epsilon, delta) is one rho = rho_for(epsilon, delta) (the
optimal conversion, as a Gaussian query's), split among the measurements, which compose by
adding their rho. Measurement t's L2 sensitivity squared is the sum over its partitions of each
partition's: the cube's own cells (the full marginal) have the plan's L2 (Delta2^2 =
groups * bound^2); any partition that merges cells has at most Delta1^2 (summing cells cannot
raise an L1 norm, and an L2 norm is at most the L1). sigma_t = sqrt(Delta2_t^2 / (2 rho_t)). It
is charged as one Gaussian part of (epsilon, delta, rho), which every filter accounts as a
Gaussian query's: the zcdp, rdp and gdp filters by its rho, the (epsilon, delta) filters by the
pair. Under Gaussian noise many marginals cost sqrt(P) rather than P in scale, which is where it
beats Laplace at the same charge; by default a synopsis is Gaussian when every payer's filter is
zcdp (where rho is what is spent), else Laplace; `mechanism` in the spec says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..accounting.cost import Cost, Part
from ..errors import invalid_parameter
from ..mechanisms import Noise, gaussian_sigma, laplace_scale, rho_for
from . import axes as ax
from .spec import EVERYONE, SynopsisSpec


@dataclass(frozen=True)
class Budget:
    mechanism: str  # laplace | gaussian
    epsilon: Fraction
    delta: Fraction  # 0 for Laplace
    rho: Fraction | None  # the Gaussian's whole rho

    @property
    def gaussian(self) -> bool:
        return self.mechanism == "gaussian"

    @property
    def whole(self) -> Fraction:
        """What the measurements' shares divide: epsilon (Laplace) or rho (Gaussian)."""
        return self.rho if self.rho is not None else self.epsilon


def payers(spec: SynopsisSpec, policy) -> list[str]:
    """Whose budgets are charged: the analyst named, or every analyst of the policy."""
    return sorted(policy.users) if spec.charged_to == EVERYONE else [spec.charged_to]


def mechanism_of(spec: SynopsisSpec, policy) -> str:
    """The spec's mechanism, else gaussian when every payer's filter spends rho (zcdp)."""
    if spec.mechanism is not None:
        return spec.mechanism
    filters = {policy.user(u).budget.filter for u in payers(spec, policy)}
    return "gaussian" if filters == {"zcdp"} else "laplace"


def budget_of(spec: SynopsisSpec, policy) -> Budget:
    if mechanism_of(spec, policy) == "laplace":
        return Budget("laplace", spec.epsilon, Fraction(0), None)
    delta = spec.delta if spec.delta is not None else policy.privacy.default_query_delta
    rho = rho_for(spec.epsilon, delta) if delta > 0 else Fraction(0)
    if rho <= 0:
        raise invalid_parameter(
            f"synopsis {spec.name}: Gaussian noise needs delta > 0 and an epsilon and delta that give rho > 0",
            hint='set delta = 1e-8 in its [synopses.NAME] section, or mechanism = "laplace"',
        )
    return Budget("gaussian", spec.epsilon, delta, rho)


def l2_squared(l1: int, cube_l2_squared: int, levels: tuple[tuple[int, ...], ...]) -> int:
    """A measurement's L2 sensitivity squared: the plan's for the cube's own cells, the L1's
    square for every partition that merges cells."""
    cells = 1 if all(ks == (0,) for ks in levels) else 0
    return cells * cube_l2_squared + (ax.partitions(levels) - cells) * l1 * l1


def noise(budget: Budget, share: Fraction, l1: int, cube_l2_squared: int, levels: tuple[tuple[int, ...], ...]) -> Noise:
    """Measurement noise at `share` (an epsilon, or a rho) for one measure."""
    if budget.gaussian:
        return Noise("gaussian", gaussian_sigma(l2_squared(l1, cube_l2_squared, levels), share))
    return Noise("laplace", laplace_scale(l1 * ax.partitions(levels), share))


def cost(budget: Budget, draws: list[tuple[Fraction, Noise, int]]) -> Cost:
    """The charge: one Laplace part per draw (its epsilon, noise, L1 of the measurement), or one
    Gaussian part of the whole (epsilon, delta, rho)."""
    if budget.gaussian:
        assert budget.rho is not None
        return Cost.of(
            [
                Part(
                    "gaussian",
                    budget.epsilon,
                    budget.delta,
                    rho=budget.rho,
                    noise_multiplier=1 / math.sqrt(2 * float(budget.rho)),
                )
            ]
        )
    return Cost.of([Part("laplace", e, rho=e * e / 2, noise_multiplier=n.scale / l1) for e, n, l1 in draws])


def variance(n: Noise) -> float:
    """A noise's variance (the discrete samplers': at most the continuous ones')."""
    return n.scale**2 if n.kind == "gaussian" else 2 * n.scale**2
