"""PostgreSQL's meaning of functions the engines spell or mean differently, written out in
nodes every engine reads alike (EXTRACT, CAST, LPAD, CASE, ||, REPLACE).

- FORMAT(fmt, ...): DuckDB's format() is fmt's `{}` syntax and Spark's format_string() is
  Java's; PostgreSQL's %s, %I, %L, %%, positions (%2$s), widths and the `-` flag become
  concatenations.
- TO_CHAR(date or timestamp, fmt): DuckDB's strftime and Spark's date_format know other
  patterns (sqlglot maps some of PostgreSQL's, and passes the others through as text); each
  pattern becomes the field it names, padded as PostgreSQL pads it.

A format must be a literal: then what the query computes, and whether it is refused, depends on
the text alone. A pattern dpsql does not write out is refused (free), never passed on to mean
something else.

- REPEAT, LPAD and RPAD build a string of the length asked for, which no engine's memory limit
  stops (DuckDB allocated 2 GB for one REPEAT under a 100 MB limit): PostgreSQL refuses one over
  1 GB, dpsql over MAX_STRING characters. A literal length over it is refused (54000, before
  anything runs or is charged); a computed one, which can only come from public columns or
  released values (sql/allowlist.py keeps these functions off private columns), gives NULL
  beyond it. Pure.
"""

from __future__ import annotations

import re

from sqlglot import exp

from ..errors import ProgrammingError, invalid_parameter, unsupported
from .build import dtype

# The longest string REPEAT, LPAD or RPAD may build (characters).
MAX_STRING = 100_000


def postgres_meaning(tree: exp.Expression) -> exp.Expression:
    """`tree` with FORMAT and TO_CHAR written out and string lengths capped (a copy where it has
    any; `tree` itself else)."""
    if not any(isinstance(n, (exp.Format, exp.Repeat, exp.Pad)) or is_to_char(n) for n in tree.walk()):
        return tree
    written = tree.transform(_visit, copy=True)
    return written.transform(_capped, copy=False) if any(written.find_all(exp.Repeat, exp.Pad)) else written


def _visit(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Format):
        return formatted(node)
    if is_to_char(node):
        return to_char(node)
    return node


def _capped(node: exp.Expression) -> exp.Expression:
    key = "times" if isinstance(node, exp.Repeat) else "expression" if isinstance(node, exp.Pad) else None
    length = node.args.get(key) if key else None
    if length is None or length.meta.get("dpsql_capped"):
        return node
    if isinstance(length, exp.Literal) and not length.is_string:
        if float(length.this) > MAX_STRING:
            raise ProgrammingError(
                f"{_name(node)} would build a string of {length.this} characters; the limit is "
                f"{MAX_STRING:,}: nothing was run or charged",
                sqlstate="54000",
                hint="ask for a shorter string",
            )
        return node
    capped = exp.Case(
        ifs=[exp.If(this=exp.LTE(this=length.copy(), expression=exp.Literal.number(MAX_STRING)), true=length.copy())]
    )
    capped.meta["dpsql_capped"] = True
    node.set(key, capped)
    return node


def _name(node: exp.Expression) -> str:
    if isinstance(node, exp.Pad):
        return "lpad" if node.args.get("is_left") else "rpad"
    return "repeat"


def is_to_char(node: exp.Expression) -> bool:
    """TO_CHAR(x, pattern), as classify reads it (an Anonymous call holding PostgreSQL's pattern)."""
    return isinstance(node, exp.Anonymous) and str(node.name).upper() == "TO_CHAR"


# FORMAT --------------------------------------------------------------------------------------
_SPEC = re.compile(r"%(?:(?P<pos>\d+)\$)?(?P<minus>-)?(?P<width>\d+)?(?P<type>.)?", re.S)


def formatted(node: exp.Format) -> exp.Expression:
    fmt = node.this
    args = list(node.expressions)
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise invalid_parameter(
            "format()'s format string must be a literal", hint="write it in quotes: format('%s-%s', a, b)"
        )
    text, pieces, i, nxt = fmt.this, [], 0, 0
    literal = []
    while i < len(text):
        c = text[i]
        if c != "%":
            literal.append(c)
            i += 1
            continue
        m = _SPEC.match(text, i)
        kind = m.group("type")
        if kind == "%" and not (m.group("pos") or m.group("minus") or m.group("width")):
            literal.append("%")
            i = m.end()
            continue
        if kind not in ("s", "I", "L"):
            raise invalid_parameter(
                f"format(): unrecognized format() type specifier {kind!r}"
                if kind
                else "format(): unterminated format() type specifier",
                hint="use %s, %I, %L or %%",
            )
        index = int(m.group("pos")) - 1 if m.group("pos") else nxt
        if index < 0 or index >= len(args):
            raise invalid_parameter(
                "format(): too few arguments for format()",
                hint=f"the format names argument {index + 1}; {len(args)} given",
            )
        nxt = index + 1
        if literal:
            pieces.append(exp.Literal.string("".join(literal)))
            literal = []
        pieces.append(_padded(_spec_value(kind, args[index]), m.group("width"), bool(m.group("minus"))))
        i = m.end()
    if literal:
        pieces.append(exp.Literal.string("".join(literal)))
    return _joined(pieces)


