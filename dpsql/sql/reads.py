"""The rows a query's aggregates read. `AGG(x) FILTER (WHERE c)` is `AGG(CASE WHEN c THEN x END)`
(arguments.unfilter): a row where c does not hold gives that aggregate NULL, which no measure
counts or sums. When every aggregate's argument is such a CASE (a FILTER, or a CASE written
without ELSE), a row where none of the conditions holds adds nothing to any measure, yet it
would still count among its unit's rows: in a total bound's weight C / max(n, C), in the groups a
unit reaches, and in the profile auto bounds reads (auto_bounds.py). The analysis then records
the conditions on the plan's relation (`Relation.reads`), and the bounded query keeps only rows
where one holds (rewrite.py), so that n, the weights, the profile and the release see the rows
some aggregate reads.

Pure: the conditions are the query's own text. Recorded only where dropping those rows cannot
change which groups are released (the analysis's call, sql/analyze.py): keys with a declared
domain, or no GROUP BY. Under partition selection the groups released depend on the rows per
group, and a group whose rows no aggregate reads would no longer be a candidate.
"""

from __future__ import annotations

from typing import Iterable

from sqlglot import exp


def case_conditions(value: exp.Expression | None) -> tuple[exp.Expression, ...] | None:
    """The conditions of `value` when it is CASE WHEN c1 THEN .. [WHEN c2 THEN ..] END without
    ELSE (a searched CASE: where none holds, the value is NULL); None for any other value, and
    for None (an aggregate of every row: COUNT(*), COUNT(DISTINCT unit))."""
    value = value.unnest() if value is not None else None
    if not isinstance(value, exp.Case) or value.args.get("this") is not None or value.args.get("default") is not None:
        return None
    ifs = value.args.get("ifs") or []
    return tuple(i.this for i in ifs) if ifs else None


def read_conditions(values: Iterable[exp.Expression | None]) -> tuple[exp.Expression, ...]:
    """The conditions one of which holds on every row some aggregate reads, each once (by its
    SQL), given each aggregate's argument; () when an aggregate may read any row."""
    out: dict[str, exp.Expression] = {}
    for value in values:
        conditions = case_conditions(value)
        if conditions is None:
            return ()
        for c in conditions:
            out.setdefault(c.sql(), c)
    return tuple(out.values())


def filtered_column(value: exp.Expression | None) -> tuple[exp.Column, exp.Expression] | None:
    """(column, c) for CASE WHEN c THEN column END: a value that is the column where c holds and
    NULL elsewhere, whose range c narrows as a WHERE would (auto_bounds.columns, sql/ranges.py)."""
    conditions = case_conditions(value)
    if value is None or conditions is None or len(conditions) != 1:
        return None
    then = value.unnest().args["ifs"][0].args.get("true")
    then = then.unnest() if then is not None else None
    return (then, conditions[0]) if isinstance(then, exp.Column) else None
