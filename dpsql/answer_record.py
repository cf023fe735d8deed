"""What a DP answer carries beside its rows (`Result.dp`): its cost, the budget left, each noisy
column's intervals, the noise, the charge's receipt, the limits chosen per query, a notice.

Frozen records with typed fields, read by attribute inside dpsql. `AnswerRecord` is also a
read-only mapping (its JSON form, key by key), because users read `cursor.dp["cost"]` as the
README shows; `as_dict()` is the JSON form itself, key for key and in the order dpsql has
always written it (the CLI's --json, the answer cache, the release record): a field that is
None is absent from it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from types import MappingProxyType
from typing import Any

Interval = tuple[float, float]
Intervals = tuple[Interval | None, ...]


@dataclass(frozen=True)
class Amount:
    """Epsilon and delta: a cost, or what a budget has left."""

    epsilon: float
    delta: float

    @classmethod
    def of(cls, amount: Mapping[str, float | Fraction]) -> Amount:
        return cls(float(amount["epsilon"]), float(amount["delta"]))

    def as_dict(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta}


@dataclass(frozen=True)
class MeasureNoise:
    """The noise of one measure, in the value's units."""

    measure: str
    kind: str
    scale: float

    def as_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "kind": self.kind, "scale": self.scale}


@dataclass(frozen=True)
class ExpectedError:
    """The profile's model of a query's relative error under the chosen limits (summed over its
    aggregates): what the limits cut, the noise, and the same at the policy's limits."""

    bias: float
    noise: float
    at_policy_limits: float
    # (aggregate, its bias, its noise, its value's scale or None); None: not told (older answers)
    by_aggregate: tuple[tuple[str, float, float, float | None], ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bias": self.bias, "noise": self.noise, "at_policy_limits": self.at_policy_limits}
        if self.by_aggregate is not None:
            out["by_aggregate"] = {text: {"bias": b, "noise": n, "value": v} for text, b, n, v in self.by_aggregate}
        return out

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> ExpectedError:
        parts = d.get("by_aggregate")
        by = None if parts is None else tuple((t, e["bias"], e["noise"], e.get("value")) for t, e in parts.items())
        return cls(d["bias"], d["noise"], d["at_policy_limits"], by)


@dataclass(frozen=True)
class CountCorrection:
    """Counts scaled for the rows the chosen limits cut: the correction's reach, its factor and
    the factor's interval."""

    reach: int
    factor: float
    factor_interval: Interval

    def as_dict(self) -> dict[str, Any]:
        return {"reach": self.reach, "factor": self.factor, "factor_interval": list(self.factor_interval)}


@dataclass(frozen=True)
class TargetChoice:
    """How dpsql.target_error chose a query's epsilon: the target, where the model came from
    ("policy": its limits; "profile": the query's profile released before), the epsilon, and
    the profile model's expected error there."""

    error: float
    source: str
    epsilon: float
    expected: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "from": self.source, "epsilon": self.epsilon}
        if self.expected is not None:
            out["expected"] = self.expected
        return out

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> TargetChoice:
        return cls(d["error"], d["from"], d["epsilon"], d.get("expected"))


@dataclass(frozen=True)
class ChosenLimits:
    """The limits a profile chose for one query (dpsql.bounds = auto)."""

    max_contributions: int | None
    clamps: Mapping[str, Interval]
    profile_epsilon: float
    profile_reused: bool
    expected: ExpectedError
    # each centred mean's column and the centre of its sum (auto_mean)
    centres: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        out = {
            "max_contributions": self.max_contributions,
            "clamps": {expr: list(bound) for expr, bound in self.clamps.items()},
            "profile_epsilon": self.profile_epsilon,
            "profile_reused": self.profile_reused,
            "expected": self.expected.as_dict(),
        }
        if self.centres:
            out["centres"] = dict(self.centres)
        return out