def _text(value: exp.Expression) -> exp.Expression:
    return exp.Cast(this=value.copy(), to=dtype("TEXT"))


def _spec_value(kind: str, arg: exp.Expression) -> exp.Expression:
    if kind == "s":  # NULL is the empty string
        return exp.Coalesce(this=_text(arg), expressions=[exp.Literal.string("")])
    if kind == "I":
        return quote_ident(arg)
    return quote_literal(arg)


def _padded(value: exp.Expression, width: str | None, left: bool) -> exp.Expression:
    """At least `width` characters, blank-padded on the left (`-`: on the right); never cut."""
    if not width or int(width) == 0:
        return value
    w = exp.Literal.number(int(width))
    pad = exp.Pad(this=value.copy(), expression=w, fill_pattern=exp.Literal.string(" "), is_left=not left)
    return exp.Case(
        ifs=[exp.If(this=exp.GTE(this=exp.Length(this=value.copy()), expression=w.copy()), true=value)], default=pad
    )


def _joined(pieces: list[exp.Expression]) -> exp.Expression:
    if not pieces:
        return exp.Literal.string("")
    out = pieces[0]
    for p in pieces[1:]:
        out = exp.DPipe(this=out, expression=p, safe=True)
    return exp.Paren(this=out) if len(pieces) > 1 else out


# PostgreSQL's keywords that quote_ident quotes (reserved, and those that cannot be a column or
# type name), besides any name that is not lower case letters, digits and underscores.
_KEYWORDS = frozenset(
    """
all analyse analyze and any array as asc asymmetric authorization between bigint binary bit boolean both case cast
char character check coalesce collate collation column concurrently constraint create cross current_catalog
current_date current_role current_schema current_time current_timestamp current_user dec decimal default deferrable
desc distinct do else end except exists extract false fetch float for foreign freeze from full grant greatest group
grouping having ilike in initially inner inout int integer intersect interval into is isnull join lateral leading
least left like limit localtime localtimestamp national nchar none normalize not notnull null nullif numeric offset
on only or order out outer overlaps overlay placing position precision primary real references returning right row
select session_user setof similar smallint some substring symmetric system_user table tablesample then time
timestamp to trailing treat trim true union unique user using values varchar variadic verbose when where window
with""".split()
)
_IDENT = re.compile(r"[a-z_][a-z0-9_$]*")
_IDENT_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_$"


def quote_ident(arg: exp.Expression) -> exp.Expression:
    """PostgreSQL's quote_ident: the name as is when it needs no quotes, else in double quotes
    with quotes doubled (NULL stays NULL, which %I refuses in PostgreSQL: here it is '')."""
    if isinstance(arg, exp.Literal):
        name = arg.this
        plain = bool(_IDENT.fullmatch(name)) and name not in _KEYWORDS
        return exp.Literal.string(name if plain else '"' + name.replace('"', '""') + '"')
    value = _text(arg)
    quoted = exp.DPipe(
        this=exp.DPipe(
            this=exp.Literal.string('"'),
            expression=exp.Replace(
                this=value.copy(), expression=exp.Literal.string('"'), replacement=exp.Literal.string('""')
            ),
        ),
        expression=exp.Literal.string('"'),
    )
    stripped = exp.Translate(this=value.copy(), from_=exp.Literal.string(_IDENT_CHARS), to=exp.Literal.string(""))
    plain = exp.and_(
        exp.GT(this=exp.Length(this=value.copy()), expression=exp.Literal.number(0)),
        exp.EQ(this=stripped, expression=exp.Literal.string("")),
        exp.Not(
            this=exp.In(
                this=exp.Substring(this=value.copy(), start=exp.Literal.number(1), length=exp.Literal.number(1)),
                expressions=[exp.Literal.string(d) for d in "0123456789$"],
            )
        ),
        exp.Not(this=exp.In(this=value.copy(), expressions=[exp.Literal.string(k) for k in sorted(_KEYWORDS)])),
    )
    return exp.Coalesce(
        this=exp.Case(ifs=[exp.If(this=plain, true=value)], default=quoted), expressions=[exp.Literal.string("")]
    )


