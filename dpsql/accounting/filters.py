"""Privacy filters: given what an analyst has spent, may this release go ahead?

A filter is pure: it reads running sums (exact rationals) and a cost, and says CONTINUE or
HALT. The ledger keeps the sums and calls the filter inside its check-and-charge transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from .cost import Cost, show


@dataclass(frozen=True)
class Spent:
    """Running sums over an analyst's charged releases."""

    epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)
    queries: int = 0

    def plus(self, cost: Cost) -> "Spent":
        return Spent(self.epsilon + cost.epsilon, self.delta + cost.delta, self.queries + 1)


class Filter(Protocol):
    name: str

    def admits(self, spent: Spent, cost: Cost) -> bool: ...

    def remaining(self, spent: Spent) -> dict[str, Fraction]: ...

    def describe(self, spent: Spent) -> str: ...


@dataclass(frozen=True)
class BasicFilter:
    """Basic composition: HALT if sum eps_i > eps_g or sum delta_i > delta_g."""

    epsilon: Fraction
    delta: Fraction
    name: str = "basic"

    def admits(self, spent: Spent, cost: Cost) -> bool:
        after = spent.plus(cost)
        return after.epsilon <= self.epsilon and after.delta <= self.delta

    def remaining(self, spent: Spent) -> dict[str, Fraction]:
        return {"epsilon": max(Fraction(0), self.epsilon - spent.epsilon),
                "delta": max(Fraction(0), self.delta - spent.delta)}

    def describe(self, spent: Spent) -> str:
        left = self.remaining(spent)
        return (f"{self.name} filter: spent epsilon={show(spent.epsilon)} of {show(self.epsilon)}, "
                f"delta={show(spent.delta)} of {show(self.delta)}; remaining epsilon={show(left['epsilon'])}, "
                f"delta={show(left['delta'])}")


def make_filter(kind: str, epsilon: Fraction, delta: Fraction) -> Filter:
    if kind == "basic":
        return BasicFilter(epsilon, delta)
    raise ValueError(f"unknown filter {kind!r}")
