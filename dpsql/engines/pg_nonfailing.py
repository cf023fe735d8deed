"""The rewrite's TRY and TRY_CAST for PostgreSQL, which has neither.

Whether a query fails must not depend on a private value (sql/nonfailing.py). DuckDB and Spark
(ANSI mode off) turn a failing row expression into NULL; PostgreSQL raises. So every TRY is
lowered to a form that cannot raise on any row:

- arithmetic in NUMERIC, whose range (10^131072) bounded inputs cannot leave, with a divisor
  of 0 made NULL;
- casts only where the source type cannot fail to convert (numbers to numbers or text, a
  date to a timestamp...), with a range guard where the target is narrower;
- functions that are total on their types (lower, date_trunc, extract, coalesce...).

Anything else (a text-to-number cast, sqrt, ln...) is refused with the reason, before the
query is charged. Types come from the schema; an expression whose type is not known cannot
be cast.
"""

from __future__ import annotations

from typing import Mapping

from sqlglot import exp

from ..errors import unsupported
from ..sql.build import dtype
from ..sql.division import integral
from .base import coin_parts, is_coin, is_keyed_hash, width_bucket_case

_INTEGERS = {"TINYINT": 2**7, "SMALLINT": 2**15, "INTEGER": 2**31, "INT": 2**31, "BIGINT": 2**63}
_FLOATS = ("DOUBLE", "FLOAT", "REAL")
_TEXT = ("VARCHAR", "TEXT", "CHAR")
_SAME_TYPE = {"TIMESTAMPNTZ": "TIMESTAMP"}  # sqlglot's name for a timestamp without time zone, in some paths

# Row functions that cannot raise on their argument types (the rewrite checked the arguments).
# (Pad: TO_CHAR's written-out form pads to a literal width; AT TIME ZONE: a literal zone.)
_TOTAL_FUNCTIONS = (
    exp.Coalesce,
    exp.Nullif,
    exp.Greatest,
    exp.Least,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Trim,
    exp.Initcap,
    exp.Concat,
    exp.DPipe,
    exp.StrPosition,
    exp.Extract,
    exp.DateTrunc,
    exp.TimestampTrunc,
    exp.Floor,
    exp.Ceil,
    exp.Sign,
    exp.CurrentDate,
    exp.Pad,
    exp.AtTimeZone,
)
_STRUCTURE = (
    exp.Paren,
    exp.And,
    exp.Or,
    exp.Not,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.In,
    exp.Between,
    exp.Case,
    exp.If,
    exp.Tuple,
    exp.Var,
    exp.Identifier,
    exp.DataType,
    exp.Interval,
)


def lower_for_postgres(
    tree: exp.Expression,
    schema: Mapping[str, Mapping[str, str]],
    public: frozenset[str] = frozenset(),
    copy: bool = True,
) -> exp.Expression:
    """The neutral tree with TRY, TRY_CAST, DPSQL_HASH, width_bucket and EXTRACT fields in
    PostgreSQL's terms. `public` names the tables whose rows are not private; `copy=False`
    lowers the tree in place."""
    lowering = _Lowering(schema, public)
    return tree.transform(lowering.visit, copy=copy).transform(lowering.integer_division, copy=False)


_EXTRACT_FIELDS = {"DAYOFWEEK": "DOW", "DAYOFYEAR": "DOY", "WEEKDAY": "DOW"}