def quote_literal(arg: exp.Expression) -> exp.Expression:
    """PostgreSQL's quote_nullable: NULL as the word NULL, else in single quotes with quotes
    doubled (and E'...' with backslashes doubled where it holds a backslash)."""
    if isinstance(arg, exp.Null):
        return exp.Literal.string("NULL")
    if isinstance(arg, exp.Literal):
        v = arg.this
        quoted = "'" + v.replace("'", "''") + "'"
        return exp.Literal.string("E'" + v.replace("\\", "\\\\").replace("'", "''") + "'" if "\\" in v else quoted)
    value = _text(arg)

    def wrap(prefix: str, inner: exp.Expression) -> exp.Expression:
        return exp.DPipe(
            this=exp.DPipe(this=exp.Literal.string(prefix), expression=inner), expression=exp.Literal.string("'")
        )

    doubled = exp.Replace(this=value.copy(), expression=exp.Literal.string("'"), replacement=exp.Literal.string("''"))
    escaped = exp.Replace(
        this=exp.Replace(
            this=value.copy(), expression=exp.Literal.string("\\"), replacement=exp.Literal.string("\\\\")
        ),
        expression=exp.Literal.string("'"),
        replacement=exp.Literal.string("''"),
    )
    return exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Literal.string("NULL")),
            exp.If(
                this=exp.GT(
                    this=exp.StrPosition(this=value.copy(), substr=exp.Literal.string("\\")),
                    expression=exp.Literal.number(0),
                ),
                true=wrap("E'", escaped),
            ),
        ],
        default=wrap("'", doubled),
    )


# TO_CHAR -------------------------------------------------------------------------------------
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")

# Numeric patterns (any case), longest first: (field, width, how the field is computed).
_NUMERIC = (
    ("HH24", "HOUR", 2),
    ("HH12", "HOUR12", 2),
    ("IYYY", "ISOYEAR", 4),
    ("YYYY", "YEAR", 4),
    ("YYY", "YEAR3", 3),
    ("DDD", "DOY", 3),
    ("HH", "HOUR12", 2),
    ("YY", "YEAR2", 2),
    ("MM", "MONTH", 2),
    ("DD", "DAY", 2),
    ("MI", "MINUTE", 2),
    ("SS", "SECOND", 2),
    ("MS", "MS", 3),
    ("US", "US", 6),
    ("IW", "WEEK", 2),
    ("WW", "WW", 2),
    ("ID", "ISODOW", 1),
    ("Y", "YEAR1", 1),
    ("D", "DOW1", 1),
    ("W", "W", 1),
    ("Q", "QUARTER", 1),
)
_NAMES = ("MONTH", "Month", "month", "MON", "Mon", "mon", "DAY", "Day", "day", "DY", "Dy", "dy")
_MERIDIEM = ("A.M.", "P.M.", "a.m.", "p.m.", "AM", "PM", "am", "pm")
_UNSUPPORTED = re.compile(r"(?i)(SSSSS|SSSS|CC|TZH|TZM|TZ|OF|RM|TH|SP|J|BC|AD|B\.C\.|A\.D\.|IDDD|IYY|IY|I|Y,YYY|FX|TM)")


def to_char(node: exp.Anonymous) -> exp.Expression:
    if len(node.expressions) != 2:
        raise unsupported("TO_CHAR takes a date or timestamp and a pattern", hint="TO_CHAR(visit_date, 'YYYY-MM')")
    value, fmt = node.expressions
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise invalid_parameter("TO_CHAR's format must be a literal", hint="write it in quotes: TO_CHAR(d, 'YYYY-MM')")
    text = fmt.this
    # as a timestamp (in the session's zone, UTC, for a timestamptz), as PostgreSQL's to_char
    # reads a date: its EXTRACT of HOUR from a date is an error there
    value = exp.Cast(this=value.copy(), to=dtype("TIMESTAMP"))
    if (isinstance(value, exp.Literal) and not value.is_string) or re.search(r"9|EEEE|\bRN\b", text):
        raise unsupported(
            "TO_CHAR of a number is not supported by dpsql (only of dates and timestamps)",
            hint="CAST(x AS TEXT), ROUND(x, 2) or format('%s', x) instead",
        )
    pieces: list[exp.Expression] = []
    literal: list[str] = []
    i, fill = 0, False
    while i < len(text):
        if text.startswith(("FM", "fm", "Fm", "fM"), i):
            fill, i = True, i + 2
            continue
        if text[i] == '"':
            end = text.find('"', i + 1)
            end = len(text) if end < 0 else end
            literal.append(text[i + 1 : end])
            i = end + 1
            continue
        if text[i] == "\\" and i + 1 < len(text):
            literal.append(text[i + 1])
            i += 2
            continue
        piece, length = _pattern(text, i, value, fill)
        if piece is None:
            if text[i].isalpha() and _UNSUPPORTED.match(text, i):
                word = _UNSUPPORTED.match(text, i).group(0)
                raise unsupported(
                    f"TO_CHAR's pattern {word} is not supported by dpsql",
                    hint="supported: YYYY YYY YY Y IYYY MM Mon Month DD DDD D ID Day Dy HH HH12 HH24 MI "
                    'SS MS US AM PM Q WW IW W, the FM prefix and "quoted text"',
                )
            literal.append(text[i])
            i += 1
            continue
        if literal:
            pieces.append(exp.Literal.string("".join(literal)))
            literal = []
        pieces.append(piece)
        fill = False
        i += length
    if literal:
        pieces.append(exp.Literal.string("".join(literal)))
    return _joined(pieces)


