"""The outer query: what the analyst's SELECT computes from the released aggregates.

Each aggregate becomes a column a<i> of the noisy table (its estimate, registered by analysis
through `estimate`) and each group-key expression a column k<j>; select items, HAVING, ORDER BY
and LIMIT are rebuilt over those columns only. postprocess.py runs the result over released
values, so nothing here needs a privacy argument beyond that: a reference to anything else
fails to bind there.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

from sqlglot import exp

from ..errors import ProgrammingError, forbidden, unsupported
from .allowlist import DP_AGGREGATES, check_node, check_tree, contains_aggregate, is_aggregate, order_statistic
from .division import integral
from .mean_ratio import as_mean
from .pgfunctions import postgres_meaning
from .scope import Resolver, Scope, output_name

INTERVAL_FUNCTIONS = {"DP_INTERVAL_LOW": "lo", "DP_INTERVAL_HIGH": "hi"}


def row_count(value: exp.Expression, clause: str) -> int | None:
    """A LIMIT or OFFSET as PostgreSQL reads it: a whole number, also cast (`LIMIT $1::INTEGER`,
    as SQLAlchemy writes it, arrives as `5::INTEGER`; a cast of 2.5 rounds as PostgreSQL's
    does); None for LIMIT ALL and LIMIT NULL, which mean no limit."""
    value = value.unnest()
    if isinstance(value, exp.Null) or isinstance(value, exp.Var) and value.name.upper() == "ALL":
        return None
    integer_cast = isinstance(value, (exp.Cast, exp.TryCast)) and value.to.this in exp.DataType.INTEGER_TYPES
    inner = value.this if integer_cast else value
    negative = isinstance(inner, exp.Neg)
    inner = inner.this if negative else inner
    if isinstance(inner, exp.Null) and integer_cast:
        return None
    if isinstance(inner, exp.Literal) and (integer_cast or not inner.is_string):
        try:
            number = Fraction(inner.this.strip())
        except ValueError:
            number = None
        if number is not None and (number.denominator == 1 or integer_cast):
            count = -round_half_away(number) if negative else round_half_away(number)
            if count < 0:
                raise ProgrammingError(
                    f"{clause} must not be negative",
                    sqlstate="2201W" if clause == "LIMIT" else "2201X",
                    hint=f"write {clause} 10, for example",
                )
            if count >= 2**63:
                raise ProgrammingError(
                    f"{clause} {count} is out of range for bigint",
                    sqlstate="22003",
                    hint=f"{clause} takes at most 9223372036854775807; nothing was charged",
                )
            return count
    raise unsupported(
        f"{clause} must be a whole number, not {value.sql(dialect='postgres')[:40]}",
        hint=f"write {clause} 10, for example (a cast such as {clause} 10::INTEGER is fine too)",
    )


def _check_position(target: exp.Literal, items: int) -> None:
    """ORDER BY n names the n-th select item, as PostgreSQL reads it, with its errors: the
    post-processor would otherwise bind it over its own columns and name them."""
    try:
        position = Fraction(target.this)
    except ValueError:
        position = None
    if position is None or position.denominator != 1:
        raise ProgrammingError(
            f"non-integer constant in ORDER BY: {target.this}",
            sqlstate="42601",
            hint="ORDER BY a select item's position (1, 2, ...), name or expression",
        )
    if not 1 <= position <= items:
        raise ProgrammingError(
            f"ORDER BY position {position} is not in select list",
            sqlstate="42P10",
            hint=f"the query selects {items} item{'s' if items != 1 else ''}: ORDER BY 1"
            f"{f' to {items}' if items > 1 else ''}, or by a name; nothing was charged",
        )


def round_half_away(x: Fraction) -> int:
    """PostgreSQL's numeric-to-integer rounding: halves away from zero."""
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