@dataclass(frozen=True)
class ChosenBounds:
    """`dp["bounds"]`: the limits chosen for the query, or the groups per unit of a units count
    whose cut groups are corrected, and the correction if any."""

    max_groups: int | None = None
    limits: ChosenLimits | None = None
    correction: CountCorrection | None = None
    target: TargetChoice | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.max_groups is None else {"max_groups": self.max_groups}
        if self.limits is not None:
            out |= self.limits.as_dict()
        if self.correction is not None:
            out["correction"] = self.correction.as_dict()
        if self.target is not None:
            out["target"] = self.target.as_dict()
        return out

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> ChosenBounds:
        """From the JSON form (a cached answer)."""
        fix = d.get("correction")
        lo, hi = fix["factor_interval"] if fix else (0.0, 0.0)
        return cls(
            max_groups=d.get("max_groups"),
            limits=None
            if "clamps" not in d
            else ChosenLimits(
                d["max_contributions"],
                MappingProxyType({k: (v[0], v[1]) for k, v in d["clamps"].items()}),
                d["profile_epsilon"],
                d.get("profile_reused", False),
                ExpectedError.of(d["expected"]),
                MappingProxyType(dict(d.get("centres", {}))),
            ),
            correction=None if not fix else CountCorrection(fix["reach"], fix["factor"], (lo, hi)),
            target=None if d.get("target") is None else TargetChoice.of(d["target"]),
        )


def frozen_ci(ci: Mapping[str, list[Interval | None] | Intervals | None]) -> Mapping[str, Intervals | None]:
    """Each noisy column's intervals (one per row; None for a value without one), frozen; None
    for an exact column."""
    return MappingProxyType({k: None if v is None else tuple(v) for k, v in ci.items()})


@dataclass(frozen=True)
class AnswerRecord(Mapping[str, Any]):
    """`Result.dp`. Fields are in the order of the JSON form; None is absent."""

    cost: Amount | None = None
    remaining: Amount | None = None
    ci: Mapping[str, Intervals | None] | None = None
    confidence: float | None = None
    mechanism: str | None = None
    cached: bool | None = None
    noise: tuple[MeasureNoise, ...] | None = None
    synopsis: str | None = None
    receipt: int | None = None
    explain: bool | None = None
    admits_more: int | None = None
    admitted: bool | None = None
    remaining_now: Amount | None = None
    batch: int | None = None
    bounds: ChosenBounds | None = None
    notice: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: what `cursor.dp` has always been."""
        return {name: _plain(v) for name in _NAMES if (v := getattr(self, name)) is not None}

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> AnswerRecord:
        """From the JSON form (an answer cache entry)."""
        ci, noise, bounds = d.get("ci"), d.get("noise"), d.get("bounds")
        return cls(
            cost=None if d.get("cost") is None else Amount.of(d["cost"]),
            remaining=None if d.get("remaining") is None else Amount.of(d["remaining"]),
            ci=None
            if ci is None
            else frozen_ci(
                {k: None if v is None else [None if x is None else (x[0], x[1]) for x in v] for k, v in ci.items()}
            ),
            confidence=d.get("confidence"),
            mechanism=d.get("mechanism"),
            cached=d.get("cached"),
            noise=None if noise is None else tuple(MeasureNoise(**n) for n in noise),
            synopsis=d.get("synopsis"),
            receipt=d.get("receipt"),
            explain=d.get("explain"),
            admits_more=d.get("admits_more"),
            admitted=d.get("admitted"),
            remaining_now=None if d.get("remaining_now") is None else Amount.of(d["remaining_now"]),
            batch=d.get("batch"),
            bounds=None if bounds is None else ChosenBounds.of(bounds),
            notice=d.get("notice"),
        )

    # The read-only mapping view: the JSON form's value of each key present.
    def __getitem__(self, key: str) -> Any:
        v = getattr(self, key, None) if key in _FIELDS else None
        if v is None:
            raise KeyError(key)
        return _plain(v)

    def __iter__(self) -> Iterator[str]:
        return (name for name in _NAMES if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return key in _FIELDS and getattr(self, str(key)) is not None


def _plain(v: Any) -> Any:
    """A field's JSON form: records as dicts, intervals as lists of pairs (as they always were)."""
    if isinstance(v, (Amount, ChosenBounds)):
        return v.as_dict()
    if isinstance(v, tuple):  # the noise
        return [n.as_dict() for n in v]
    if isinstance(v, Mapping):  # the intervals
        return {k: None if iv is None else list(iv) for k, iv in v.items()}
    return v


_NAMES = tuple(f.name for f in fields(AnswerRecord))
_FIELDS = frozenset(_NAMES)
