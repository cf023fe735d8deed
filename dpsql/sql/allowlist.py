"""The expression allowlist: the only node types that may appear in a query dpsql runs.

An allowlist, not a denylist: a function sqlglot learns tomorrow (or a DuckDB table function
such as read_csv) is refused until someone decides it is safe, i.e. row-level, total and
without side effects.
"""

from __future__ import annotations

import re

from sqlglot import exp

from ..errors import forbidden, invalid_parameter, unsupported
from .clock import CLOCK_NODES, is_clock

# Row-level building blocks: columns, literals, operators, predicates.
_STRUCTURE = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Star,
    exp.Paren,
    exp.Alias,
    exp.DataType,
    exp.DataTypeParam,
    exp.Var,
    exp.Tuple,
    exp.Interval,
    exp.Distinct,
    exp.Ordered,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
    exp.Neg,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.In,
    exp.Between,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.TryCast,
)

# Scalar functions: total (no errors on data once casts become TRY_CAST), no side effects.
ROW_FUNCTIONS = (
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Sign,
    exp.Sqrt,
    exp.Ln,
    exp.Log,
    exp.Exp,
    exp.Pow,
    exp.Least,
    exp.Greatest,
    exp.Coalesce,
    exp.Nullif,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Substring,
    exp.Trim,
    exp.Concat,
    exp.DPipe,
    exp.StrPosition,
    exp.Left,
    exp.Right,
    exp.Initcap,
    exp.Extract,
    exp.DateTrunc,
    exp.TimestampTrunc,
    exp.WidthBucket,
    exp.AtTimeZone,  # with a literal zone (checked below)
) + CLOCK_NODES

# Called by name: TO_CHAR of a date or timestamp (classify keeps PostgreSQL's pattern; written out
# in EXTRACT, LPAD and CASE by sql/pgfunctions.py).
_ROW_ANONYMOUS = frozenset({"TO_CHAR"})

# Of those, the ones whose value depends on when the query runs (sql/clock.py pins them to
# literals per statement): a result computed with them must not be reused.
CLOCK_FUNCTIONS = CLOCK_NODES

# Scalar functions that may fail, or run long, on some values (SPLIT_PART's position 0, TO_DATE
# of a malformed string, LPAD to a huge length), or read rows as a whole: allowed over public
# tables and over constants (no column in their arguments), where whether they fail tells
# nothing about a person; refused over a private table's columns. By sqlglot's class, or by
# name for the functions it does not know (each checked to mean in DuckDB what it means in
# PostgreSQL, or written out by sql/pgfunctions.py).
PUBLIC_FUNCTIONS = (
    exp.Replace,
    exp.SplitPart,
    exp.Format,
    exp.Pad,
    exp.Repeat,
    exp.Reverse,
    exp.ConcatWs,
    exp.Translate,
    exp.Ascii,
    exp.Chr,
    exp.MD5,
    exp.StartsWith,
    exp.StrToDate,
    exp.StrToTime,
    exp.UnixToTime,
    exp.Trunc,
    exp.Cbrt,
    exp.Pi,
)
PUBLIC_FUNCTION_NAMES = (
    "REPLACE",
    "SPLIT_PART",
    "FORMAT",
    "LPAD",
    "RPAD",
    "REPEAT",
    "REVERSE",
    "CONCAT_WS",
    "TRANSLATE",
    "ASCII",
    "CHR",
    "MD5",
    "STARTS_WITH",
    "TO_DATE",
    "TO_TIMESTAMP",
    "TRUNC",
    "CBRT",
    "PI",
    "OCTET_LENGTH",
    "MAKE_DATE",
    "MAKE_TIMESTAMP",
)
_PUBLIC_ANONYMOUS = frozenset({"OCTET_LENGTH", "MAKE_DATE", "MAKE_TIMESTAMP"})

