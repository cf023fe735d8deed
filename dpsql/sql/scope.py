"""Name resolution: the analyst's FROM/JOIN/CTE/subquery structure flattened into one relation.

Row-level CTEs and subqueries are inlined (view merging), so every expression ends up over
base-table columns with dpsql's own table aliases (t0, t1, ...). That gives the rewrite one
place to find the privacy unit, however the analyst nested the query, and guarantees the
analyst's text never reaches the engine: only expressions rebuilt from checked nodes do.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from sqlglot import exp

from ..config import Policy, TablePolicy
from ..errors import (
    ProgrammingError,
    forbidden,
    undefined_column,
    undefined_table,
    unsupported,
)
from .allowlist import check_tree, construct, contains_aggregate
from .bounds import UNBOUNDED, Interval
from .division import integer_division
from .frozen import Owned, TreeMap, Trees
from .limits import QueryLimits
from .literals import check_literals
from .pgfunctions import postgres_meaning

_SCHEMAS = ("", "public", "main")


@dataclass(frozen=True)
class Source:
    """One occurrence of a base table, under dpsql's alias."""

    alias: str
    table: TablePolicy
    columns: Mapping[str, str]  # read-only (a MappingProxyType)
    sample: float | None = None  # TABLESAMPLE BERNOULLI rate, as a fraction
    derived: Any = None  # a per-unit subquery (derived.Derived) instead of a base table

    def __post_init__(self) -> None:
        if not isinstance(self.columns, MappingProxyType):
            object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))

    @property
    def private(self) -> bool:
        return not self.table.public

    def column(self, name: str) -> exp.Column:
        return exp.column(name, table=self.alias)


@dataclass(frozen=True)
class JoinStep:
    kind: str  # "inner" or "left"
    source: Source
    on: Owned[exp.Expression] = Owned()


@dataclass(frozen=True)
class Relation:
    """The FROM clause resolved: sources, joins, conditions and the columns it offers. Frozen:
    a step of the analysis that adds to it makes a new one (`with_where`, `joined`)."""

    sources: tuple[Source, ...]
    joins: tuple[JoinStep, ...] = ()
    where: Trees[exp.Expression] = Trees()
    columns: TreeMap[exp.Expression] = TreeMap()
    unit_rows: int | None = None  # a join of private tables: rows of a unit each keeps (bound_unit_joins)
    # The rows some aggregate reads: where one of these holds (sql/reads.py); empty: every row.
    # Not conditions of the query's groups: domain narrowing (narrow.py) never reads them.
    reads: Trees[exp.Expression] = Trees()

    @property
    def private_sources(self) -> list[Source]:
        return [s for s in self.sources if s.private]

    def with_where(self, *conditions: exp.Expression) -> Relation:
        return replace(self, where=self.where + conditions)


def filtered(rel: Relation, query: exp.Select, scope: Scope, resolver: Resolver) -> Relation:
    """`rel` narrowed by the query's WHERE, resolved in its scope; an aggregate there is refused."""
    where = query.args.get("where")
    if where is None:
        return rel
    if contains_aggregate(where.this):
        raise ProgrammingError(
            "aggregate functions are not allowed in WHERE", sqlstate="42803", hint="use HAVING to filter on aggregates"
        )
    return rel.with_where(scope.resolve(where.this, resolver))


