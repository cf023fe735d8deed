"""Which weighted copy of a private table a plan reads (guarantee/bounding.py's WeightedCopy or
SplitCopy), built or brought up to date by the engine; and whether a public table's column is a
unique key, which a split copy's joins need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from ..config import TablePolicy
from ..guarantee.bounding import SplitCopy, WeightedCopy, copy_column, unit_norm
from ..guarantee.measures import COUNT_BITS, Count, Measure, squares_measure, sum_measure
from ..guarantee.plan import Plan
from ..sql import build as b
from .charging import charge_told

if TYPE_CHECKING:
    from .pipeline import Session


def weighting(session: Session, plan: Plan) -> WeightedCopy | SplitCopy | None:
    """The engine's weighted copy of the plan's private table (built or brought up to date
    here) as the plan can use it: whole for a weightable plan, else split by its units' rows
    (filtered, per-group caps, joins on unique keys of public tables); None where neither
    applies."""
    weighted_copy = session.engine.weighted_copy if session.engine.capabilities.weighted_copy else None
    whole = plan.weightable()
    split = None if whole else plan.split_keys()
    if weighted_copy is None or (split is None and not whole):
        return None
    with session._deadline.paused():
        return copy_for(session, plan, weighted_copy, split)


def copy_for(
    session: Session, plan: Plan, weighted_copy, split: list[tuple[str, str]] | None
) -> WeightedCopy | SplitCopy | None:
    if split is not None and not all(unique_key(session, t, c) for t, c in split):
        return None
    source = plan.relation.sources[0]
    stored = session._plans.stored.get((source.table.name, plan.total_rows))
    if stored is None:  # pure in the policy: once per table and limit
        # Nothing ready-weighted where the engine's copies hold the weights only (PostgreSQL, Spark).
        measures = _precomputed(source.table) if session.engine.capabilities.weights_store_sums else {}
        norms = {name: f"{name}_norm" for name, m in measures.items() if m.own_norm}
        stored = session._plans.stored[(source.table.name, plan.total_rows)] = (
            {
                name: copy_column(m, plan.total_rows, norms.get(name)).sql(dialect="duckdb")
                for name, m in measures.items()
            },
            {m.spec(): name for name, m in measures.items()},
            {norms[name]: unit_norm(m).sql(dialect="duckdb") for name, m in measures.items() if name in norms},
        )
    table = weighted_copy(source.table.name, plan.unit.name, plan.total_rows, COUNT_BITS, stored[0], stored[2])
    if split is not None:
        return SplitCopy(
            plan.bounding,
            table,
            plan.bounding.light_rows(plan.literal_domain_size()),
            distinct_units=plan.needs_selection,
        )
    totals = session.engine.copy_totals if session.engine.capabilities.copy_totals else None
    return WeightedCopy(
        plan.bounding,
        table,
        {j: stored[1][m.spec()] for j, m in enumerate(plan.measures) if m.value is not None and m.spec() in stored[1]},
        totals(table) if totals is not None else None,
    )


def unique_key(session: Session, table: str, column: str) -> bool:
    """Whether a public table's column holds each non-NULL value once (public data: asking
    costs nothing), per data version."""
    version = session.engine.data_version()
    seen = session._plans.unique.get((table, column))
    known = seen[1] if seen is not None and seen[0] == version else None
    if known is None:
        tree = b.select(
            [
                b.named(
                    exp.EQ(
                        this=b.count(b.quoted(column)),
                        expression=exp.Count(this=exp.Distinct(expressions=[b.quoted(column)])),
                    ),
                    "u",
                )
            ],
            b.table(table, quote=True),
        )
        with charge_told("nothing was charged"):
            rs = session.engine.execute(session.engine.sql_of(tree, owned=True))
        known = bool(rs.columns[0][0])
        session._plans.unique[(table, column)] = (version, known)
    return known


def _precomputed(table: TablePolicy) -> dict[str, Measure]:
    """What a weighted copy holds ready-weighted, per bounded column at its declared bounds: its
    SUM (centre 0, clipped by its own norm), its AVG/STDDEV sum (centred), its STDDEV sum of
    squares and its non-NULL count; a query that clamps tighter or sums an expression computes
    its own per row."""
    out = {}
    for col in table.columns.values():
        if col.bounded and col.dates is None:
            lo, hi = float(col.lower), float(col.upper)
            column = exp.column(col.name)
            out[f"__dpsql_ws_{col.name}_0"] = sum_measure(column, lo, hi, 0.0, own_norm=True)
            out[f"__dpsql_ws_{col.name}_c"] = sum_measure(column, lo, hi, (lo + hi) / 2)
            out[f"__dpsql_ws_{col.name}_q"] = squares_measure(column, lo, hi)
            out[f"__dpsql_wn_{col.name}"] = Count(column, bits=COUNT_BITS)
    return out