# Aggregates dpsql knows how to make differentially private.
SPREAD_AGGREGATES = (exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop, exp.StddevSamp)
# Order statistics, answered as DP quantiles from a noisy histogram over the column's bounds.
QUANTILE_AGGREGATES = (
    exp.Median,
    exp.Quantile,
    exp.ApproxQuantile,
    exp.PercentileCont,
    exp.PercentileDisc,
    exp.Min,
    exp.Max,
    exp.WithinGroup,
)
_QUANTILE_NAMES = ("QUANTILE_CONT", "QUANTILE_DISC", "PERCENTILE_CONT", "PERCENTILE_DISC", "APPROX_QUANTILE")
DP_AGGREGATES = (exp.Count, exp.Sum, exp.Avg) + SPREAD_AGGREGATES + QUANTILE_AGGREGATES

_ALLOWED = _STRUCTURE + ROW_FUNCTIONS + DP_AGGREGATES

ALLOWED_FUNCTION_NAMES = (
    "ABS",
    "ROUND",
    "FLOOR",
    "CEIL",
    "SIGN",
    "SQRT",
    "LN",
    "LOG",
    "EXP",
    "POWER",
    "LEAST",
    "GREATEST",
    "COALESCE",
    "NULLIF",
    "LOWER",
    "UPPER",
    "LENGTH",
    "SUBSTRING",
    "TRIM",
    "CONCAT",
    "||",
    "STRPOS",
    "LEFT",
    "RIGHT",
    "INITCAP",
    "EXTRACT",
    "DATE_PART",
    "DATE_TRUNC",
    "TO_CHAR",
    "WIDTH_BUCKET",
    "CASE",
    "CAST",
    "AT TIME ZONE",
    "NOW",
    "CURRENT_DATE",
    "CURRENT_TIMESTAMP",
    "LOCALTIMESTAMP",
    "LOCALTIME",
    "CURRENT_TIME",
    "TRANSACTION_TIMESTAMP",
    "STATEMENT_TIMESTAMP",
    "CLOCK_TIMESTAMP",
)


# The meta key the parser's record of a function's written name is kept under (classify.py).
WRITTEN = "written"


def function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    if isinstance(node, exp.Func):
        return node.sql_name().removeprefix("EXPLODING_")  # sqlglot's name for a set-returning GENERATE_SERIES
    return construct(node)


def construct(node: exp.Expr) -> str:
    """A node's kind in SQL's words, for messages: sqlglot names its classes after the keywords
    (GroupingSets is GROUPING SETS, SimilarTo SIMILAR TO, Union UNION), and an analyst should
    read the SQL they wrote, not a class of the parser."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", type(node).__name__).upper()


TRUNC_UNITS = (
    "microseconds",
    "milliseconds",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "quarter",
    "year",
    "decade",
    "century",
    "millennium",
)
_TRUNC_SPELLINGS = {u.upper() for u in TRUNC_UNITS} | {
    "MICROSECOND",
    "MILLISECOND",
    "SECONDS",
    "MINUTES",
    "HOURS",
    "DAYS",
    "WEEKS",
    "MONTHS",
    "QUARTERS",
    "YEARS",
    "DECADES",
    "CENTURIES",
    "MILLENNIA",
}


def _check_zone(node: exp.AtTimeZone) -> None:
    """AT TIME ZONE's zone is a literal: an unknown zone then fails whatever the rows hold."""
    zone = node.args.get("zone")
    if not (isinstance(zone, exp.Literal) and zone.is_string):
        raise invalid_parameter(
            f"AT TIME ZONE needs a literal zone such as 'UTC' or 'Europe/Paris', not "
            f"{zone.sql(dialect='postgres') if zone is not None else 'nothing'}",
            hint="write the zone as a quoted literal",
        )


def _check_trunc_unit(node: exp.Expression) -> None:
    """date_trunc's unit is a literal among PostgreSQL's (a column there would make whether the
    query fails depend on each row's value, and an unknown unit failed in the engine)."""
    unit = node.args.get("unit")
    name = unit.name.upper() if isinstance(unit, (exp.Var, exp.Literal)) else None
    if name not in _TRUNC_SPELLINGS:
        raise invalid_parameter(
            f"date_trunc's unit must be a literal such as 'month', not "
            f"{unit.sql(dialect='postgres') if unit is not None else 'nothing'}",
            hint=f"one of: {', '.join(TRUNC_UNITS)}",
        )