class Scope:
    """What names mean inside one SELECT: user alias -> column -> resolved expression."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, exp.Expression]]] = []
        self.merged: dict[str, exp.Expression] = {}  # JOIN ... USING columns: one unqualified name

    def add(self, alias: str, columns: dict[str, exp.Expression]) -> None:
        if any(a == alias for a, _ in self.items):
            raise ProgrammingError(
                f'table name "{alias}" specified more than once',
                sqlstate="42712",
                hint="give each table in FROM its own alias",
            )
        self.items.append((alias, columns))

    def all_columns(self) -> dict[str, exp.Expression]:
        out: dict[str, exp.Expression] = {}
        for _, cols in self.items:
            for name, e in cols.items():
                out.setdefault(name, e)
        return out

    def lookup(self, col: exp.Column) -> exp.Expression:
        name = col.name.lower()
        qualifier = col.table.lower() if col.table else ""
        if qualifier:
            for alias, cols in self.items:
                if alias == qualifier:
                    if name not in cols:
                        raise undefined_column(f"{qualifier}.{name}", columns=cols)
                    return cols[name]
            raise ProgrammingError(f'missing FROM-clause entry for table "{qualifier}"', sqlstate="42P01")
        if name in self.merged:
            return self.merged[name]
        found = [cols[name] for _, cols in self.items if name in cols]
        if not found:
            raise undefined_column(name, columns=[*self.merged, *(c for _, cols in self.items for c in cols)])
        if len(found) > 1:
            raise ProgrammingError(
                f'column reference "{name}" is ambiguous',
                sqlstate="42702",
                hint="qualify it with its table name or alias",
            )
        return found[0]

    def resolve(self, node: exp.Expression, resolver: "Resolver") -> exp.Expression:
        """A copy of `node` over base columns; nested queries must be public and self-contained."""
        check_tree(node)

        def replace(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column):
                if isinstance(n.this, exp.Star):
                    raise unsupported("a * is only allowed in SELECT lists and COUNT(*)")
                target = self.lookup(n).copy()
                return target if isinstance(target, (exp.Column, exp.Literal)) else exp.Paren(this=target)
            if isinstance(n, (exp.Subquery, exp.Select)):
                return resolver.public_subquery(n)
            return n

        resolved = postgres_meaning(node.copy().transform(replace, copy=False))
        resolved = integer_division(resolved, resolver.column_type)
        check_literals(resolved, resolver.column_type)
        return resolved


class Resolver:
    """Resolves FROM clauses against the policy and the engine's schema."""

    def __init__(self, policy: Policy, schema: Mapping[str, Mapping[str, str]]):
        self.policy = policy
        self.schema = schema
        self._aliases = itertools.count()
        self._columns: dict[str, Mapping[str, str]] = {}  # dpsql alias -> column -> type

    def base_table(self, node: exp.Table) -> Source:
        if not isinstance(node.this, exp.Identifier):
            raise forbidden(
                f"table functions such as {node.this.sql(dialect='postgres')[:40]} are not allowed",
                hint="query the declared tables by name",
            )
        if (node.args.get("catalog") is not None) or node.db.lower() not in _SCHEMAS:
            raise undefined_table(node.sql(dialect="postgres"))
        table = self.policy.table(node.name)
        if table is None or table.name not in self.schema:
            raise undefined_table(node.name, [t for t in self.policy.tables if t in self.schema])
        return self.typed(Source(self.new_alias(), table, self.schema[table.name], _sample_rate(node, table)))

    def new_alias(self) -> str:
        """dpsql's own alias for one more source of this query (t0, t1, ...)."""
        return f"t{next(self._aliases)}"

    def typed(self, source: Source) -> Source:
        """`source`, its column types known to column_type from here on."""
        self._columns[source.alias] = source.columns
        return source

    def column_type(self, column: exp.Column) -> str | None:
        """The type of a resolved column (over a dpsql alias), None when unknown."""
        columns = self._columns.get(column.table, {})
        return columns.get(column.name, columns.get(column.name.lower()))

    # FROM items --------------------------------------------------------------------------
    def from_clause(self, select: exp.Select, ctes: Mapping[str, exp.Query]) -> tuple[Relation, Scope]:
        ctes = self._with(select, ctes)
        from_ = select.args.get("from_")
        if from_ is None:
            raise unsupported("a query over private data needs a FROM clause")
        scope = Scope()
        alias, rel = self._item(from_.this, ctes)
        scope.add(alias, rel.columns)
        for join in select.args.get("joins") or []:
            alias, right = self._item(join.this, ctes)
            scope.add(alias, right.columns)
            kind = self._join_kind(join)
            on = join.args.get("on")
            using = join.args.get("using")
            conds: list[exp.Expression] = []
            if using:
                left_scope = Scope()
                left_scope.items = scope.items[:-1]
                left_scope.merged = dict(scope.merged)
                for ident in using:
                    name = ident.name.lower()
                    left_column = left_scope.lookup(exp.column(name))
                    conds.append(
                        exp.EQ(this=left_column.copy(), expression=scope.items[-1][1].get(name) or _missing(name))
                    )
                    scope.merged[name] = left_column
            elif on is not None:
                conds.append(scope.resolve(on, self))
            elif kind != "cross":
                raise unsupported("a JOIN needs an ON or USING condition")
            rel = self._attach(rel, right, "inner" if kind == "cross" else kind, conds)
        return rel, scope

    @staticmethod
    def _join_kind(join: exp.Join) -> str:
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        if side in ("RIGHT", "FULL"):
            raise unsupported(f"{side} JOIN is not supported", hint="swap the tables and use LEFT JOIN")
        if side == "LEFT":
            return "left"
        if kind == "CROSS" or (not join.args.get("on") and not join.args.get("using") and kind in ("", "CROSS")):
            return "cross"
        if kind in ("", "INNER"):
            return "inner"
        raise unsupported(f"{kind} JOIN is not supported", hint="use JOIN ... ON or LEFT JOIN ... ON")

    def _attach(self, left: Relation, right: Relation, kind: str, conds: list[exp.Expression]) -> Relation:
        """`left` with `right` joined to it, on `conds` (a new relation: relations are frozen)."""
        if kind == "left":
            if len(right.sources) != 1:
                raise unsupported(
                    "a LEFT JOIN to a subquery that joins several tables is not supported",
                    hint="join the tables directly in the outer query",
                )
            on = _conjunction(conds + list(right.where))
            joins, where = (JoinStep("left", right.sources[0], on),), left.where
        elif len(right.sources) == 1:
            joins, where = (JoinStep("inner", right.sources[0], _conjunction(conds)),), left.where + right.where
        else:
            # The condition may name any table of the subquery: apply it once all are joined.
            joins = (JoinStep("inner", right.sources[0], exp.true()), *right.joins)
            where = left.where + conds + right.where
        return replace(left, sources=left.sources + right.sources, joins=left.joins + joins, where=where)

    def _item(self, node: exp.Expression, ctes: Mapping[str, exp.Query]) -> tuple[str, Relation]:
        if isinstance(node, exp.Table):
            user_alias = (node.alias or node.name).lower()
            if not node.db and node.name.lower() in ctes and isinstance(node.this, exp.Identifier):
                if node.args.get("sample") is not None:
                    raise unsupported(
                        "TABLESAMPLE works on tables, not on CTEs", hint="sample the private table itself"
                    )
                rel = self.rowlevel(ctes[node.name.lower()], ctes, user_alias)
                return user_alias, _rename(rel, node)
            source = self.base_table(node)
            cols = {c: source.column(c) for c in source.columns}
            return user_alias, Relation((source,), columns=TreeMap(_rename_columns(cols, node)))
        if isinstance(node, exp.Subquery):
            alias = (node.alias or "subquery").lower()
            return alias, _rename(self.rowlevel(node.this, ctes, alias), node)
        raise unsupported(
            f"{construct(node)} in FROM is not supported",
            hint="FROM may name declared tables, row-level subqueries and CTEs",
        )

    def _with(self, select: exp.Expression, ctes: Mapping[str, exp.Query]) -> dict[str, exp.Query]:
        out = dict(ctes)
        w = select.args.get("with_")
        if w is not None:
            if w.args.get("recursive"):
                raise unsupported("WITH RECURSIVE is not supported")
            for cte in w.expressions:
                body = cte.this
                if cte.args.get("alias") and cte.args["alias"].columns:
                    body = _apply_column_aliases(body, cte.args["alias"].columns)
                out[cte.alias.lower()] = body
        return out

    # Row-level subqueries -------------------------------------------------------------------
    def rowlevel(self, query: exp.Expression, ctes: Mapping[str, exp.Query], alias: str = "subquery") -> Relation:
        """Inline a row-level SELECT (no aggregation, no LIMIT): its columns become expressions.
        A SELECT that aggregates by the privacy unit becomes one derived source instead."""
        if not isinstance(query, exp.Select):
            raise unsupported(
                f"{construct(query)} is not supported in FROM",
                hint="use one SELECT per subquery, combine conditions with OR",
            )
        if query.args.get("group") is not None or any(contains_aggregate(e) for e in query.expressions):
            from .derived import per_unit_relation  # derived builds on this module

            return per_unit_relation(self, query, ctes, alias)
        for key, what in (
            ("having", "HAVING"),
            ("limit", "LIMIT"),
            ("offset", "OFFSET"),
            ("distinct", "DISTINCT"),
            ("qualify", "QUALIFY"),
        ):
            if query.args.get(key) is not None:
                raise unsupported(
                    f"{what} in a subquery over private rows is not supported",
                    hint=f"remove the {what}; a subquery may only filter and compute row-level columns",
                )
        rel, scope = self.from_clause(query, ctes)
        where = query.args.get("where")
        if where is not None:
            rel = rel.with_where(scope.resolve(where.this, self))
        columns: dict[str, exp.Expression] = {}
        for item in query.expressions:
            if isinstance(item, exp.Star):
                columns.update(scope.all_columns())
                continue
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                qualifier = item.table.lower()
                match = [cols for alias, cols in scope.items if alias == qualifier]
                if not match:
                    raise ProgrammingError(f'missing FROM-clause entry for table "{qualifier}"', sqlstate="42P01")
                columns.update(match[0])
                continue
            name = output_name(item)
            columns[name] = scope.resolve(item.unalias() if isinstance(item, exp.Alias) else item, self)
        return replace(rel, columns=TreeMap(columns))

    def public_subquery(self, node: exp.Expression) -> exp.Expression:
        """A subquery inside an expression: allowed over public tables only, uncorrelated; one
        without FROM (Looker's `(SELECT DATE_TRUNC('day', CURRENT_TIMESTAMP) + ...)`) is a
        constant."""
        query = node
        while isinstance(query, exp.Subquery) and not query.alias:
            query = query.this  # ((SELECT ...)): parentheses around the subquery
        if not isinstance(query, exp.Select):
            raise unsupported("only simple SELECT subqueries are allowed in expressions")
        if query.args.get("from_") is None:
            if (
                any(query.args.get(k) is not None for k in ("where", "group", "having", "with_"))
                or len(query.expressions) != 1
            ):
                raise unsupported(
                    "a subquery without FROM may only compute one value",
                    hint="write the expression itself instead of (SELECT expression)",
                )
            check_tree(query.expressions[0], public=True)
            if query.expressions[0].find(exp.Column, exp.Star) is not None:
                raise unsupported("a subquery without FROM cannot name columns")
            return node.copy()
        for table in query.find_all(exp.Table):
            source = self.base_table(table)
            if source.private:
                raise unsupported(
                    f"a subquery over the private table {source.table.name} is not supported here",
                    hint="join the table instead, on the privacy unit column",
                )
        inner = Resolver(self.policy, self.schema)
        rel, scope = inner.from_clause(query, {})
        for e in query.expressions:
            if not isinstance(e, exp.Star):
                scope.resolve(e.unalias() if isinstance(e, exp.Alias) else e, inner)
        if query.args.get("where") is not None:
            scope.resolve(query.args["where"].this, inner)
        return node.copy()