class _Lowering:
    def __init__(self, schema: Mapping[str, Mapping[str, str]], public: frozenset[str]):
        self.schema, self.public = schema, public

    def visit(self, node: exp.Expression) -> exp.Expression:
        """transform() does not descend into a node it replaced, so a replacement gets the
        remaining (semantic) lowering of its own subtree here."""
        if isinstance(node, exp.Try):
            done = _plain_casts(node.this) if self.not_private(node.this) else self.total(node.this)
        elif isinstance(node, exp.TryCast):
            done = self.cast(node)
        elif isinstance(node, exp.WidthBucket):
            done = self.total(node)
        else:
            return _semantics(node)
        return done.transform(_semantics, copy=False)

    def not_private(self, node: exp.Expression) -> bool:
        """True when every column comes from a VALUES list or a public table: whether such an
        expression fails tells nothing about a person."""
        for col in node.find_all(exp.Column):
            rel = _source(col)
            if isinstance(rel, exp.Values):
                continue
            if isinstance(rel, exp.Table) and rel.name.lower() in self.public:
                continue
            return False
        return True

    # Types -----------------------------------------------------------------------------------
    def type_of(self, node: exp.Expression) -> str | None:
        """The type category a row expression has in PostgreSQL: INTEGER-like names, DOUBLE,
        NUMERIC, TEXT, DATE, TIMESTAMP, BOOLEAN, or None when it cannot be told."""
        if isinstance(node, exp.Paren):
            return self.type_of(node.this)
        if isinstance(node, exp.Column):
            return self.column_type(node)
        if isinstance(node, exp.Literal):
            return "TEXT" if node.is_string else ("INTEGER" if node.this.lstrip("-").isdigit() else "NUMERIC")
        if isinstance(node, exp.Boolean) or isinstance(node, (exp.Predicate, exp.Connector, exp.Not)):
            return "BOOLEAN"
        if isinstance(node, (exp.Cast, exp.TryCast)):
            name = node.to.this.name if isinstance(node.to.this, exp.DataType.Type) else None
            return _SAME_TYPE.get(name, name)
        if isinstance(node, exp.Try):
            return self.type_of(node.this)
        if isinstance(node, exp.Count):
            return "BIGINT"
        if isinstance(node, (exp.Min, exp.Max)):
            return self.type_of(node.this)
        if isinstance(
            node,
            (
                exp.Add,
                exp.Sub,
                exp.Mul,
                exp.Div,
                exp.IntDiv,
                exp.Mod,
                exp.Neg,
                exp.Abs,
                exp.Round,
                exp.Sum,
                exp.Avg,
                exp.Floor,
                exp.Ceil,
                exp.Extract,
                exp.Length,
                exp.StrPosition,
                exp.Sign,
            ),
        ):
            return "NUMERIC"
        if isinstance(node, (exp.Lower, exp.Upper, exp.Trim, exp.Initcap, exp.Concat, exp.DPipe, exp.Pad)):
            return "TEXT"
        if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
            return "TIMESTAMP"
        if isinstance(node, (exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Greatest, exp.Least)):
            branches = (
                [node.args.get("default"), *[i.args.get("true") for i in node.args.get("ifs") or []]]
                if isinstance(node, exp.Case)
                else [node.this, *node.expressions, node.args.get("true")]
            )
            kinds = {self.type_of(b) for b in branches if b is not None and not isinstance(b, exp.Null)}
            if len(kinds) == 1:
                return kinds.pop()
            if kinds and all(self.numeric_kind(k) for k in kinds):
                return "DOUBLE" if any(k in _FLOATS for k in kinds) else "NUMERIC"
        return None

    def column_type(self, col: exp.Column) -> str | None:
        rel = _source(col)
        if isinstance(rel, exp.Table):
            t = self.schema.get(rel.name.lower(), {}).get(col.name.lower())
            return None if t is None else t.upper().split("(")[0]
        if isinstance(rel, exp.Subquery) and isinstance(rel.this, exp.Select):
            for item in rel.this.expressions:
                if item.alias_or_name == col.name:
                    return self.type_of(item.this if isinstance(item, exp.Alias) else item)
        if isinstance(rel, exp.Values):
            names = [c.name for c in rel.args["alias"].columns] if rel.args.get("alias") else []
            if col.name in names and rel.expressions:
                first = rel.expressions[0]
                values = first.expressions if isinstance(first, exp.Tuple) else [first]
                return self.type_of(values[names.index(col.name)])
        return None

    def integer_division(self, node: exp.Expression) -> exp.Expression:
        """a // b of integers as PostgreSQL's integer `/`, which truncates toward zero as DIV
        does, but in BIGINT: DIV computes in NUMERIC, several times slower summed over a
        table's rows. Integers by PostgreSQL's own typing only (the product of two BIGINTs is
        a BIGINT there already), else DIV stays."""
        if isinstance(node, exp.IntDiv) and self.integral(node.this) and self.integral(node.expression):
            return exp.Div(this=node.this, expression=node.expression, typed=True)
        return node

    def integral(self, node: exp.Expression) -> bool:
        """Whether PostgreSQL types this row expression as an integer (sql/division.py's rules)."""
        return integral(node, self._integer_column)

    def _integer_column(self, col: exp.Column) -> str | None:
        """A column's type for those rules: its table's, or BIGINT for a CTE's integer output."""
        if col.table:
            return self.column_type(col)
        item = _cte_item(col)
        return "BIGINT" if item is not None and self.integral(item) else None

    @staticmethod
    def numeric_kind(t: str | None) -> bool:
        return t is not None and (t in _INTEGERS or t in _FLOATS or t in ("NUMERIC", "DECIMAL"))

    # Total forms ------------------------------------------------------------------------------
    def total(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Column, exp.Literal, exp.Null, exp.Boolean, exp.Star)):
            return node.copy()
        if node.find(exp.Column) is None and not isinstance(node, (exp.Subquery, exp.Select)):
            # a constant (CURRENT_DATE - 7, a pinned clock): whether it fails depends on no row
            return _plain_casts(node)
        if isinstance(node, (exp.Subquery, exp.Select)):
            return node.copy()  # reads public tables only (analysis checked); its failures are not private
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self.cast(node)
        if is_keyed_hash(node):
            return keyed_hash(node.expressions)
        if is_coin(node):
            return coin(node)
        if isinstance(node, exp.WidthBucket):
            case = width_bucket_case(node)
            case.parent = node.parent  # its columns still resolve in the query around it
            return self.total(case)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod)):
            return self.arithmetic(node)
        if isinstance(node, exp.Neg):
            return exp.Neg(this=self.as_numeric(node.this))
        if isinstance(node, exp.Abs):
            return exp.Abs(this=self.as_numeric(node.this))
        if isinstance(node, exp.Round):
            decimals = node.args.get("decimals")
            if decimals is not None and not isinstance(decimals, exp.Literal):
                raise _refuse(node, "ROUND with a computed number of digits")
            return exp.Round(this=self.as_numeric(node.this), decimals=decimals.copy() if decimals else None)
        if isinstance(node, _TOTAL_FUNCTIONS + _STRUCTURE):
            return self.rebuild(node)
        raise _refuse(node, f"{type(node).__name__.upper()} can raise an error on some values")

    def rebuild(self, node: exp.Expression) -> exp.Expression:
        out = node.copy()
        for key, value in node.args.items():
            if isinstance(value, exp.Expression):
                out.set(key, self.total(value))
            elif isinstance(value, list):
                out.set(key, [self.total(v) if isinstance(v, exp.Expression) else v for v in value])
        return out

    def as_numeric(self, node: exp.Expression) -> exp.Expression:
        t = self.type_of(node)
        if not (self.numeric_kind(t) or isinstance(node, exp.Null)):
            raise _refuse(node, "arithmetic on a value that is not known to be a number")
        return exp.Cast(this=self.total(node), to=dtype("NUMERIC"))

    def arithmetic(self, node: exp.Expression) -> exp.Expression:
        """In NUMERIC: exact, and out of reach of overflow for values a table can hold."""
        left, right = (self.type_of(node.this), self.type_of(node.expression))
        if isinstance(node, (exp.Add, exp.Sub)) and ("DATE" in (left, right) or "TIMESTAMP" in (left, right)):
            if isinstance(node, exp.Sub) and left == right:
                return self.rebuild(node)  # the days or interval between two dates cannot overflow
            raise _refuse(node, "date arithmetic can leave the date range")
        a, b = self.as_numeric(node.this), self.as_numeric(node.expression)
        if isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)):
            b = exp.Nullif(this=b, expression=exp.Literal.number(0))
        out = type(node)(this=a, expression=b)
        if isinstance(node, exp.Div):
            out.set("typed", True)  # NUMERIC / NUMERIC is already a true division
        return exp.Paren(this=out)

    def cast(self, node: exp.Cast) -> exp.Expression:
        """A cast that cannot fail on any row, with a range guard where the target is narrower."""
        inner = node.this
        to = node.to
        target = to.this.name if isinstance(to.this, exp.DataType.Type) else to.sql().upper()
        target = _SAME_TYPE.get(target, target)
        if isinstance(inner, (exp.Literal, exp.Null, exp.Boolean)):
            return exp.Cast(this=inner.copy(), to=to.copy())  # a literal's cast fails or not whatever the data
        source = self.type_of(inner)
        value = self.total(inner)
        plain = exp.Cast(this=value, to=to.copy())
        if source == target or target in _TEXT:
            return plain
        if target in _FLOATS:
            if source in _INTEGERS or source in _FLOATS:
                return plain
            if source in ("NUMERIC", "DECIMAL"):
                return _guard(value, 10.0**300, to)
        if target in _INTEGERS and self.numeric_kind(source):
            if source in _INTEGERS and _INTEGERS[source] <= _INTEGERS[target]:
                return plain
            return _guard(value, _INTEGERS[target] - 1024, to)
        if target in ("NUMERIC", "DECIMAL") and self.numeric_kind(source):
            params = [p.this.name for p in to.expressions if isinstance(p, exp.DataTypeParam)] if to.expressions else []
            if not params:
                return plain
            precision = int(params[0])
            scale = int(params[1]) if len(params) > 1 else 0
            return _guard(value, 10.0 ** (precision - scale) / 2, to)
        if target == "DATE" and source in ("DATE", "TIMESTAMP"):
            return plain
        if target == "TIMESTAMP" and source in ("DATE", "TIMESTAMP"):
            return plain
        if target == "BOOLEAN" and source in ("BOOLEAN", "INTEGER", "INT"):
            return plain
        raise _refuse(
            node, f"a cast from {source or 'an expression of unknown type'} to {target} can fail on some values"
        )