def written_name(node: exp.Func) -> str:
    """The function's name as the analyst wrote it (NOW, TO_DATE, TO_CHAR...), not sqlglot's
    internal one (CURRENT_TIMESTAMP, STR_TO_DATE, TIME_TO_STR), for messages: the parser's
    record of the written name (classify.written_names), else its PostgreSQL spelling."""
    written = (getattr(node, "_meta", None) or {}).get(WRITTEN)
    if written:
        return written.upper()
    head = node.sql(dialect="postgres").split("(", 1)[0].strip()
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", head) and not isinstance(node, exp.Anonymous):
        return head.upper()
    return function_name(node)


# What to write instead of an aggregate that has no DP form: the nearest supported query.
_NEAREST = {
    (
        exp.Corr,
        exp.CovarPop,
        exp.CovarSamp,
        exp.RegrSlope,
    ): "compute it from AVG(x * y), AVG(x), AVG(y) and STDDEV_POP of each, in one query over bounded columns",
    (
        exp.GroupConcat,
        exp.ArrayAgg,
        exp.JSONObjectAgg,
    ): "listing values would reveal them; GROUP BY the column (with declared keys) and COUNT(*) per value",
    (
        exp.LogicalAnd,
        exp.LogicalOr,
    ): "count the rows that break the condition instead: COUNT(*) FILTER (WHERE NOT condition)",
    (
        exp.ApproxDistinct,
    ): "COUNT(DISTINCT unit_column) counts people; COUNT(DISTINCT column) counts a column's declared keys present",
    (exp.Mode,): "GROUP BY the column (with declared keys) and ORDER BY COUNT(*) DESC LIMIT 1",
    (
        exp.First,
        exp.Last,
        exp.AnyValue,
        exp.ArgMax,
        exp.ArgMin,
    ): "one row's value would be revealed; use a DP quantile (MEDIAN, MIN, MAX) or AVG",
    (exp.Kurtosis, exp.Skewness): "use STDDEV_POP and PERCENTILE_CONT, which dpsql answers with calibrated noise",
}


def is_public_function(node: exp.Expression) -> bool:
    """Whether `node` is a function allowed over public tables and constants only."""
    return isinstance(node, PUBLIC_FUNCTIONS) or (
        isinstance(node, exp.Anonymous) and str(node.name).upper() in _PUBLIC_ANONYMOUS
    )


def check_node(node: exp.Expression, *, public: bool = False) -> None:
    """Refuse one node that is not allowlisted, with the reason and the nearest allowed form.
    `public`: the query reads public tables only, so PUBLIC_FUNCTIONS are allowed on any
    argument; otherwise only on constants."""
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
        _check_trunc_unit(node)
    if isinstance(node, exp.AtTimeZone):
        _check_zone(node)
    if (
        isinstance(node, _ALLOWED)
        or is_clock(node)
        or (isinstance(node, exp.Anonymous) and str(node.name).upper() in _ROW_ANONYMOUS)
    ):
        return
    if is_public_function(node):
        if public or node.find(exp.Column) is None:
            return
        raise forbidden(
            f"function {written_name(node)}() is allowed over public tables and constants, not over a "
            f"private table's columns: {node.sql(dialect='postgres')[:60]}",
            hint="apply it to the released answer instead (an outer query over the DP query: "
            f"SELECT {written_name(node).lower()}(...) FROM (SELECT ... GROUP BY ...) t), or use "
            f"one of: {', '.join(ALLOWED_FUNCTION_NAMES)}",
        )
    if isinstance(node, exp.Window):
        raise _window(node)
    if isinstance(node, exp.Exists):
        raise unsupported(
            "EXISTS (subquery) is not supported in a query over private rows",
            hint="join the table instead, or filter with IN over a public table's column",
        )
    if isinstance(node, (exp.AggFunc, exp.GroupConcat, exp.ArrayAgg)):
        nearest = next((hint for kinds, hint in _NEAREST.items() if isinstance(node, kinds)), None)
        raise unsupported(
            f"the aggregate {node.sql(dialect='postgres')[:60]} has no differentially private form",
            hint=nearest or f"supported aggregates: {SUPPORTED_AGGREGATES}",
        )
    if isinstance(node, (exp.RegexpLike, exp.RegexpILike)):
        raise forbidden(
            "regular expression matching (~, ~*, regexp functions) is not allowed: a pattern can take "
            "time that depends on the data",
            hint="use LIKE or ILIKE with % and _ instead",
        )
    if isinstance(node, exp.Func):
        raise forbidden(
            f"function {written_name(node)}() is not allowed",
            hint=f"allowed functions: {', '.join(ALLOWED_FUNCTION_NAMES)}; over public tables and "
            f"constants also {', '.join(PUBLIC_FUNCTION_NAMES)}",
        )
    raise unsupported(
        f"{construct(node)} is not supported here: {node.sql(dialect='postgres')[:60]}",
        hint='rewrite the query without it; the README\'s "What SQL is answered" lists what is',
    )