def _pattern(text: str, i: int, value: exp.Expression, fill: bool) -> tuple[exp.Expression | None, int]:
    for word in _MERIDIEM:
        if text.startswith(word, i):
            am, pm = (
                ("AM", "PM")
                if word in ("AM", "PM")
                else ("am", "pm")
                if word in ("am", "pm")
                else ("A.M.", "P.M.")
                if word[0].isupper()
                else ("a.m.", "p.m.")
            )
            hour = _field("HOUR", value)
            return exp.Case(
                ifs=[exp.If(this=exp.LT(this=hour, expression=exp.Literal.number(12)), true=exp.Literal.string(am))],
                default=exp.Literal.string(pm),
            ), len(word)
    for word in _NAMES:
        if text.startswith(word, i):
            month = word.upper().startswith("MON")
            names = _MONTHS if month else _DAYS
            short = word.upper() in ("MON", "DY")
            field = _field("MONTH" if month else "DOW", value)
            first = 1 if month else 0
            ifs = []
            for k, name in enumerate(names):
                shown = name[:3] if short else name if fill else name.ljust(9)
                shown = shown.upper() if word.isupper() else shown.lower() if word.islower() else shown
                ifs.append(
                    exp.If(
                        this=exp.EQ(this=field.copy(), expression=exp.Literal.number(k + first)),
                        true=exp.Literal.string(shown),
                    )
                )
            return exp.Case(ifs=ifs), len(word)
    upper = text[i : i + 4].upper()
    for word, field, width in _NUMERIC:
        if upper.startswith(word):
            number = _text(_field(field, value))
            if fill or width == 1:
                return number, len(word)
            return exp.Pad(
                this=number, expression=exp.Literal.number(width), fill_pattern=exp.Literal.string("0"), is_left=True
            ), len(word)
    return None, 0


def _int(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=e, to=dtype("BIGINT"))


def _extract(field: str, value: exp.Expression) -> exp.Expression:
    return exp.Extract(this=exp.Var(this=field), expression=value.copy())


def _mod(e: exp.Expression, n: int) -> exp.Expression:
    return exp.Paren(this=exp.Mod(this=exp.Paren(this=e), expression=exp.Literal.number(n)))


def _field(field: str, value: exp.Expression) -> exp.Expression:
    """A whole number of the date or timestamp, as TO_CHAR's pattern for it means it."""
    one = exp.Literal.number(1)
    if field == "HOUR12":  # 12, 1, ..., 11, 12, 1, ... 11
        return exp.Add(
            this=_mod(exp.Add(this=_int(_extract("HOUR", value)), expression=exp.Literal.number(11)), 12),
            expression=one,
        )
    if field.startswith("YEAR") and field != "YEAR":
        return _mod(_int(_extract("YEAR", value)), 10 ** int(field[4:]))
    if field == "SECOND":
        return _int(exp.Floor(this=_extract("SECOND", value)))
    if field == "MS":
        return _mod(_int(exp.Floor(this=_extract("MILLISECOND", value))), 1000)
    if field == "US":
        return _mod(_int(_extract("MICROSECOND", value)), 1_000_000)
    if field == "DOW1":
        return exp.Add(this=_int(_extract("DOW", value)), expression=one)
    if field in ("WW", "W"):
        day = _int(_extract("DOY" if field == "WW" else "DAY", value))
        return exp.Add(
            this=_int(
                exp.Floor(
                    this=exp.Div(
                        this=exp.Paren(this=exp.Sub(this=day, expression=one)), expression=exp.Literal.number(7.0)
                    )
                )
            ),
            expression=one,
        )
    return _int(_extract(field, value))
