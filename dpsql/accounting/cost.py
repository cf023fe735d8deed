"""The cost of one release, in every currency a filter may need.

(ε, δ) exactly as rationals; ρ when every mechanism is Gaussian (zCDP); and a description of
the mechanisms (a dp-accounting DpEvent tree) so the audit log can be re-accounted later
under a filter that did not exist when the query ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any


def fraction_text(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"


def parse_fraction(text: str) -> Fraction:
    return Fraction(text)


def show(x: Fraction) -> str:
    """A rational for people: exact when it is a short decimal, else 6 significant digits."""
    f = float(x)
    if Fraction(repr(f)) == x:
        return repr(f) if not f.is_integer() else str(int(f))
    return f"{f:.6g}"


@dataclass(frozen=True)
class Cost:
    epsilon: Fraction
    delta: Fraction = Fraction(0)
    rho: Fraction | None = None
    events: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        return json.dumps({
            "epsilon": fraction_text(self.epsilon),
            "delta": fraction_text(self.delta),
            "rho": None if self.rho is None else fraction_text(self.rho),
            "events": list(self.events),
        })

    @classmethod
    def from_json(cls, text: str) -> "Cost":
        d = json.loads(text)
        return cls(parse_fraction(d["epsilon"]), parse_fraction(d["delta"]),
                   None if d["rho"] is None else parse_fraction(d["rho"]), tuple(d["events"]))

    def dp_event(self):
        """The release as a dp-accounting DpEvent (composition of its mechanisms)."""
        from dp_accounting import dp_event

        parts = []
        for e in self.events:
            if e["kind"] == "laplace":
                parts.append(dp_event.LaplaceDpEvent(e["noise_multiplier"]))
            elif e["kind"] == "gaussian":
                parts.append(dp_event.GaussianDpEvent(e["noise_multiplier"]))
            else:
                parts.append(dp_event.EpsilonDeltaDpEvent(e["epsilon"], e["delta"]))
        return dp_event.ComposedDpEvent(parts)

    def as_dict(self) -> dict[str, float]:
        return {"epsilon": float(self.epsilon), "delta": float(self.delta)}
