"""Filters narrow declared domains: the groups a grouped query over declared keys answers are
those its own conditions allow, not the whole declared domain.

A pass over a plan, pure: its output depends on the query's text, the policy and the schema,
and it is evaluated by the engine over the declared values and the public tables only (the
domain CTEs and the domain query of sql/rewrite.py), never over private rows. A key is left out
only when a condition that every counted row satisfies is certainly not true for it, which the
engine decides with its own semantics (types, NULLs, collation, case) over the key's values cast
to the column's type, as it decides it for the rows: the condition is the rows' own, made total
the same way. Rows whose key falls outside the narrowed domain are in no group (they fail the
condition anyway), so nothing else changes: the noise is calibrated for the declared domain,
which the narrowed one is part of.

Which conditions narrow (each a conjunct of the WHERE clause, of an inner join's ON, or of a
HAVING clause over group keys only, which is a filter on keys too):

- over one private key column (a declared-key column grouped as is, or the column a bucketed key
  such as date_trunc('month', d) is computed from): that key's domain keeps the values (or the
  buckets of the values) for which it can be true; `own`;
- over the columns of one public table joined in the query: that table's keys keep the rows for
  which it can be true; `own`, and a `link` when the table ties other keys;
- over a private key column and public tables (`v.ward = w.name`), or public tables and their
  keys together: the key tuples answered are those that exist in the public tables joined as the
  query joins them (`links`, the domain query's WHERE over the keys' domains and those tables).

Never used: a condition over any other column (its values are private), one reading a subquery,
a clock or a parameter left unbound, and, on the nullable side of a LEFT JOIN, one no key of that
side is released with (an unmatched row passes it with NULLs).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..config import INTEGER_TYPES
from ..guarantee.plan import GroupKey, Plan
from . import build as b
from .allowlist import CLOCK_FUNCTIONS
from .domains import COLUMN, Image, image
from .nonfailing import nonfailing
from .scope import Source, as_written, conjuncts

VALUE, ROW = "value", "row"  # an own condition over the key's value (d.c), or over its public table's row


@dataclass(frozen=True)
class Own:
    """The conditions that narrow one key's domain on their own. Over VALUE: written over
    domains.COLUMN (d.c), the key's column value (or, for a bucketed key, the value the bucket is
    computed from); over ROW: over the unqualified, quoted columns of the key's public table.
    `image`: for a key whose domain follows from its form (EXTRACT, CASE, width_bucket) over
    one enumerable column, that key as a function of the column's declared values: its domain
    keeps the keys it gives for the values the conditions can be true for."""

    over: str
    conditions: tuple[exp.Expression, ...] = ()
    image: Image | None = None


@dataclass(frozen=True)
class Narrowing:
    """Per key its own conditions; the links between keys and public tables, over d<i>.k<i>
    (key i's domain value) and the public tables' columns under their query aliases; those tables."""

    own: tuple[Own | None, ...]
    links: tuple[exp.Expression, ...] = ()
    tables: tuple[tuple[str, str], ...] = ()  # (alias, table name)
    used: tuple[str, ...] = ()  # the analyst's conditions that narrow, as written (EXPLAIN)

    def own_sql(self, i: int) -> str:
        own = self.own[i] if i < len(self.own) else None
        if own is None:
            return ""
        image = "" if own.image is None else repr((own.image.expr.sql(), own.image.values, own.image.type_name))
        return " AND ".join(c.sql() for c in own.conditions) + image

    def signature(self) -> str:
        """Everything the narrowed domain depends on besides the keys' declarations."""
        links = " AND ".join(c.sql() for c in self.links)
        return repr(([self.own_sql(i) for i in range(len(self.own))], links, self.tables))


NONE = Narrowing(())
_UNUSABLE = (exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Placeholder, exp.Parameter, *CLOCK_FUNCTIONS)


def unlisted(plan: Plan) -> tuple[str, ...]:
    """What the analyst is told of conditions comparing a private column whose keys the policy
    lists (text keys) to a text value not among them, `region = 'north'` where the keys are
    'North', ...: most likely a misspelling. Values are compared exactly, so such a condition
    matches only rows holding a value the policy does not list. From the query and the policy
    only; nothing here narrows a domain."""
    sources = {s.alias: s for s in plan.relation.sources}
    out: list[str] = []
    for cond in [c for c, needs in _Pass(plan).conditions() if needs is None]:  # every counted row's
        if isinstance(cond, exp.EQ):
            column, values = (cond.this, [cond.expression])
            if not isinstance(column, exp.Column):
                column, values = cond.expression, [cond.this]
        elif isinstance(cond, exp.In) and not cond.args.get("query"):
            column, values = cond.this, list(cond.expressions)
        else:
            continue
        source = sources.get(column.table) if isinstance(column, exp.Column) else None
        if source is None or not source.private or source.derived is not None:
            continue
        keys = source.table.column(column.name).keys
        if not keys or not all(isinstance(k, str) for k in keys):
            continue
        missing = [v.this for v in values if isinstance(v, exp.Literal) and v.is_string and v.this not in keys]
        if missing:
            shown = ", ".join(repr(k) for k in keys[:6]) + (f", ... ({len(keys)} in all)" if len(keys) > 6 else "")
            folded = {k.strip().casefold(): k for k in keys}
            meant = [folded[m.strip().casefold()] for m in missing if m.strip().casefold() in folded]
            out.append(
                f"{', '.join(repr(m) for m in missing)} is not among {column.name}'s declared keys ({shown}); "
                "values are compared exactly (case and spaces count)"
                + (f": did you mean {', '.join(repr(k) for k in meant)}?" if meant else "")
            )
    return tuple(out)


def narrowing(plan: Plan) -> Narrowing:
    """The conditions that narrow the plan's declared key domains (none where keys are not declared)."""
    if not plan.keys or not plan.declared:
        return NONE
    return _Pass(plan).run()


class _Pass:
    def __init__(self, plan: Plan):
        self.plan = plan
        rel = plan.relation
        self.sources: dict[str, Source] = {s.alias: s for s in rel.sources}
        self.types = {(s.alias, c): t for s in rel.sources for c, t in s.columns.items()}
        self.nullable = {j.source.alias for j in rel.joins if j.kind == "left"}
        # Key kinds: a private column grouped as is (its value is the key: linkable), a bucket of
        # one private column (own conditions only), a public table's column.
        self.value_keys: dict[tuple[str, str], list[int]] = {}
        self.bucket_keys: dict[tuple[str, str], list[int]] = {}
        self.public_keys: dict[str, list[tuple[int, str]]] = {}
        self.images: dict[int, Image] = {}  # form-derived keys over one enumerable column
        for i, key in enumerate(plan.keys):
            self._classify(i, key)
        self.matched = {a for a, _ in self.value_keys} | set(self.public_keys)  # aliases a released key comes from

    def _classify(self, i: int, key: GroupKey) -> None:
        inner = key.expr.this if isinstance(key.expr, exp.Paren) else key.expr
        if isinstance(inner, exp.Column) and inner.table in self.sources:
            source = self.sources[inner.table]
            if source.derived is not None:
                return
            if source.table.public:
                self.public_keys.setdefault(inner.table, []).append((i, inner.name))
            elif key.domain is not None or key.domain_table is not None:
                self.value_keys.setdefault((inner.table, inner.name), []).append(i)
        elif key.image is not None or key.domain is not None:
            columns = {(c.table, c.name) for c in inner.find_all(exp.Column)}
            if len(columns) != 1:
                return
            (column,) = columns
            source = self.sources.get(column[0])
            if source is None or not source.private or source.derived is not None:
                return
            if key.image is None:  # a domain from the key's form: narrowed through its image
                form = image(inner, self.sources.__getitem__)
                if form is None:
                    return
                self.images[i] = form
            self.bucket_keys.setdefault(column, []).append(i)

    def conditions(self) -> list[tuple[exp.Expression, str | None]]:
        """Every conjunct that holds for a counted row, with the LEFT JOIN alias it needs matched."""
        rel = self.plan.relation
        out: list[tuple[exp.Expression, str | None]] = [(c, None) for w in rel.where for c in conjuncts(w)]
        for step in rel.joins:
            for c in conjuncts(step.on):
                if step.kind == "inner":
                    out.append((c, None))
                elif any(col.table == step.source.alias for col in c.find_all(exp.Column)):
                    out.append((c, step.source.alias))  # holds for matched rows only
        out += [(c, None) for c in self._having()]
        return out

    def _having(self) -> list[exp.Expression]:
        """HAVING conjuncts over group keys only, as conditions over the keys' expressions."""
        where = self.plan.post.args.get("where")
        if where is None:
            return []
        out = []
        n = len(self.plan.keys)
        for c in conjuncts(where.this):
            columns = list(c.find_all(exp.Column))
            # The outer query names key j k<j>, unquoted; an output alias it reads is quoted.
            if not columns or not all(_key_column(col, n) for col in columns):
                continue
            keys = self.plan.keys
            out.append(
                c.copy().transform(
                    lambda node: keys[int(node.name[1:])].expr.copy() if isinstance(node, exp.Column) else node
                )
            )
        return out

    def run(self) -> Narrowing:
        n = len(self.plan.keys)
        own: list[list[exp.Expression]] = [[] for _ in range(n)]
        links: list[exp.Expression] = []
        linked: set[str] = set()
        used: list[str] = []
        conditions = self.conditions()
        equal = self._equalities(conditions)
        for cond, needs in conditions:
            if cond.find(*_UNUSABLE) is not None or id(cond) in equal["conditions"]:
                continue
            written = cond
            if equal["columns"]:
                cond = cond.transform(
                    lambda n: equal["columns"].get((n.table, n.name), n).copy() if isinstance(n, exp.Column) else n
                )
            atoms = self._atoms(cond)
            if atoms is None or not atoms:
                continue
            aliases = {what if kind == "public" else what[0] for kind, what in atoms}
            if needs is not None and needs not in self.matched:
                continue
            if any(a in self.nullable and a not in self.matched for a in aliases):
                continue
            made = nonfailing(cond, self.types)
            before = sum(map(len, own)) + len(links)
            if len(atoms) == 1:
                kind, what = next(iter(atoms))
                if kind == "column":  # the keys of this column, and the buckets computed from it
                    for i in self.value_keys.get(what, []) + self.bucket_keys.get(what, []):
                        own[i].append(self._over_value(made, what))
                else:  # a public table's own condition: its keys', and its rows' in the domain query
                    for i, _ in self.public_keys.get(what, []):
                        own[i].append(self._over_row(made))
                    links.append(self._linked(made))
                    linked.add(what)
            elif all(kind == "public" or what in self.value_keys for kind, what in atoms):
                links.append(self._linked(made))
                linked |= {what for kind, what in atoms if kind == "public"}
            if sum(map(len, own)) + len(links) > before:
                used.append(as_written(written))
        # A public table's keys come from one of its rows: tie them to it when the domain query
        # reads that table, or when it gives several keys.
        for alias, keys in self.public_keys.items():
            if alias in linked or len(keys) > 1:
                linked.add(alias)
                used.append(f"the key combinations {self.sources[alias].table.name} has")
                links += [exp.EQ(this=b.col(f"k{i}", f"d{i}"), expression=b.quoted(name, alias)) for i, name in keys]
        tables = tuple(sorted((a, self.sources[a].table.name) for a in linked))
        by_row = {i for keys in self.public_keys.values() for i, _ in keys}
        return Narrowing(
            tuple(
                Own(ROW if i in by_row else VALUE, tuple(own[i]), self.images.get(i)) if own[i] else None
                for i in range(n)
            ),
            tuple(links),
            tables,
            tuple(dict.fromkeys(used)),
        )

    def _equalities(self, conditions: list[tuple[exp.Expression, str | None]]) -> dict:
        """Private columns that every counted row has equal to a public table's column
        (`v.ward = w.name`, inner): other conditions on them are conditions on that column
        (`v.ward IN (...)` keeps the wards named so). Only between columns of one type whose
        equal values are the same value (text, integers, dates, booleans): 1.0 = 1 is true, but
        '1.0' is not '1'."""
        columns: dict[tuple[str, str], exp.Column] = {}
        used: set[int] = set()
        for cond, needs in conditions:
            if needs is not None or not isinstance(cond, exp.EQ):
                continue
            for mine, other in ((cond.this, cond.expression), (cond.expression, cond.this)):
                if not (isinstance(mine, exp.Column) and isinstance(other, exp.Column)):
                    continue
                p, s = self.sources.get(mine.table), self.sources.get(other.table)
                key = (mine.table, mine.name)
                if (
                    p is None
                    or s is None
                    or p.derived is not None
                    or not p.private
                    or not s.table.public
                    or other.table in self.nullable
                    or key in self.value_keys
                    or key in self.bucket_keys
                    or key in columns
                ):
                    continue
                t1, t2 = self.types.get(key), self.types.get((other.table, other.name))
                if t1 is not None and t2 is not None and _same_value_type(t1, t2):
                    columns[key] = other
                    used.add(id(cond))
        return {"columns": columns, "conditions": used}

    def _atoms(self, cond: exp.Expression) -> set[tuple[str, object]] | None:
        """What a condition reads, as atoms: ("column", (alias, name)) a private column a key is
        (or is computed from), ("public", alias) a public table; None when it reads anything else."""
        atoms: set[tuple[str, object]] = set()
        for col in cond.find_all(exp.Column):
            key = (col.table, col.name)
            source = self.sources.get(col.table)
            if source is None or source.derived is not None:
                return None
            if source.table.public:
                atoms.add(("public", col.table))
            elif key in self.value_keys or key in self.bucket_keys:
                atoms.add(("column", key))
            else:
                return None
        return atoms

    def _over_value(self, cond: exp.Expression, column: tuple[str, str]) -> exp.Expression:
        return b.neutral(
            cond.transform(lambda n: COLUMN.copy() if isinstance(n, exp.Column) and (n.table, n.name) == column else n)
        )

    def _over_row(self, cond: exp.Expression) -> exp.Expression:
        return b.neutral(cond.transform(lambda n: b.quoted(n.name) if isinstance(n, exp.Column) else n))

    def _linked(self, cond: exp.Expression) -> exp.Expression:
        """Over key i's domain value d<i>.k<i> for a key's column, a public table's own columns."""

        def visit(n: exp.Expression) -> exp.Expression:
            if not isinstance(n, exp.Column):
                return n
            keys = self.value_keys.get((n.table, n.name))
            if keys:
                i = keys[0]
                value = b.col(f"k{i}", f"d{i}")
                type_name = self.types.get((n.table, n.name))
                # A key whose values come from a public table (keys_from) has that column's type:
                # read it as the private column's, as the rows are.
                return (
                    exp.TryCast(this=value, to=b.dtype(type_name))
                    if type_name and self.plan.keys[i].domain_table is not None
                    else value
                )
            return b.quoted(n.name, n.table)

        return b.neutral(cond.transform(visit))


_EXACT_TYPES = {"VARCHAR", "TEXT", "STRING", "CHARACTER VARYING", "DATE", "BOOLEAN", "BOOL"}


def _same_value_type(a: str, b: str) -> bool:
    a, b = a.strip().upper(), b.strip().upper()
    return a == b and (a in _EXACT_TYPES or a in INTEGER_TYPES)


def _key_column(col: exp.Column, n: int) -> bool:
    name = col.name
    return (
        not col.table
        and not col.this.args.get("quoted")
        and name[:1] == "k"
        and name[1:].isdigit()
        and int(name[1:]) < n
    )
