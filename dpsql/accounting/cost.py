"""The cost of one release, in every currency a filter may need.

A release is a composition of parts, one per mechanism (a noisy measure, partition selection,
a PLD-planned batch). Each part carries its (ε, δ) as exact rationals, its ρ (zCDP) where it
has one, and its noise multiplier, so every filter can be evaluated and the audit log can be
re-accounted later as a dp-accounting DpEvent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # dp-accounting ships no type information: this is Any to mypy
    from dp_accounting.dp_event import DpEvent


def fraction_text(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"


def parse_fraction(text: str) -> Fraction:
    return Fraction(text)


def show(x: Fraction | float) -> str:
    """A rational for people: exact when it is a short decimal, else 6 significant digits."""
    f = float(x)
    if isinstance(x, Fraction) and Fraction(repr(f)) != x:
        return f"{f:.6g}"
    return str(int(f)) if f.is_integer() else repr(f)


@dataclass(frozen=True)
class Part:
    """One mechanism of a release.

    kind: laplace (pure ε), gaussian (ρ-zCDP; ε, δ its conversion share), selection (ε, δ of
    partition selection), approx (an (ε, δ) block, e.g. a PLD-planned batch).
    """

    kind: str
    epsilon: Fraction
    delta: Fraction = Fraction(0)
    rho: Fraction | None = None
    noise_multiplier: float | None = None
    sampling: float | None = None
    count: int = 1  # identical mechanisms in this part (a Gaussian block of several measures)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "epsilon": fraction_text(self.epsilon),
            "delta": fraction_text(self.delta),
            "rho": None if self.rho is None else fraction_text(self.rho),
            "noise_multiplier": self.noise_multiplier,
            "sampling": self.sampling,
            "count": self.count,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Part":
        return cls(
            d["kind"],
            parse_fraction(d["epsilon"]),
            parse_fraction(d["delta"]),
            None if d["rho"] is None else parse_fraction(d["rho"]),
            d["noise_multiplier"],
            d["sampling"],
            d.get("count", 1),
        )


@dataclass(frozen=True)
class Cost:
    epsilon: Fraction
    delta: Fraction = Fraction(0)
    parts: tuple[Part, ...] = field(default_factory=tuple)

    def __hash__(self) -> int:
        """Its ε and δ alone (equal costs have equal ones), kept once computed: a cost keys the
        filters' caches in every charge and answer, and a Fraction's hash is a modular inverse
        (a Cost's own, over its parts, took 4 µs). Ints' and Fractions' hashes are the same in
        every process, so a pickled cost (a worker's charge) carries a true one."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.epsilon, self.delta))
            object.__setattr__(self, "_hash", h)
        return h

    @classmethod
    def pure(cls, epsilon: Fraction) -> "Cost":
        """One Laplace mechanism of this ε (what `budget simulate` and the tests charge)."""
        return cls(epsilon, Fraction(0), (Part("laplace", epsilon, rho=epsilon * epsilon / 2),))

    @classmethod
    def of(cls, parts: tuple[Part, ...] | list[Part]) -> "Cost":
        parts = tuple(parts)
        return cls(sum((p.epsilon for p in parts), Fraction(0)), sum((p.delta for p in parts), Fraction(0)), parts)

    @property
    def rho(self) -> Fraction | None:
        """ρ of the whole release when every part is zCDP without a δ of its own."""
        if any(p.rho is None or (p.kind != "gaussian" and p.delta) for p in self.parts):
            return None
        return sum((p.rho for p in self.parts if p.rho is not None), Fraction(0))  # none is None here

    def to_json(self) -> str:
        return self._json

    @cached_property
    def _json(self) -> str:  # written with every charge, of a cost a dashboard repeats
        return json.dumps(
            {
                "epsilon": fraction_text(self.epsilon),
                "delta": fraction_text(self.delta),
                "parts": [p.to_json() for p in self.parts],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> "Cost":
        d = json.loads(text)
        return cls(
            parse_fraction(d["epsilon"]), parse_fraction(d["delta"]), tuple(Part.from_json(p) for p in d["parts"])
        )

    def dp_event(self) -> DpEvent:
        """The release as a dp-accounting DpEvent (composition of its mechanisms)."""
        from dp_accounting import dp_event

        events = []
        for p in self.parts:
            if p.kind == "laplace" and p.noise_multiplier:
                e = dp_event.LaplaceDpEvent(p.noise_multiplier)
            elif p.kind == "gaussian" and p.noise_multiplier:
                e = dp_event.GaussianDpEvent(p.noise_multiplier)
            else:
                e = dp_event.EpsilonDeltaDpEvent(float(p.epsilon), float(p.delta))
            if p.sampling is not None:
                e = dp_event.PoissonSampledDpEvent(p.sampling, e)
            events.append(e if p.count == 1 else dp_event.SelfComposedDpEvent(e, p.count))
        return dp_event.ComposedDpEvent(events)

    def as_dict(self) -> dict[str, float]:
        return {"epsilon": float(self.epsilon), "delta": float(self.delta)}
