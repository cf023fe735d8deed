"""Post-processing of released values: the analyst's SELECT list, HAVING, ORDER BY, LIMIT.

It runs on a scratch in-memory DuckDB that holds nothing but the noisy table (locked down like
the engine), so SQL semantics of ROUND, CASE or string functions on keys come for free and
cannot touch private data. Intervals follow rows through a hidden row id and are carried
through arithmetic by the same interval rules that derive bounds.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import duckdb
from sqlglot import exp

from .duck_rows import insert_rows
from .errors import OperationalError
from .guarantee.plan import Plan
from .guarantee.release import NoisyTable
from .sql.bounds import UNBOUNDED, Interval, interval
from .sql.frozen import stored


@dataclass
class Output:
    names: list[str]
    types: list[str]
    rows: list[tuple]
    ci: dict[str, list[tuple[float, float] | None] | None]


def _columns(noisy: NoisyTable) -> list[tuple[str, str, list[Any]]]:
    cols = [(f"k{i}", t, c) for i, (t, c) in enumerate(zip(noisy.key_types, noisy.keys))]
    cols += [(f"a{i}", t, c) for i, (t, c) in enumerate(zip(noisy.estimate_types, noisy.estimates))]
    # each estimate's interval, for DP_INTERVAL_LOW / DP_INTERVAL_HIGH (sql/outer.py)
    cols += [
        (f"a{i}_{end}", "DOUBLE", [ci[k] for ci in cis])
        for i, cis in enumerate(noisy.intervals)
        for k, end in ((0, "lo"), (1, "hi"))
    ]
    return cols


def is_trivial(post: exp.Select) -> bool:
    """Whether the outer part only picks result columns (no SQL needs to run over them)."""
    if any(post.args.get(k) is not None for k in ("where", "order", "limit", "offset")):
        return False
    return all(isinstance(i, exp.Alias) and isinstance(i.this, exp.Column) for i in post.expressions)


@dataclass(frozen=True)
class _Outline:
    """What `run` reads of an outer part, walked once per outer part: its output names, the
    columns it picks when it only picks columns (None: SQL runs), and each item's interval
    source (the estimate column it is, None when it has no interval, or its tree to derive one)."""

    names: tuple[str, ...]
    picked: tuple[str, ...] | None
    intervals: tuple[str | exp.Expression | None, ...]


def _outline(post: exp.Select) -> _Outline:
    return _Outline(
        tuple(i.alias for i in post.expressions),
        tuple(i.this.name for i in post.expressions) if is_trivial(post) else None,
        tuple(_interval_source(i.this) for i in post.expressions),
    )


OUTLINES_KEPT = 256


class PostProcessor:
    def __init__(self) -> None:
        self._con: duckdb.DuckDBPyConnection | None = None
        # by the identity of a plan's outer part (sql/frozen.stored), kept with it: (tree, outline)
        self._outlines: OrderedDict[int, tuple[object, _Outline]] = OrderedDict()

    def _outline(self, key: object, post: Callable[[], exp.Select]) -> _Outline:
        hit = self._outlines.get(id(key))
        if hit is not None and hit[0] is key:
            self._outlines.move_to_end(id(key))
            return hit[1]
        outline = _outline(post())
        self._outlines[id(key)] = (key, outline)  # the reference keeps the id from being reused
        if len(self._outlines) > OUTLINES_KEPT:
            self._outlines.popitem(last=False)
        return outline

    def _scratch(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            con = duckdb.connect(
                ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
            )
            con.execute("SET enable_external_access = false")
            # A noisy divisor can be 0 (a small group's noisy COUNT): NULL, as the rewrite's
            # expressions that cannot fail give, not an error after the charge. DuckDB before 2.0
            # has no such setting and gives NULL anyway.
            with contextlib.suppress(duckdb.Error):
                con.execute("SET error_on_division_by_zero = false")
            con.execute("SET lock_configuration = true")
            self._con = con
        return self._con

    def run_plan(self, plan: Plan, noisy: NoisyTable) -> Output:
        """`run` over the plan's outer part, which is walked once per plan (its outline kept by
        the identity of the plan's own tree) and, when it only picks columns, not even read:
        reading `plan.post` copies the tree (sql/frozen.py), which costs more than the rest."""
        return self._run(self._outline(stored(plan, "post"), lambda: plan.post), lambda: plan.post, noisy)

    def run(self, post: exp.Select, noisy: NoisyTable) -> Output:
        return self._run(_outline(post), lambda: post, noisy)

    def _run(self, outline: _Outline, post: Callable[[], exp.Select], noisy: NoisyTable) -> Output:
        cols = _columns(noisy)
        by_name = {name: (t, c) for name, t, c in cols}
        if outline.picked is not None:
            picked = [by_name[name] for name in outline.picked]
            rows = list(zip(*[c for _, c in picked])) if noisy.n_rows else []
            order = list(range(noisy.n_rows))
            types = [t for t, _ in picked]
        else:
            rows, types, order = self._run_sql(post(), cols, noisy.n_rows, charged=True)
        ci = {}
        for source, name in zip(outline.intervals, outline.names):
            ci[name] = _intervals(source, order, noisy, by_name)
        return Output(list(outline.names), types, [tuple(_finite(v) for v in r) for r in rows], ci)

    def describe(
        self, post: exp.Select, key_types: list[str], estimate_types: list[str]
    ) -> tuple[list[str], list[str]]:
        """Output names and types, from a noisy table of one NULL row: nothing private is
        involved, and whatever fails for every value (a bad ORDER BY position, 'abc' + a count)
        fails here, before any charge."""
        cols = [(f"k{i}", t, [None]) for i, t in enumerate(key_types)]
        cols += [(f"a{i}", t, [None]) for i, t in enumerate(estimate_types)]
        cols += [(f"a{i}_{end}", "DOUBLE", [None]) for i in range(len(estimate_types)) for end in ("lo", "hi")]
        _, types, _ = self._run_sql(post, cols, 1)
        return [i.alias for i in post.expressions], types

    def run_released(
        self, outer: exp.Select, alias: str, names: list[str], types: list[str], rows: list[tuple]
    ) -> tuple[list[str], list[str], list[tuple]]:
        """An outer query over a DP query's released rows, held as the table `alias` (names made
        unique as DuckDB needs): post-processing, so its messages may be shown."""
        con = self._scratch()
        unique: list[str] = []
        for n in names:
            name, k = n, 1
            while name.lower() in {u.lower() for u in unique}:
                name, k = f"{n}_{k}", k + 1
            unique.append(name)
        table = '"' + alias.replace('"', '""') + '"'
        defs = ", ".join('"' + n.replace('"', '""') + f'" {t}' for n, t in zip(unique, types))
        try:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {table} ({defs})")
            insert_rows(con, table, rows, len(unique))
            cur = con.execute(outer.sql(dialect="duckdb"))
            out = cur.fetchall()
            return (
                [d[0] for d in cur.description],
                [str(d[1]) for d in cur.description],
                [tuple(_finite(v) for v in r) for r in out],
            )
        except duckdb.Error as e:
            raise OperationalError(
                f"the outer query over the released rows failed: {e}",
                sqlstate="22000",
                hint="it runs over the inner query's released columns only",
            ) from None
        finally:
            con.execute(f"DROP TABLE IF EXISTS {table}")

    def _run_sql(self, post: exp.Select, cols, n_rows: int, charged: bool = False):
        con = self._scratch()
        defs = ", ".join(f"{name} {t}" for name, t, _ in cols)
        con.execute(f"CREATE OR REPLACE TEMP TABLE noisy ({defs}{', ' if defs else ''}__row BIGINT)")
        if n_rows:
            data = (
                [(*r, i) for i, r in enumerate(zip(*[c for _, _, c in cols]))]
                if cols
                else [(i,) for i in range(n_rows)]
            )
            insert_rows(con, "noisy", data, len(cols) + 1)
        query = post.copy()
        query.set("expressions", [*query.expressions, exp.column("__row")])
        try:
            cur = con.execute(query.sql(dialect="duckdb"))
            rows = cur.fetchall()
            types = [str(d[1]) for d in cur.description][:-1]
        except duckdb.Error as e:
            # Only noisy, released values are in this database: its messages are safe to show.
            raise OperationalError(
                f"post-processing of the noisy result failed: {e}",
                sqlstate="22000",
                hint="the query's cost stays charged: its noisy answer had been drawn; "
                "make the outer expressions valid for any value (CAST to a wider type, NULLIF)"
                if charged
                else None,
            ) from None
        order = [r[-1] for r in rows]
        return [tuple(r[:-1]) for r in rows], types, order


def _finite(value: Any) -> Any:
    """No infinity or NaN leaves: arithmetic on noisy values that divides by a zero (or
    overflows) gives NULL, as the engine's total expressions would."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _finite_interval(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if ci is None or not all(math.isfinite(x) for x in ci) else ci