def column_bounds(sources: Sequence[Source]) -> Callable[[exp.Column], Interval]:
    """Bounds of a resolved column, as the policy declares them (unbounded if it does not)."""
    by_alias = {s.alias: s for s in sources}

    def lookup(col: exp.Column) -> Interval:
        source = by_alias.get(col.table)
        policy = source.table.column(col.name) if source is not None else None
        return Interval(policy.lower, policy.upper) if policy is not None and policy.bounded else UNBOUNDED

    return lookup


def check_unit_joins(rel: Relation) -> None:
    """Private tables may only be joined on their privacy unit: otherwise one unit's rows
    could pair with another unit's, and removing one would move both."""
    private = rel.private_sources
    if len(private) <= 1:
        return
    parent = {s.alias: s.alias for s in private}
    unit_cols = {(s.alias, s.table.privacy_unit) for s in private}

    def find(a: str) -> str:
        while parent[a] != a:
            a = parent[a]
        return a

    for cond in list(rel.where) + [j.on for j in rel.joins]:
        for conj in conjuncts(cond):
            if isinstance(conj, exp.EQ) and all(isinstance(x, exp.Column) for x in (conj.this, conj.expression)):
                a, b = conj.this, conj.expression
                if (a.table, a.name) in unit_cols and (b.table, b.name) in unit_cols:
                    parent[find(a.table)] = find(b.table)
    if len({find(s.alias) for s in private}) > 1:
        unit = private[0].table.privacy_unit
        raise forbidden(
            "private tables can only be joined on their privacy unit",
            hint=f"add the join condition ON a.{unit} = b.{unit}",
        )


