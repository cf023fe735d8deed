"""Privacy analysis of one SELECT: what is measured, with which bounds, over which groups.

Pure (no I/O): the output depends on the query text, the policy and the schema only, so a
refusal here reveals nothing about the data and charges nothing.

The plan separates *measures* (noisy vectors, one value per group: a bounded count or a
fixed-point sum) from *estimates* (the aggregates the analyst wrote, computed from measures),
so COUNT(x), SUM(x) and AVG(x) in one query share their noisy counts and sums.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from sqlglot import exp

from ..config import Policy
from ..errors import ProgrammingError, forbidden, invalid_parameter, unsupported
from ..guarantee.bounding import TotalCap, choose
from ..guarantee.families import FAMILIES, QUANTILE_BINS, QUANTILES, SPREAD_FUNCTIONS, Operand, family  # noqa: F401 (QUANTILE_BINS: re-exported)
from ..guarantee.measures import COUNT_BITS, Measure, Sum
from ..guarantee.plan import Estimate, GroupKey, Plan, literal_domain_size_of
from . import build as b
from .allowlist import (
    DP_AGGREGATES,
    SPREAD_AGGREGATES,
    check_node,
    check_tree,
    construct,
    contains_aggregate,
    order_statistic,
)
from .arguments import DISTINCT_HINT, distinct_keys, quantile_fraction, unbounded, unfilter
from .bounds import Interval, interval
from .division import integer_division, integral
from .domains import column_values, image, literal_domain
from .frozen import Trees
from .nonfailing import try_casts
from .options import QueryOptions
from .outer import OuterQuery
from .pgfunctions import postgres_meaning
from .public import PublicQuery, _public_column_type, _unqualified, check_rows_query, touches_private
from .reads import read_conditions
from .scope import (
    Relation,
    Resolver,
    Source,
    bound_unit_joins,
    check_unit_joins,
    column_bounds,
    filtered,
    output_name,
)


def analyze(
    tree: exp.Query,
    policy: Policy,
    schema: Mapping[str, Mapping[str, str]],
    options: QueryOptions | None = None,
    mechanism: str = "laplace",
) -> Plan | PublicQuery:
    """Analyze a parsed SELECT into its final plan; raise an error that names the construct
    and the fix. The query's own options (contribution limits) and the noise mechanism are
    taken in before any bounding or precision choice, so nothing changes the plan afterwards."""
    if not isinstance(tree, exp.Select):
        raise unsupported(
            f"{construct(tree)} is not supported: dpsql answers one SELECT at a time",
            hint="send each SELECT on its own",
        )
    resolver = Resolver(policy, schema)
    if not touches_private(tree, policy):
        check_rows_query(tree, resolver)
        public = _as_select(postgres_meaning(_as_select(_unqualified(tree))))
        if public is tree and tree.find(exp.Div) is not None:
            public = tree.copy()  # the division pass works in place; the caller's tree stays as it was
        return PublicQuery(_as_select(integer_division(public, _public_column_type(public, schema))))
    return _Analysis(tree, policy, resolver, options or QueryOptions(), mechanism).run()


class _Analysis:
    def __init__(self, tree: exp.Select, policy: Policy, resolver: Resolver, options: QueryOptions, mechanism: str):
        self.tree = tree
        self.options = options
        self.mechanism = mechanism
        self.policy = policy
        self.resolver = resolver
        self.measures: list[Measure] = []
        self.estimates: list[Estimate] = []
        self._estimate_index: dict[str, int] = {}
        self._arguments: dict[int, exp.Expression | None] = {}  # each estimate's argument (None: every row)
        self.max_contributions: int | None = None

    def run(self) -> Plan:
        tree = self.tree
        if tree.args.get("distinct") is not None:
            raise unsupported(
                "SELECT DISTINCT over private rows is not supported",
                hint="use GROUP BY with COUNT(*) to see the groups",
            )
        for key in ("qualify",):
            if tree.args.get(key) is not None:
                raise unsupported("QUALIFY is not supported")
        for item in tree.expressions:
            window = item.find(exp.Window)
            if window is not None:
                check_node(window)  # refused with its own reason, before any column complaint
        rel, scope = self.resolver.from_clause(tree, {})
        self.rel, self.scope = rel, scope
        self.rel = filtered(rel, tree, scope, self.resolver)
        unit, unit_in_hash, row_id_source, max_groups, max_rows = self._unit()
        max_groups, max_rows = self._tightened(unit if row_id_source is None else None, max_groups, max_rows)
        self.unit = unit if row_id_source is None else None
        keys = self._group_keys()
        self.keys = keys
        domain = literal_domain_size_of(keys)
        bounding = choose(
            unit=unit is not None,
            row_ids=row_id_source is not None,
            keyed=bool(keys),
            declared=all(k.declared for k in keys),
            domain_size=domain,
            max_groups=max_groups,
            max_rows=max_rows,
            max_contributions=self.max_contributions,
            mechanism=self.mechanism,
            sampled=any(s.sample is not None for s in self.rel.sources),
            unit_in_hash=unit_in_hash,
        )
        # Counts are fixed point when a unit's shares are scaled over many groups; otherwise a
        # share scaled under a total bound is floored to whole rows (exact unless a unit exceeds
        # its limit, and then at most one row short per group).
        self.count_bits = COUNT_BITS if bounding.scale_groups else 0
        # A quantile's histogram has many cells per group: floored to whole rows, a unit over its
        # total bound with rows in several bins would add nothing to any (under C = 1, a median read
        # only the units whose rows all fell in one bin, the clamp's last bin most), so its shares
        # are fixed point under a total bound.
        self.cell_bits = COUNT_BITS if isinstance(bounding, TotalCap) else self.count_bits
        rates = {s.sample for s in self.rel.sources if s.sample is not None}
        if len(rates) > 1:
            raise unsupported("several TABLESAMPLE rates in one query", hint="sample one private table")
        self.sample_rate = rates.pop() if rates else None
        if not keys and not any(contains_aggregate(e) for e in tree.expressions):
            table = self.rel.private_sources[0].table
            bounded = next((c for c, col in table.columns.items() if col.bounded), None)
            example = f"SELECT COUNT(*){f', AVG({bounded})' if bounded else ''} FROM {table.name}"
            raise forbidden(
                "selecting rows of a private table is not allowed", hint=f"ask for an aggregate instead, e.g. {example}"
            )
        outer = OuterQuery(self.tree, self.scope, self.resolver, self.keys, self._estimate)
        post, names = outer.post, outer.names
        if not self.estimates:
            raise forbidden(
                "a query over private tables must compute at least one aggregate",
                hint="add COUNT(*) to see the groups; group keys alone would reveal which exist",
            )
        self._share_sums()
        self.rel = self._reading(keys)
        # COUNT(*) / 2 as PostgreSQL divides it; a cast of a noisy value that fails (SUM(x)::smallint
        # out of range) is NULL, as at row level: the outer query runs after the charge, and must
        # not lose a charged answer.
        post = _as_select(try_casts(integer_division(post, self._noisy_column_type)))
        return Plan(
            relation=self.rel,
            unit=unit,
            unit_in_hash=unit_in_hash,
            row_id_source=row_id_source,
            keys=tuple(keys),
            measures=tuple(self.measures),
            estimates=tuple(self.estimates),
            post=post,
            output_names=tuple(names),
            max_groups=max_groups,
            max_rows=max_rows,
            bounding=bounding,
            sample_rate=self.sample_rate,
            item_estimates=tuple(frozenset(used) for used in outer.items),
            max_contributions=self.max_contributions,
            means_read=tuple(outer.means_read.items()),
        )

    # The privacy unit ----------------------------------------------------------------------
    def _unit(self) -> tuple[exp.Expression | None, bool, str | None, int, int]:
        private = self.rel.private_sources
        if not private:  # the private table is read elsewhere: a subquery in SELECT, ORDER BY or HAVING
            raise unsupported(
                "a private table may be read only in the FROM clause of a DP query",
                hint="join the private table in FROM and aggregate it there: "
                "SELECT p.key, COUNT(*) FROM public_table p JOIN private_table t ON t.key = p.key "
                "GROUP BY p.key",
            )
        driver = private[0]
        if driver.table.row_unit:
            if len(private) > 1:
                raise unsupported(
                    f'the table {driver.table.name} has privacy_unit = "row" '
                    "and cannot be joined with another private table",
                    hint="declare a privacy unit column shared by both tables",
                )
            if len(self.rel.sources) == 1:
                return None, False, None, 1, 1
            # A join may repeat a row: give every base row an id and bound per id.
            return exp.column("__dpsql_rid", table=driver.alias), False, driver.alias, 1, 1
        units = {s.table.privacy_unit for s in private}
        if len(units) > 1:
            names = ", ".join(f"{s.table.name} ({s.table.privacy_unit})" for s in private)
            raise unsupported(
                f"private tables with different privacy units cannot be joined: {names}",
                hint="join private tables only when they share a privacy unit column",
            )
        if any(s.table.row_unit for s in private):
            raise unsupported('a table with privacy_unit = "row" cannot be joined with another private table')
        check_unit_joins(self.rel)
        self.rel = bound_unit_joins(self.rel, self.policy.limits)
        unit_name = driver.table.privacy_unit
        if unit_name is None:
            raise TypeError(f"private table {driver.table.name} without a privacy unit")  # the policy requires one
        unit = driver.column(unit_name)
        self.rel = self.rel.with_where(b.not_null(unit.copy()))
        limits = [c for c in (s.table.max_contributions for s in private) if c is not None]
        self.max_contributions = max(limits) if len(limits) == len(private) else None
        ceiling = max((s.table.max_contributions or s.table.max_groups * s.table.max_rows) for s in private)
        if self.options.max_contributions is not None:  # a total bound chosen per query: never above the policy's
            self.max_contributions = max(1, min(ceiling, self.options.max_contributions))
        return (unit, True, None, max(s.table.max_groups for s in private), max(s.table.max_rows for s in private))

    def _tightened(self, unit: exp.Expression | None, max_groups: int, max_rows: int) -> tuple[int, int]:
        """A query's own contribution limits may tighten the policy's, never loosen them."""
        o = self.options
        if o.privacy_unit is not None:
            name = unit.name if isinstance(unit, exp.Column) else "row"
            if o.privacy_unit != name:
                raise invalid_parameter(
                    f"privacy_unit_column = {o.privacy_unit}, but the policy's privacy unit here is {name}",
                    hint="the policy fixes the privacy unit; drop the option or name it",
                )
        return (
            max_groups if o.max_groups is None else min(max_groups, o.max_groups),
            max_rows if o.max_rows is None else min(max_rows, o.max_rows),
        )

    # GROUP BY ----------------------------------------------------------------------------
    def _group_keys(self) -> list[GroupKey]:
        group = self.tree.args.get("group")
        if group is None:
            return []
        if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
            raise unsupported("ROLLUP, CUBE and GROUPING SETS are not supported", hint="send one query per grouping")
        items = self.tree.expressions
        aliases = {output_name(i): i for i in items if isinstance(i, exp.Alias)}
        keys: list[GroupKey] = []
        seen: set[str] = set()
        for g in group.expressions:
            source_expr = g
            if isinstance(g, exp.Literal) and not g.is_string:
                pos = int(g.this)
                if not 1 <= pos <= len(items):
                    raise ProgrammingError(f"GROUP BY position {pos} is not in select list", sqlstate="42P10")
                source_expr = items[pos - 1]
                source_expr = source_expr.unalias() if isinstance(source_expr, exp.Alias) else source_expr
            elif isinstance(g, exp.Column) and not g.table and g.name.lower() in aliases:
                try:
                    self.scope.lookup(g)
                except ProgrammingError:
                    source_expr = aliases[g.name.lower()].unalias()
            if contains_aggregate(source_expr):
                raise ProgrammingError("aggregate functions are not allowed in GROUP BY", sqlstate="42803")
            resolved = self.scope.resolve(source_expr, self.resolver)
            sig = resolved.sql()
            if sig in seen:
                continue
            seen.add(sig)
            keys.append(self._key(resolved, output_name(source_expr)))
        return keys

    def _key(self, resolved: exp.Expression, name: str) -> GroupKey:
        inner = resolved.this if isinstance(resolved, exp.Paren) else resolved
        if isinstance(inner, exp.Column):
            source = self._source(inner.table)
            col = source.table.column(inner.name)
            type_name = source.columns.get(inner.name)
            if source.table.public:
                return GroupKey(name, resolved, domain_table=(source.table.name, inner.name), type_name=type_name)
            if col.keys_from is not None:
                return GroupKey(name, resolved, domain_table=col.keys_from, type_name=type_name)
            values = column_values(source, inner.name)
            if values is not None:
                return GroupKey(name, resolved, domain=values, type_name=type_name)
            if not source.table.row_unit and inner.name == source.table.privacy_unit:
                raise _grouped_by_unit(source.table.name, inner.name)
            return GroupKey(name, resolved)
        literal = literal_domain(inner)
        if literal is not None:
            return GroupKey(name, resolved, domain=literal)
        return GroupKey(name, resolved, image=image(inner, self._source))

    def _source(self, alias: str) -> Source:
        return next(s for s in self.rel.sources if s.alias == alias)

    # Aggregates --------------------------------------------------------------------------
    def _bounds(self, col: exp.Column) -> Interval:
        return column_bounds(self.rel.sources)(col)

    def _measure(self, m: Measure) -> int:
        sig = m.signature()
        for i, existing in enumerate(self.measures):
            if existing.signature() == sig:
                return i
        self.measures.append(m)
        return len(self.measures) - 1

    def _noisy_column_type(self, column: exp.Column) -> str | None:
        """The type of a column of the noisy table the outer query reads: an estimate a<i> has its
        family's result type, a key k<j> is BIGINT when PostgreSQL types its expression as an
        integer (other keys' types do not matter to a division)."""
        name = column.name
        if name[:1] in ("a", "k") and name[1:].isdigit():
            i = int(name[1:])
            if name[0] == "a" and i < len(self.estimates):
                return family(self.estimates[i]).result_type
            if name[0] == "k" and i < len(self.keys) and integral(self.keys[i].expr, self.resolver.column_type):
                return "BIGINT"
        return None

    def _estimate(self, node: exp.Expression) -> int:
        if isinstance(node, exp.Filter):
            return self._estimate(unfilter(node))
        if not isinstance(node, DP_AGGREGATES) and order_statistic(node) is None:
            check_tree(node)
        text = node.sql(dialect="postgres")
        stat = order_statistic(node)
        if stat is not None:
            return self._quantile(node, text, *stat)
        if isinstance(node, exp.WithinGroup):
            check_node(node.this)
            raise unsupported(f"{text} is not supported", hint="PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x) is")
        if isinstance(node.this, exp.Distinct) or node.args.get("distinct"):
            if isinstance(node, exp.Count) and self._is_unit(node.this):
                return self._add("units", text)
            if isinstance(node, exp.Count):
                return self._distinct(node, text)
            raise unsupported(
                f"{text}: DISTINCT inside an aggregate is only supported in COUNT",
                hint="COUNT(DISTINCT unit_column) counts people; COUNT(DISTINCT column) counts declared keys present",
            )
        arg = node.this
        if isinstance(node, exp.Count):
            value = None if arg is None or isinstance(arg, exp.Star) else self.scope.resolve(arg, self.resolver)
            return self._add("count", text, value)
        if contains_aggregate(arg):
            raise ProgrammingError("aggregate function calls cannot be nested", sqlstate="42803")
        value = self.scope.resolve(arg, self.resolver)
        bounds = self._clipped(value, interval(value, self._bounds))
        if not bounds.finite:
            raise unbounded(node, arg, value, self._source)
        if isinstance(node, SPREAD_AGGREGATES) and self.sample_rate:
            raise unsupported(f"{text}: variance under TABLESAMPLE is not supported yet")
        func = SPREAD_FUNCTIONS.get(type(node), "sum" if isinstance(node, exp.Sum) else "avg")
        if func == "sum" and integral(value, self.resolver.column_type):
            func = "whole_sum"  # an integer SUM is a whole number in PostgreSQL: rounded after the noise
        return self._add(func, text, value, bounds.lo, bounds.hi)

    def _clipped(self, value: exp.Expression, bounds: Interval) -> Interval:
        """A summed (or a quantile's) value's bounds narrowed by a clamp chosen for this query
        (QueryOptions.clips), never widened: the measure clamps each row to the result."""
        if not self.options.clips or not bounds.finite:
            return bounds
        text = value.sql(dialect="postgres")
        for expr, lo, hi in self.options.clips:
            if expr == text and max(lo, bounds.lo) < min(hi, bounds.hi):
                return Interval(max(lo, bounds.lo), min(hi, bounds.hi))
        return bounds

    def _centre(self, func: str, value: exp.Expression | None) -> float | None:
        """An AVG's centre chosen for this query (QueryOptions.centres), None for the others."""
        if func != "avg" or value is None or not self.options.centres:
            return None
        return dict(self.options.centres).get(value.sql(dialect="postgres"))

    def _add(
        self,
        func: str,
        text: str,
        value: exp.Expression | None = None,
        lower: float = 0.0,
        upper: float = 0.0,
        quantile: float | None = None,
        categories: tuple[Any, ...] | None = None,
        whole: bool = False,
    ) -> int:
        """An estimate of the family `func`, over the measures the family asks for."""
        fam = FAMILIES[func]
        bits = self.cell_bits if func in QUANTILES else self.count_bits
        of = Operand(value, lower, upper, bits, self.sample_rate is not None, categories, self._centre(func, value))
        roles = fam.measures(of)
        est = Estimate(
            func,
            text,
            lower=lower,
            upper=upper,
            centre=fam.centred(of),  # its family's, or a mean's chosen centre (_centre)
            quantile=quantile,
            integral=whole,
            **{role: self._measure(m) for role, m in roles.items()},
        )
        key = repr((est.func, est.count, est.total, est.squares, est.quantile))
        if key not in self._estimate_index:
            self._estimate_index[key] = len(self.estimates)
            self.estimates.append(est)
            self._arguments[self._estimate_index[key]] = value
        return self._estimate_index[key]

    def _reading(self, keys: list[GroupKey]) -> Relation:
        """The relation with the rows its aggregates read recorded (sql/reads.py) when every
        aggregate reads under a CASE condition (a FILTER) and the keys are declared or absent:
        then the released groups are the domain's (or the one row) whatever rows are dropped.
        Under partition selection the released groups depend on each group's rows: never."""
        if not all(k.declared for k in keys):
            return self.rel
        reads = read_conditions(self._arguments.values())
        return replace(self.rel, reads=Trees(reads)) if reads else self.rel

    def _quantile(
        self, node: exp.Expression, text: str, arg: exp.Expression, p: exp.Expression | float, name: str
    ) -> int:
        """A quantile from a noisy histogram of the clamped value: the bins' counts are
        computed (and bounded per unit) in the engine; the quantile is post-processing."""
        if self.sample_rate:
            raise unsupported(
                f"{text}: quantiles under TABLESAMPLE are not supported yet",
                hint="run the quantile without TABLESAMPLE",
            )
        fraction = p if isinstance(p, float) else quantile_fraction(p, text)
        if contains_aggregate(arg):
            raise ProgrammingError("aggregate function calls cannot be nested", sqlstate="42803")
        value = self.scope.resolve(arg, self.resolver)
        bounds = self._clipped(value, interval(value, self._bounds))
        if not bounds.finite:
            raise unbounded(node, arg, value, self._source, quantile=name)
        if bounds.hi <= bounds.lo:
            raise ProgrammingError(
                f"{text}: {arg.sql(dialect='postgres')} has a single possible value {bounds.lo:g}",
                sqlstate="42P22",
                hint="a quantile needs bounds with lower < upper",
            )
        func = {0.0: "min", 1.0: "max"}.get(fraction, "quantile") if name in ("MIN", "MAX") else "quantile"
        return self._add(
            func, text, value, bounds.lo, bounds.hi, quantile=fraction, whole=integral(value, self.resolver.column_type)
        )

    def _distinct(self, node: exp.Count, text: str) -> int:
        """COUNT(DISTINCT col) over a column with declared keys: a noisy row count per key (a
        histogram whose bins are the keys, bounded like any count), then the number of keys
        whose noisy count clears the noise level (post-processing). Keys seen in fewer rows
        than that are missed: the answer is a lower estimate for rare values."""
        args = node.this.expressions if isinstance(node.this, exp.Distinct) else [node.this]
        if len(args) != 1:
            raise unsupported(f"{text}: COUNT(DISTINCT ...) of several columns is not supported", hint=DISTINCT_HINT)
        value = self.scope.resolve(args[0], self.resolver)
        keys = distinct_keys(text, args[0], value, self._source)
        return self._add("distinct", text, value, 0.0, float(len(keys)), categories=tuple(keys))

    def _share_sums(self) -> None:
        """AVG(x) alone uses a sum centred in x's range (half the sensitivity); next to SUM(x) it
        uses SUM's plain sum instead, so the query pays for one noisy sum, not two."""
        plain = {
            (value.sql(), m.lower, m.upper): i
            for i, m in enumerate(self.measures)
            if isinstance(m, Sum) and m.centre == 0 and (value := m.value) is not None
        }
        for i, est in enumerate(self.estimates):
            if family(est).centred_sum and est.total is not None:
                m = self.measures[est.total]
                shared = plain.get((m.read().sql(), m.lower, m.upper))
                if shared is not None and shared != est.total:
                    self.estimates[i] = replace(est, total=shared, centre=0.0)
        used = sorted({j for e in self.estimates for j in (e.count, e.total, e.squares) if j is not None})
        if len(used) == len(self.measures):
            return
        new = {old: k for k, old in enumerate(used)}

        def moved(j: int | None) -> int | None:
            return None if j is None else new[j]

        self.measures = [self.measures[j] for j in used]
        self.estimates = [
            replace(e, count=moved(e.count), total=moved(e.total), squares=moved(e.squares)) for e in self.estimates
        ]

    def _is_unit(self, node: exp.Expression) -> bool:
        """COUNT(DISTINCT x) where x is the privacy unit column of a joined private table."""
        args = node.expressions if isinstance(node, exp.Distinct) else [node]
        if len(args) != 1 or self.unit is None:
            return False
        resolved = self.scope.resolve(args[0], self.resolver)
        inner = resolved.this if isinstance(resolved, exp.Paren) else resolved
        if not isinstance(inner, exp.Column):
            return False
        source = self._source(inner.table)
        return source.private and not source.table.row_unit and inner.name == source.table.privacy_unit


def _grouped_by_unit(table: str, unit: str) -> Exception:
    """GROUP BY the privacy unit without a declared domain: every group holds one unit, so
    partition selection would keep none; refused before any charge, with the per-unit subquery
    that answers what such a query usually asks."""
    return unsupported(
        f"GROUP BY {unit}: {unit} is the privacy unit of {table}, so each group holds one person and "
        "partition selection would drop (almost) every group",
        hint=f"aggregate per {unit} in a subquery, then over those values: SELECT n, COUNT(*) FROM "
        f"(SELECT {unit}, COUNT(*) AS n FROM {table} GROUP BY {unit}) t GROUP BY n, or AVG(n)",
    )


def _as_select(node: exp.Expr) -> exp.Select:
    """A pass's result over a SELECT, which stays one (the passes replace inner nodes only)."""
    if not isinstance(node, exp.Select):
        raise TypeError(f"a pass over a SELECT returned {type(node).__name__}")
    return node