class OuterQuery:
    """`post`: the outer SELECT over the table noisy; `names`: its output names; `items`: per
    select item, the estimates it uses (for per-item epsilon weights)."""

    def __init__(
        self, tree: exp.Select, scope: Scope, resolver: Resolver, keys: list, estimate: Callable[[exp.Expression], int]
    ):
        self.tree, self.scope, self.resolver, self.keys = tree, scope, resolver, keys
        self._estimate = estimate
        self.items: list[set[int]] = []
        self._current: set[int] | None = None
        self._aggregate_aliases: dict[str, int] = {}  # output name -> its estimate, for DP_INTERVAL_*
        self.means_read: dict[str, str] = {}  # a ratio as written -> the AVG it is answered as (mean_ratio)
        self.post, self.names = self._post()

    def _post(self) -> tuple[exp.Select, list[str]]:
        """The outer SELECT over the noisy table: select items, HAVING, ORDER BY, LIMIT."""
        key_sql = {k.expr.sql(): i for i, k in enumerate(self.keys)}
        names: list[str] = []
        items: list[exp.Expression] = []
        for item in self.tree.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
                raise forbidden(
                    "SELECT * over a private table would return raw rows",
                    hint="list the aggregates you want, e.g. SELECT COUNT(*) ...",
                )
            name = output_name(item)
            inner = item.unalias() if isinstance(item, exp.Alias) else item
            names.append(name)
            self._current = set()
            bound = self._bind(inner, key_sql, set())
            if isinstance(bound, exp.Column) and bound.name[1:].isdigit() and bound.name.startswith("a"):
                self._aggregate_aliases.setdefault(name.lower(), int(bound.name[1:]))
            items.append(exp.alias_(bound, name, quoted=True))
            self.items.append(self._current)
            self._current = None
        aliases = set(names)
        # Built in place: sqlglot's chained builders copy the tree (and parse strings) per step.
        post = exp.Select(expressions=items, from_=exp.From(this=exp.Table(this=exp.to_identifier("noisy"))))
        having = self.tree.args.get("having")
        if having is not None:
            post.set("where", exp.Where(this=self._bind(having.this, key_sql, aliases)))
        order = self.tree.args.get("order")
        if order is not None:
            ordered = []
            for o in order.expressions:
                target = o.this
                if isinstance(target, exp.Literal) and not target.is_string:
                    _check_position(target, len(items))
                    ordered.append(o.copy())
                    continue
                new = o.copy()
                new.set("this", self._bind(target, key_sql, aliases))
                ordered.append(new)
            post.set("order", exp.Order(expressions=ordered))
        for key in ("limit", "offset"):
            clause = self.tree.args.get(key)
            if isinstance(clause, exp.Fetch):  # FETCH FIRST [n] ROW(S) ONLY: a LIMIT (n defaults to 1)
                options = clause.args.get("limit_options")
                if options is not None and (options.args.get("with_ties") or options.args.get("percent")):
                    raise unsupported(
                        "FETCH FIRST ... WITH TIES or PERCENT is not supported",
                        hint="use FETCH FIRST n ROWS ONLY, or LIMIT n",
                    )
                count = row_count(clause.args.get("count") or exp.Literal.number(1), "FETCH FIRST")
                if count is not None:
                    post.set("limit", exp.Limit(expression=exp.Literal.number(count)))
            elif clause is not None:
                count = row_count(clause.expression, key.upper())
                if count is not None:
                    post.set(key, type(clause)(expression=exp.Literal.number(count)))
        return postgres_meaning(post), names

    def _bind(self, node: exp.Expression, key_sql: dict[str, int], aliases: set[str]) -> exp.Expression:
        """Replace aggregates by noisy columns a<i>, group-key expressions by k<j>, and
        DP_INTERVAL_LOW/HIGH(aggregate or its alias) by its interval's ends a<i>_lo, a<i>_hi."""
        if isinstance(node, exp.Anonymous) and node.name.upper() in INTERVAL_FUNCTIONS:
            return self._interval(node, key_sql, aliases)
        mean = as_mean(node)
        if mean is not None:  # SUM(x) / COUNT(x): AVG(x), one estimate with its own estimator
            self.means_read[node.sql(dialect="postgres")] = mean.avg.sql(dialect="postgres")
            bound = self._bind(mean.avg, key_sql, aliases)
            if mean.plain and integral(self.scope.resolve(mean.value, self.resolver), self.resolver.column_type):
                return exp.Cast(this=exp.Trunc(this=bound), to=exp.DataType.build("BIGINT"))
            return bound
        if is_aggregate(node):
            if not isinstance(node, (exp.Filter,) + DP_AGGREGATES) and order_statistic(node) is None:
                check_tree(node)
            index = self._estimate(node)
            if self._current is not None:
                self._current.add(index)
            return exp.column(f"a{index}")
        if isinstance(node, exp.Window):
            check_tree(node)
        if (
            not contains_aggregate(node)
            and not _has_interval(node)
            and not isinstance(node, (exp.Literal, exp.Boolean, exp.Null))
        ):
            if isinstance(node, exp.Column) and not node.table and node.name.lower() in {a.lower() for a in aliases}:
                try:
                    self.scope.lookup(node)
                except ProgrammingError:
                    return exp.column(next(a for a in aliases if a.lower() == node.name.lower()), quoted=True)
            if node.find(exp.Column) is not None:
                resolved = self.scope.resolve(node, self.resolver)
                if resolved.sql() in key_sql:
                    return exp.column(f"k{key_sql[resolved.sql()]}")
                if isinstance(resolved, exp.Paren) and resolved.this.sql() in key_sql:
                    return exp.column(f"k{key_sql[resolved.this.sql()]}")
                if isinstance(node, exp.Column):
                    raise ProgrammingError(
                        f'column "{node.sql(dialect="postgres")}" must appear in the GROUP BY clause '
                        "or be used in an aggregate function",
                        sqlstate="42803",
                    )
        if isinstance(node, (exp.Subquery, exp.Select)):
            raise unsupported("subqueries over aggregates are not supported")
        check_node(node, public=True)  # over released values and keys only: the public functions too
        # A new node over bound children (a deep copy would copy each subtree once per level).
        args = {}
        for k, v in node.args.items():
            if isinstance(v, exp.Expression):
                v = self._bind(v, key_sql, aliases)
            elif isinstance(v, list):
                v = [self._bind(x, key_sql, aliases) if isinstance(x, exp.Expression) else x for x in v]
            args[k] = v
        return type(node)(**args)

    def _interval(self, node: exp.Anonymous, key_sql: dict[str, int], aliases: set[str]) -> exp.Expression:
        """An end of the interval of one aggregate at the session's confidence (post-processing
        of its noisy value and the noise's public scale, as Snowflake's DP_INTERVAL_* are)."""
        name = node.name.upper()
        args = node.expressions
        usage = f"{name}(aggregate) or {name}(alias of an aggregate in the select list before it)"
        if len(args) != 1:
            raise unsupported(f"{name} takes one argument", hint=usage)
        arg = args[0]
        if isinstance(arg, exp.Column) and not arg.table and arg.name.lower() in self._aggregate_aliases:
            index = self._aggregate_aliases[arg.name.lower()]
        elif is_aggregate(arg):
            bound = self._bind(arg, key_sql, aliases)
            index = int(bound.name[1:])
        else:
            raise unsupported(f"{name}({arg.sql(dialect='postgres')}): the argument is not an aggregate", hint=usage)
        return exp.column(f"a{index}_{INTERVAL_FUNCTIONS[name]}")


def _has_interval(node: exp.Expression) -> bool:
    return any(isinstance(n, exp.Anonymous) and n.name.upper() in INTERVAL_FUNCTIONS for n in node.walk())