def bound_unit_joins(rel: Relation, limits: QueryLimits) -> Relation:
    """A join of k private tables (joined on their unit: check_unit_joins) multiplies each
    unit's rows: n1 * n2 * ... rows for one person, so the engine's memory and time would grow
    with the product of one person's row counts, and a query could fail after its charge
    because of one person. Each table then brings at most L rows of a unit into the join (L the
    k-th root of max_join_rows, rewrite._unit_rows), so a unit's joined rows are at most
    max_join_rows, public; a join where L falls below a table's max_rows is refused here,
    before anything runs or is charged. Per-unit subqueries (one row per unit) do not count."""
    tables = [s for s in rel.private_sources if s.derived is None]
    if len(tables) < 2:
        return rel
    keep = limits.join_rows_each(len(tables))
    short = next((s.table for s in tables if keep < s.table.max_rows), None)
    if short is not None:
        raise limits.join_too_wide(len(tables), keep, short.name, short.max_rows)
    return replace(rel, unit_rows=keep)


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The terms of a conjunction (parentheses dropped)."""
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    return [e]


def _sample_rate(node: exp.Table, table: TablePolicy) -> float | None:
    """TABLESAMPLE BERNOULLI (p) on a private table: the query samples privacy units at rate p/100."""
    sample = node.args.get("sample")
    if sample is None:
        return None
    method = sample.args.get("method")
    if method is not None and method.name.upper() != "BERNOULLI":
        raise unsupported(
            f"TABLESAMPLE {method.name.upper()} is not supported", hint="use TABLESAMPLE BERNOULLI (percent)"
        )
    if sample.args.get("seed") is not None:
        raise forbidden(
            "TABLESAMPLE ... REPEATABLE is not allowed: the sample must stay secret for the amplification to hold",
            hint="remove REPEATABLE (...)",
        )
    percent = sample.args.get("percent")
    if not (isinstance(percent, exp.Literal) and not percent.is_string) or not 0 < float(percent.this) <= 100:
        raise unsupported("TABLESAMPLE BERNOULLI needs a percentage above 0 and at most 100")
    if table.public:
        raise unsupported("TABLESAMPLE on a public table is not supported", hint="sample the private table")
    if table.row_unit:
        raise unsupported(f'TABLESAMPLE needs a privacy unit column; {table.name} has privacy_unit = "row"')
    return float(percent.this) / 100


def grouped_item(query: exp.Select, g: exp.Expression) -> exp.Expression:
    """A GROUP BY item as the expression it groups by: GROUP BY 2 is the second select item
    (unaliased); anything else, including an out-of-range position, is itself."""
    if isinstance(g, exp.Literal) and not g.is_string and 1 <= int(g.this) <= len(query.expressions):
        item = query.expressions[int(g.this) - 1]
        return item.unalias() if isinstance(item, exp.Alias) else item
    return g


def as_written(expr: exp.Expression) -> str:
    """An expression as the analyst wrote it, without dpsql's table aliases (t0.age -> age)."""
    return expr.transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) else n).sql(dialect="postgres")