def _window(node: exp.Window) -> Exception:
    """A window function in a query over private rows: over its rows, or over its aggregates
    (RANK() OVER (ORDER BY COUNT(*))), which an outer query over the released answer computes."""
    written = node.sql(dialect="postgres")
    over_aggregates = any(a is not node.this for a in node.find_all(exp.AggFunc))
    example = "SELECT k, n, RANK() OVER (ORDER BY n DESC) FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) r"
    if over_aggregates:
        return forbidden(
            f"window functions over this query's aggregates go in an outer query over its answer: {written[:80]}",
            hint=f"name the aggregates in a subquery and apply the window function over it: {example}",
        )
    return forbidden(
        f"window functions over private rows are not allowed: {written[:80]}",
        hint=f"aggregate with GROUP BY first, then apply the window function in an outer query over that result: "
        f"{example}",
    )


def check_tree(node: exp.Expression, *, skip=(exp.Subquery, exp.Select), public: bool = False) -> None:
    """Check every node below `node`, except nested queries (their own scope checks them)."""
    for child in _walk(node, skip):
        check_node(child, public=public)


def _walk(node: exp.Expression, skip):
    yield node
    for child in node.iter_expressions():
        if isinstance(child, skip):
            continue
        yield from _walk(child, skip)


SUPPORTED_AGGREGATES = (
    "COUNT(*), COUNT(column), COUNT(DISTINCT unit or declared-keys column), SUM, AVG, "
    "VAR_POP, VAR_SAMP, STDDEV_POP, STDDEV_SAMP, MEDIAN, PERCENTILE_CONT(p) WITHIN GROUP "
    "(ORDER BY x), QUANTILE(x, p), MIN, MAX"
)


def order_statistic(node: exp.Expression) -> tuple[exp.Expression, exp.Expression | float, str] | None:
    """(argument, fraction p, name) of a quantile-like aggregate, in any of its spellings;
    MIN and MAX are the quantiles 0 and 1. None for other nodes."""
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, (exp.PercentileCont, exp.PercentileDisc)):
        order = node.expression.expressions if isinstance(node.expression, exp.Order) else []
        if len(order) != 1:
            return None
        p = node.this.this
        if order[0].args.get("desc"):
            p = exp.Sub(this=exp.Literal.number(1), expression=p.copy())
        return order[0].this, p, function_name(node.this)
    if isinstance(node, exp.Median):
        return node.this, 0.5, "MEDIAN"
    if isinstance(node, exp.Min):
        return node.this, 0.0, "MIN"
    if isinstance(node, exp.Max):
        return node.this, 1.0, "MAX"
    if isinstance(node, (exp.Quantile, exp.ApproxQuantile)):
        return node.this, node.args["quantile"], function_name(node)
    if isinstance(node, (exp.PercentileCont, exp.PercentileDisc)) and node.expression is not None:
        return node.this, node.expression, function_name(node)
    if isinstance(node, exp.Anonymous) and node.name.upper() in _QUANTILE_NAMES and len(node.expressions) == 2:
        return node.expressions[0], node.expressions[1], node.name.upper()
    return None


def is_aggregate(node: exp.Expression) -> bool:
    if isinstance(node, exp.Filter):
        return is_aggregate(node.this)
    return isinstance(node, (exp.AggFunc, exp.WithinGroup)) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in _QUANTILE_NAMES
    )


def contains_aggregate(node: exp.Expression) -> bool:
    return any(is_aggregate(n) for n in _walk(node, (exp.Subquery, exp.Select)))
