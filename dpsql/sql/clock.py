"""The clock in a query: NOW(), CURRENT_TIMESTAMP, CURRENT_DATE, LOCALTIMESTAMP, LOCALTIME,
CURRENT_TIME, transaction_timestamp(), statement_timestamp(), clock_timestamp().

The clock is public (it is no one's data), and it is the same for every row of a statement, so
dpsql reads it once, when a statement starts, in UTC (the TimeZone dpsql reports to clients),
and writes it into the query as typed literals (`pinned`) before anything plans it. So:

- every engine gets one spelling it reads alike (DuckDB's, PostgreSQL's and Spark's clock
  functions differ in name and zone), and every mention in one statement is the same instant,
  as PostgreSQL's now() is within a transaction (clock_timestamp() too: dpsql does not tell
  apart instants within a statement);
- a filter relative to the clock (`visit_date >= CURRENT_DATE - 7`) is an ordinary constant
  filter: the answer depends on when it is asked, and each query that runs is charged as any
  other. The answer cache and the engine's reused results are keyed by the query as pinned, so
  a repeated CURRENT_DATE query is served again the same day only, and a NOW() query never
  gets an answer computed at another instant.

Pure: the instant is an argument.
"""

from __future__ import annotations

import datetime

from sqlglot import exp

# sqlglot parses these as Anonymous functions: PostgreSQL's other names for now().
_NOW_NAMES = frozenset({"NOW", "TRANSACTION_TIMESTAMP", "STATEMENT_TIMESTAMP", "CLOCK_TIMESTAMP"})
CLOCK_NODES = (exp.CurrentDate, exp.CurrentTimestamp, exp.Localtimestamp, exp.Localtime, exp.CurrentTime)


def is_clock(node: exp.Expression) -> bool:
    return isinstance(node, CLOCK_NODES) or (
        isinstance(node, exp.Anonymous) and not node.expressions and str(node.name).upper() in _NOW_NAMES
    )


def has_clock(tree: exp.Expression) -> bool:
    return any(is_clock(n) for n in tree.walk())


def now() -> datetime.datetime:
    """The instant a statement reads the clock at, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc)


def pinned(tree: exp.Expression, at: datetime.datetime) -> exp.Expression:
    """A copy of `tree` with each clock function replaced by its value at `at` (an aware
    datetime), as a literal cast to PostgreSQL's type for it; `tree` itself when it reads no
    clock. Subqueries and CTEs included: one instant for the whole statement."""
    if not has_clock(tree):
        return tree
    utc = at.astimezone(datetime.timezone.utc)
    return tree.transform(lambda n: value(n, utc) if is_clock(n) else n, copy=True)


def value(node: exp.Expression, utc: datetime.datetime) -> exp.Expression:
    """The literal one clock function stands for at the UTC instant `utc`."""
    utc = _rounded(utc, node.args.get("this") if not isinstance(node, exp.Anonymous) else None)
    if isinstance(node, exp.CurrentDate):
        text, kind = utc.date().isoformat(), "DATE"
    elif isinstance(node, exp.Localtimestamp):
        text, kind = utc.replace(tzinfo=None).isoformat(sep=" "), "TIMESTAMP"
    elif isinstance(node, exp.Localtime):
        text, kind = utc.time().isoformat(), "TIME"
    elif isinstance(node, exp.CurrentTime):
        text, kind = utc.time().isoformat() + "+00", "TIMETZ"
    else:
        text, kind = utc.replace(tzinfo=None).isoformat(sep=" ") + "+00", "TIMESTAMPTZ"
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build(kind))


def _rounded(at: datetime.datetime, precision: exp.Expression | None) -> datetime.datetime:
    """CURRENT_TIMESTAMP(p), LOCALTIMESTAMP(p)...: the fraction of a second rounded to p digits."""
    if not (isinstance(precision, exp.Literal) and not precision.is_string and precision.this.isdigit()):
        return at
    digits = min(int(precision.this), 6)
    step = 10 ** (6 - digits)
    micro = round(at.microsecond / step) * step
    return at.replace(microsecond=0) + datetime.timedelta(microseconds=micro)