_ALIAS = re.compile(r"\bt\d+\.")  # dpsql's own aliases (`Resolver.new_alias`), qualifying a column


def text_as_written(text: str) -> str:
    """`as_written` for text already rendered from a resolved tree (a clamp's key, a measure's
    description, which may not parse as SQL): dpsql's table aliases dropped (t0.cost -> cost)."""
    return _ALIAS.sub("", text)


def output_name(item: exp.Expression) -> str:
    """The column name PostgreSQL gives a select item."""
    if isinstance(item, exp.Alias):
        return item.alias.lower() if not item.args["alias"].quoted else item.alias
    if isinstance(item, exp.Column):
        return item.name.lower()
    if isinstance(item, (exp.Filter, exp.WithinGroup, exp.Window)):
        return output_name(item.this)
    if isinstance(item, exp.Count):
        return "count"
    if isinstance(item, (exp.VariancePop, exp.Variance, exp.StddevPop, exp.StddevSamp, exp.Stddev)):
        return {
            exp.VariancePop: "var_pop",
            exp.Variance: "variance",
            exp.StddevPop: "stddev_pop",
            exp.StddevSamp: "stddev_samp",
            exp.Stddev: "stddev",
        }[type(item)]
    if isinstance(item, exp.Func):
        return item.sql_name().lower() if not isinstance(item, exp.Anonymous) else str(item.name).lower()
    if isinstance(item, exp.Cast):
        return output_name(item.this)
    return "?column?"


