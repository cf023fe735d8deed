"""The correction of what a total bound cuts (SET dpsql.bounds = auto): the queries that count,
over the profile's units, the rows (or groups) a chosen limit keeps and those it cuts up to the
reach, their noised answers (`Correction`), and the estimates scaled by its factor; and the
profile's CTEs (`with_filtered`), which these share with auto_bounds' profile. The shares of
epsilon these spend are chosen in auto_bounds."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from sqlglot import exp

from .answer_record import CountCorrection
from .guarantee.mechanisms import Noise, add_noise, laplace_scale
from .guarantee.plan import Plan
from .sql import build as b
from .sql.rewrite import rewrite


def with_filtered(plan: Plan, query: exp.Select, lift: tuple[int, int] | None = None) -> exp.Select:
    """`query` with the bounded query's CTEs up to `filtered` and `prof_units` (each unit's
    row count n there). `lift` (R, R'): a per-unit subquery's counts capped at R' instead of its
    cap R (`lifted`), for the profile and the correction of a per-unit count."""
    bounded = rewrite(plan, plan.literal_domain_size())
    ctes = bounded.args["with_"].expressions
    for cte in ctes[: [c.alias for c in ctes].index("filtered") + 1]:
        body = cte.this.copy()
        query = query.with_(cte.alias, as_=body if lift is None else lifted(body, *lift))
    units = b.select([b.col("unit"), b.named(b.count(), "n")], b.table("filtered"), group=["unit"])
    return query.with_("prof_units", as_=units)


def lifted(tree: exp.Expression, cap: int, reach: int) -> exp.Expression:
    """`tree` with each per-unit count's cap LEAST(COUNT(..), cap) (sql/derived.py) raised to
    `reach`, in place: what a unit's count is up to the reach. Still a function of the unit's own
    rows, so each unit still adds one row (one value) to what reads it."""
    for node in list(tree.find_all(exp.Least)):
        limit = node.expressions
        if (
            isinstance(node.this, exp.Count)
            and len(limit) == 1
            and isinstance(limit[0], exp.Literal)
            and not limit[0].is_string
            and limit[0].this == str(cap)
        ):
            node.set("expressions", [exp.Literal.number(reach)])
    return tree


def unit_count_value(value: exp.Expression, reach: int, bits: int) -> exp.Expression:
    """A per-unit count's value (its rows, lifted to at most `reach`) in fixed point: w{j}."""
    capped = b.func("LEAST", b.func("COALESCE", value, 0), reach)
    return b.mul(exp.Cast(this=capped, to=exp.DataType.build("BIGINT")), 2**bits)


def unit_count_query(plan: Plan, j: int, cap: int, c: int, far: int) -> exp.Select:
    """Over the plan's `filtered` rows with its per-unit counts lifted to `far` (`lifted`): the rows
    each unit's count keeps under a clamp c, Σ min(n, c), and those between c and `far`,
    Σ min(n, far) - min(n, c), over the units (a unit's count n is its derived row's, the
    largest over its rows in `filtered`, where a joined one-row or public table repeats it).
    `j`: the measure summing the count (its value v{j} in `filtered`). One unit moves the first
    by at most c and the second by at most far - c."""
    value = plan.measures[j].value
    assert value is not None
    per_unit = b.select([b.col("unit"), b.named(b.func("MAX", b.col("w")), "n")], b.table("filtered"), group=["unit"])
    n = b.func("COALESCE", b.col("n"), 0)
    out = with_filtered(plan, _kept_and_excess(n, c, far, b.subquery(per_unit, "cu")), (cap, far))
    (cte,) = [t for t in out.args["with_"].expressions if t.alias == "filtered"]
    (alias,) = [a for a in cte.this.find_all(exp.Alias) if a.alias == f"v{j}"]
    select = alias.parent
    assert isinstance(select, exp.Select)
    select.append("expressions", b.named(value.copy(), "w"))
    return out


def correction_query(plan: Plan, c: int, far: int) -> exp.Select:
    """Over the plan's `filtered` rows (as the profile): the rows a total bound c keeps,
    Σ min(n, c), and the rows between c and `far`, Σ min(n, far) - min(n, c), over the units.
    One unit moves the first by at most c and the second by at most far - c."""
    return with_filtered(plan, _kept_and_excess(b.col("n"), c, far, b.table("prof_units")))


def _kept_and_excess(n: exp.Expression, c: int, far: int, source: exp.Expression) -> exp.Select:
    """Over `source`, one row per unit with its count `n`: Σ min(n, c) as kept and
    Σ min(n, far) - min(n, c) as excess (0 over no units)."""
    kept = b.func("LEAST", n, c)
    excess = b.binary(exp.Sub, b.func("LEAST", n.copy(), far), kept.copy())
    return b.select(
        [
            b.named(b.func("COALESCE", b.total(kept), 0), "kept"),
            b.named(b.func("COALESCE", b.total(excess), 0), "excess"),
        ],
        source,
    )


@dataclass(frozen=True)
class Correction:
    """The released rows a total bound c kept and those it cut up to the reach (both noisy),
    with their noise's half-widths at the answer's confidence: counts and sums are scaled by
    (kept + excess) / kept, on the model that a unit's cut rows fall in its groups as its kept
    ones do (DESIGN §4)."""

    c: int
    reach: int
    kept: float
    excess: float
    kept_hw: float
    excess_hw: float

    @property
    def factor(self) -> float:
        return _factor(self.kept, self.excess, self.c, self.reach)

    @property
    def interval(self) -> tuple[float, float]:
        return (
            _factor(self.kept + self.kept_hw, self.excess - self.excess_hw, self.c, self.reach),
            _factor(self.kept - self.kept_hw, self.excess + self.excess_hw, self.c, self.reach),
        )

    def describe(self) -> CountCorrection:
        return CountCorrection(self.reach, self.factor, self.interval)


def _factor(kept: float, excess: float, c: int, far: int) -> float:
    """(kept + excess) / kept, within what a total bound can cut: 1 to far / c."""
    return min(max(1.0 + max(excess, 0.0) / max(kept, 1.0), 1.0), far / c)


def groups_query(plan: Plan, g: int, far: int) -> exp.Select:
    """Over the plan's `filtered` rows: the groups a limit of g groups keeps, Σ min(groups, g),
    and those it cuts up to `far` (the domain's size), Σ min(groups, far) - min(groups, g), over
    the units. One unit moves the first by at most g and the second by at most far - g."""
    keys = [b.col(f"k{i}") for i in range(len(plan.keys))]
    pairs = b.select([b.col("unit"), *keys], b.table("filtered"), distinct=True)
    per_unit = b.select([b.col("unit"), b.named(b.count(), "groups")], b.subquery(pairs, "p"), group=["unit"])
    return with_filtered(plan, _kept_and_excess(b.col("groups"), g, far, b.subquery(per_unit, "g")))


def noised_correction(
    row: Sequence, c: int, far: int, epsilon: Fraction, confidence: float, shares: Sequence[Fraction]
) -> Correction:
    """The correction query's exact row noised: each number with discrete Laplace noise of its
    sensitivity (c; far - c) over its share of the query's epsilon."""
    kept_noise = Noise("laplace", laplace_scale(c, epsilon * shares[0]))
    excess_noise = Noise("laplace", laplace_scale(max(far - c, 1), epsilon * shares[1]))
    kept = add_noise([int(row[0] or 0)], kept_noise)[0]
    excess = add_noise([int(row[1] or 0)], excess_noise)[0]
    return Correction(
        c, far, float(kept), float(excess), kept_noise.half_width(confidence), excess_noise.half_width(confidence)
    )


def scaled(
    values: Sequence, intervals: Sequence[tuple[float, float]], correction: Correction, integral: bool
) -> tuple[list, list[tuple[float, float]]]:
    """An estimate's values and intervals under the correction (post-processing): each value
    times the factor; each interval the hull of its ends times the factor's interval's."""
    f, (lo, hi) = correction.factor, correction.interval
    out = [None if v is None else (round(v * f) if integral else v * f) for v in values]
    cis = []
    for a, z in intervals:
        ends = [a * lo, a * hi, z * lo, z * hi]
        cis.append((min(ends), max(ends)))
    return out, cis