def _source(col: exp.Column) -> exp.Expression | None:
    """The table, subquery or VALUES list a qualified column reads: its alias looked up in the
    FROM and JOINs of the nearest enclosing SELECT that has it (the tree reuses aliases such
    as d in different scopes)."""
    node = col.parent
    while node is not None:
        if isinstance(node, exp.Select):
            sources = [node.args.get("from_") or node.args.get("from")] + list(node.args.get("joins") or [])
            for src in sources:
                rel = src.this if src is not None else None
                if rel is not None and rel.alias_or_name == col.table:
                    return rel
        node = node.parent
    return None


def _cte_item(col: exp.Column) -> exp.Expression | None:
    """The expression an unqualified column stands for when its SELECT reads one CTE: that
    CTE's output of the column's name, as the bounded query's stages read one another."""
    select = col.find_ancestor(exp.Select)
    src = (select.args.get("from_") or select.args.get("from")) if select is not None else None
    if src is None or not isinstance(src.this, exp.Table) or select.args.get("joins") or src.this.args.get("db"):
        return None
    node: exp.Expression | None = select
    while node is not None:
        with_ = node.args.get("with_") or node.args.get("with")
        for cte in with_.expressions if isinstance(with_, exp.With) else []:
            if cte.alias == src.this.name and isinstance(cte.this, exp.Select):
                for item in cte.this.expressions:
                    if item.alias_or_name == col.name:
                        return item.this if isinstance(item, exp.Alias) else item
                return None
        node = node.parent
    return None