def _rename_columns(cols: Mapping[str, exp.Expression], node: exp.Expression) -> Mapping[str, exp.Expression]:
    alias = node.args.get("alias")
    if alias is None or not alias.columns:
        return cols
    names = [c.name.lower() for c in alias.columns]
    if len(names) > len(cols):
        raise ProgrammingError(
            f"{node.alias or 'table'} has {len(cols)} columns available but {len(names)} columns specified",
            sqlstate="42P10",
        )
    items = list(cols.items())
    return {**{names[i]: items[i][1] for i in range(len(names))}, **dict(items[len(names) :])}


def _rename(rel: Relation, node: exp.Expression) -> Relation:
    return replace(rel, columns=TreeMap(_rename_columns(rel.columns, node)))


def _apply_column_aliases(body: exp.Expression, columns: list[exp.Expression]) -> exp.Expression:
    if not isinstance(body, exp.Select):
        return body
    body = body.copy()
    exprs = body.expressions
    if len(columns) > len(exprs):
        raise ProgrammingError("WITH query has fewer columns than names", sqlstate="42P10")
    body.set(
        "expressions",
        [
            exp.alias_(e.unalias() if isinstance(e, exp.Alias) else e, c.name) if i < len(columns) else e
            for i, (e, c) in enumerate(itertools.zip_longest(exprs, columns))
            if e is not None
        ],
    )
    return body


def _missing(name: str) -> exp.Expression:
    raise undefined_column(name, "the USING clause")


def _conjunction(conds: list[exp.Expression]) -> exp.Expression:
    conds = [c for c in conds if c is not None]
    if not conds:
        return exp.true()
    return exp.and_(*conds) if len(conds) > 1 else conds[0]
