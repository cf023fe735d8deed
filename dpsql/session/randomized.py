"""Randomized-response releases (dpsql/local.py) from a session: one randomized row per person
of a private table, charged at epsilon before any row is drawn."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Sequence

from sqlglot import exp

from .. import local
from ..accounting.cost import Cost
from ..config import TablePolicy
from ..errors import ProgrammingError, unsupported
from ..prepare import positive
from ..sql import build as b
from .charging import charge_told

if TYPE_CHECKING:
    from .pipeline import Session


@dataclass(frozen=True)
class LocalRelease:
    """A randomized-response release: its spec, its rows (category indexes, or OUE bit tuples),
    the charge's receipt and what is left of the budget."""

    spec: local.LocalSpec
    rows: list
    receipt: int
    remaining: dict[str, float]

    def estimates(self, confidence: float = 0.95) -> list[dict[str, Any]]:
        return local.estimates(self.rows, self.spec, confidence)

    def records(self) -> list[tuple]:
        """The rows as the released table holds them: the category's values (k-RR), or one
        boolean per category (OUE)."""
        if self.spec.method == "krr":
            return [self.spec.categories[i] for i in self.rows]
        return [tuple(r) for r in self.rows]

    def column_names(self) -> list[str]:
        if self.spec.method == "krr":
            return list(self.spec.columns)
        return ["=".join(str(v) for v in c) if c[0] is not None else "null" for c in self.spec.categories]


def randomized_response(
    session: Session,
    table: str,
    columns: Sequence[str],
    epsilon: float | Fraction,
    method: str = "auto",
    epsilon_size: float | Fraction | None = None,
    null_category: bool = True,
) -> LocalRelease:
    """One randomized row per person of `table` over `columns` (declared keys), charged at
    epsilon before any row is drawn (dpsql/local.py). The rows may then be published."""
    t = session.policy.table(table)
    if t is None or t.public:
        raise ProgrammingError(
            f"{table} is not a private table of the policy",
            sqlstate="42P01",
            hint="name a private table; public tables need no randomizing",
        )
    keys = []
    for c in columns:
        col = t.columns.get(c.lower())
        if col is None or col.keys is None:
            raise unsupported(
                f"{table}.{c} has no declared keys, so its values cannot be randomized over them",
                hint=f"declare them: columns.{c} = {{ keys = [...] }}",
            )
        keys.append(col.keys)
    size = None if epsilon_size is None else positive(_text(epsilon_size), "epsilon_size")
    spec = local.spec(
        t.name, [c.lower() for c in columns], keys, positive(_text(epsilon), "epsilon"), method, size, null_category
    )
    per_person = person_values(session, t, spec)
    detail = {
        "randomized_response": {
            "table": t.name,
            "columns": list(spec.columns),
            "method": spec.method,
            "epsilon_rr": float(spec.epsilon_rr),
            "epsilon_size": float(spec.epsilon_size),
        }
    }
    text = f"RANDOMIZED RESPONSE {t.name} ({', '.join(spec.columns)}) [{spec.method}]"
    session._headroom = None  # _overlapping judges by the session's latest charge
    charge = session.ledger.charge(
        session.user.name, session.budget_policy, Cost.pure(spec.epsilon), text, detail, session.global_budget
    )
    rows = local.randomize([local.person_category(r, spec) for r in per_person], spec)
    session.ledger.record_release(charge.id, {"rows": len(rows)})
    left = charge.filter.remaining(charge.totals)
    return LocalRelease(spec, rows, charge.id, {k: float(v) for k, v in left.items()})


def person_values(session: Session, table: TablePolicy, spec: local.LocalSpec) -> list[list]:
    """Each person's (tuple of the columns, rows) counts, read from the engine."""
    cols = [exp.column(c, quoted=True) for c in spec.columns]
    if table.row_unit:
        query = exp.select(*cols).from_(exp.to_table(table.name, quoted=True))
    else:
        unit = exp.column(table.privacy_unit, quoted=True)
        query = (
            exp.select(unit, *cols, exp.Count(this=exp.Star()))
            .from_(exp.to_table(table.name, quoted=True))
            .where(b.not_null(unit.copy()))
            .group_by(unit.copy(), *cols)
        )
    with charge_told("nothing was charged"):
        rs = session.engine.execute(session.engine.sql_of(query))
    rows = list(zip(*rs.columns)) if rs.row_count else []
    if table.row_unit:
        return [[(r, 1)] for r in rows]
    people: dict[Any, list] = {}
    for r in rows:
        people.setdefault(r[0], []).append((tuple(r[1:-1]), r[-1]))
    return list(people.values())


def _text(x: float | Fraction) -> str | Fraction:
    return x if isinstance(x, Fraction) else str(x)