def _semantics(node: exp.Expression) -> exp.Expression:
    """Where PostgreSQL means something else by the same spelling."""
    if is_keyed_hash(node):
        return keyed_hash(node.expressions)
    if is_coin(node):
        return coin(node)
    if isinstance(node, exp.Extract):
        return _extract(node)
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
        # PostgreSQL's date_trunc of a date is a timestamp with time zone; the others' is not
        return exp.Cast(this=node.copy(), to=dtype("TIMESTAMP"))
    return node


def _extract(node: exp.Extract) -> exp.Extract:
    """EXTRACT fields under PostgreSQL's names (dayofweek is dow: 0 = Sunday in both)."""
    name = node.this.name.upper()
    if name in _EXTRACT_FIELDS:
        node = node.copy()
        node.set("this", exp.Var(this=_EXTRACT_FIELDS[name]))
    return node


def _plain_casts(node: exp.Expression) -> exp.Expression:
    return node.transform(lambda n: exp.Cast(this=n.this, to=n.to) if isinstance(n, exp.TryCast) else n, copy=True)


def _guard(value: exp.Expression, limit: float, to: exp.DataType) -> exp.Expression:
    """CAST(value) where |value| < limit, else NULL (NaN fails the comparison, so it is NULL);
    into a float, a NUMERIC too small for it (which PostgreSQL refuses as out of range) is 0."""
    numeric = exp.Abs(this=exp.Cast(this=value.copy(), to=dtype("NUMERIC")))
    ok = exp.LT(this=numeric, expression=exp.Literal.number(repr(float(limit))))
    ifs = [exp.If(this=exp.Not(this=ok), true=exp.Null())]
    if to.this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT):
        tiny = exp.LT(this=numeric.copy(), expression=exp.Literal.number("1e-300"))
        ifs.append(exp.If(this=tiny, true=exp.Cast(this=exp.Literal.number(0), to=to.copy())))
    return exp.Case(ifs=ifs, default=exp.Cast(this=value.copy(), to=to.copy()))