def _interval_source(node: exp.Expression) -> str | exp.Expression | None:
    """Where an output item's interval comes from: None (no estimate, or an interval's end,
    DP_INTERVAL_*, which has no interval itself), the estimate's column it is, or its tree."""
    used = _estimates_read(node)
    if not used or any(not c[1:].isdigit() for c in used):
        return None
    return node.name if isinstance(node, exp.Column) else node


def _estimates_read(node: exp.Expression) -> set[str]:
    return {c.name for c in node.find_all(exp.Column) if c.name.startswith("a")}


def _intervals(source: str | exp.Expression | None, order: list[int], noisy: NoisyTable, by_name) -> list | None:
    if source is None:
        return None
    if isinstance(source, str):  # the estimate itself
        if source not in by_name:
            return None
        i = int(source[1:])
        return [_finite_interval(noisy.intervals[i][r]) for r in order]
    node = source
    if any(c not in by_name for c in _estimates_read(node)):
        return None
    out = []
    for r in order:

        def lookup(col: exp.Column, r=r) -> Interval:
            name = col.name
            if name.startswith("a") and name[1:].isdigit() and name in by_name:
                lo, hi = noisy.intervals[int(name[1:])][r]
                return Interval(lo, hi)
            if name.startswith("k") and name in by_name:
                v = by_name[name][1][r]
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    return Interval(float(v), float(v))
            return UNBOUNDED

        iv = interval(node, lookup)
        out.append((iv.lo, iv.hi) if iv.finite else None)
    return out