def keyed_hash(args: list[exp.Expression]) -> exp.Expression:
    """DPSQL_HASH(a, ...): hashtextextended of the arguments' row text (its 64-bit signed
    result shifted onto [0, 2^64)), so per-unit choices come from the unit's own values, never
    from random()."""
    row = exp.Cast(this=exp.Anonymous(this="ROW", expressions=[a.copy() for a in args]), to=dtype("TEXT"))
    hashed = exp.Anonymous(this="hashtextextended", expressions=[row, exp.Literal.number(0)])
    return exp.Paren(
        this=exp.Add(this=exp.Cast(this=hashed, to=dtype("NUMERIC")), expression=exp.Literal.number(2**63))
    )


def coin(node: exp.Expression) -> exp.Expression:
    """DPSQL_COIN(unit, salt): the first 60 bits of SHA-256(salt || ':' || unit) as a BIGINT
    (see sql/rewrite.py), computed by PostgreSQL's sha256() (11 and later)."""
    text, _ = coin_parts(node)
    digest = exp.Anonymous(
        this="encode",
        expressions=[
            exp.Anonymous(
                this="sha256",
                expressions=[exp.Anonymous(this="convert_to", expressions=[text, exp.Literal.string("UTF8")])],
            ),
            exp.Literal.string("hex"),
        ],
    )
    digits = exp.Substring(this=digest, start=exp.Literal.number(1), length=exp.Literal.number(15))
    bits = exp.Cast(
        this=exp.DPipe(this=exp.Literal.string("x"), expression=digits), to=dtype("BIT(60)", dialect="postgres")
    )
    return exp.Cast(this=bits, to=dtype("BIGINT"))


def _refuse(node: exp.Expression, why: str):
    text = node.sql(dialect="postgres")[:80]
    return unsupported(
        f"the PostgreSQL engine cannot run {text!r} safely: {why}",
        hint="nothing was charged; PostgreSQL raises where other engines give NULL, and a failure "
        "on one person's row would reveal it; rewrite the expression (cast or compute it "
        "in a view), or serve this table from DuckDB",
    )
