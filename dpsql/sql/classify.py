"""What a statement is, decided from its text alone (schema and policy never consulted here).

Session commands (SET/SHOW/RESET, transaction control, EXPLAIN) are recognised by their
leading keywords before sqlglot sees them: sqlglot parses several of them wrongly (`DISCARD ALL`
becomes a column alias) or not at all. Everything that is not a SELECT is refused here, with
the reason, before any data or budget is touched.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import cached_property

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from ..errors import ProgrammingError, forbidden, syntax_error, unsupported
from .allowlist import WRITTEN
from .build import positionless
from .clock import has_clock, is_clock
from .limits import QueryLimits
from .options import QueryOptions, extract

DEFAULT_LIMITS = QueryLimits()

logging.getLogger("sqlglot").setLevel(logging.ERROR)

READ_DIALECT = "postgres"


@dataclass(frozen=True)
class SetCommand:
    name: str
    value: str | None  # None means RESET


@dataclass(frozen=True)
class ShowCommand:
    name: str


@dataclass(frozen=True)
class TransactionCommand:
    verb: str


@dataclass(frozen=True)
class Explain:
    query: "Query"


@dataclass(frozen=True)
class Query:
    sql: str
    tree: exp.Query
    options: QueryOptions = QueryOptions()

    @cached_property
    def placeholders(self) -> bool:
        """Whether the tree holds %s, %(name)s or $n placeholders: asked at every execution of
        a statement the session keeps parsed, so walked once."""
        return any(isinstance(n, (exp.Placeholder, exp.Parameter)) for n in self.tree.walk())

    @cached_property
    def clocked(self) -> bool:
        """Whether the tree reads the clock (NOW(), CURRENT_DATE...: sql/clock.py), walked once."""
        return has_clock(self.tree)


@dataclass(frozen=True)
class ViewCommand:
    """CREATE TEMPORARY VIEW name AS query (a session-local definition, never materialised),
    or DROP VIEW name (query None)."""

    name: str
    query: Query | None
    replace: bool = False
    if_exists: bool = False


Statement = SetCommand | ShowCommand | TransactionCommand | Explain | Query | ViewCommand

_TRANSACTION_WORDS = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE"}
_ALLOWED_HINT = (
    "dpsql answers aggregate SELECT queries (COUNT, SUM, AVG ...) over the declared tables, "
    "SET/SHOW dpsql.* settings and EXPLAIN"
)

_SET_RE = re.compile(r"^SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][\w.]*)\s*(?:=|\bTO\b)\s*(.+?)\s*$", re.I | re.S)
_SET_ROLE_RE = re.compile(r"^SET\s+(?:SESSION\s+|LOCAL\s+)?(?:ROLE\b|SESSION\s+AUTHORIZATION\b)", re.I)
_RESET_RE = re.compile(r"^RESET\s+([A-Za-z_][\w.]*|ALL)\s*$", re.I)
# Back to the login's own identity, which a connection never leaves: what pools send on reset.
_IDENTITY_RESET = re.compile(
    r"^(?:SET\s+(?:SESSION\s+|LOCAL\s+)?(?:SESSION\s+AUTHORIZATION\s+DEFAULT|ROLE\s+NONE)|"
    r"RESET\s+(?:SESSION\s+AUTHORIZATION|ROLE))\s*$",
    re.I,
)
_SHOW_RE = re.compile(r"^SHOW\s+([A-Za-z_][\w.]*|ALL)\s*$", re.I)


_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\x80-\uffff][\w\x80-\uffff]*)?\$")


def spaced_parameters(sql: str) -> str:
    """`$n` placeholders preceded by a space. sqlglot's tokenizer reads `$1,$2` or `$1+$2` as
    the start of a dollar-quoted string and fails (postgres.js writes `IN ($1,$2)`); a space
    changes nothing else. Quotes, comments and dollar-quoted strings are skipped."""
    if "$" not in sql:
        return sql
    out, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            escapes = c == "'" and i > 0 and sql[i - 1] in "eE"  # E'...' strings take backslash escapes
            end = i + 1
            while end < n:
                if sql[end] == c:
                    if end + 1 < n and sql[end + 1] == c:
                        end += 2
                        continue
                    break
                end += 2 if escapes and sql[end] == "\\" else 1
            out.append(sql[i : end + 1])
            i = end + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end])
            i = end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end])
            i = end
        elif c == "$" and i + 1 < n and sql[i + 1].isdigit():
            before = sql[i - 1] if i else " "
            if not (before.isspace() or before.isalnum() or before in "_$"):  # x$1 is an identifier
                out.append(" ")
            end = i + 1
            while end < n and sql[end].isdigit():
                end += 1
            out.append(sql[i:end])
            i = end
        elif c == "$" and (m := _DOLLAR_TAG.match(sql, i)) and not (i and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            close = sql.find(m.group(0), m.end())
            end = n if close < 0 else close + len(m.group(0))
            out.append(sql[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_statements(sql: str, limits: QueryLimits = DEFAULT_LIMITS) -> list[str]:
    """Split on top-level semicolons using sqlglot's tokenizer (quotes and comments respected).
    Every statement text enters here first: its size and token count are checked before it is
    parsed."""
    limits.text(sql)
    sql = spaced_parameters(sql)
    if ";" not in sql and "--" not in sql and "/*" not in sql and len(sql) <= limits.max_tokens:
        body = sql.strip()  # one statement, and no more tokens than characters: nothing to split or count
        return [body] if body else []
    try:
        tokens = sqlglot.tokenize(sql, read=READ_DIALECT)
    except (TokenError, ValueError) as e:
        raise syntax_error(f"cannot read the statement: {e}") from None
    limits.tokens(len(tokens))
    parts, start = [], 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            parts.append(sql[start : tok.start])
            start = tok.end + 1
    parts.append(sql[start:])
    return [p.strip() for p in parts if _strip_comments(p).strip()]


_LEADING = re.compile(r"\s*(?:--[^\n]*(?:\n|$)|/\*.*?\*/)", re.S)


def without_leading_comments(text: str) -> str:
    """The statement from its first keyword on: tools prefix comments (dbt's /* {"app": ...} */,
    psql's -- lines), which must not hide what the statement is."""
    pos = 0
    while True:
        m = _LEADING.match(text, pos)
        if m is None or m.end() == pos:
            return text[pos:].lstrip()
        pos = m.end()


def first_word(text: str) -> str:
    """The statement's leading keyword, upper-case, after any leading comments."""
    body = without_leading_comments(text)
    return body.split(None, 1)[0].upper().rstrip(";") if body else ""


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"--[^\n]*", " ", text)


def classify(sql: str, limits: QueryLimits = DEFAULT_LIMITS) -> Statement:
    """Classify one SQL string; raise a ProgrammingError for what dpsql never runs, or for a
    statement beyond the limits."""
    statements = split_statements(sql, limits)
    if not statements:
        raise syntax_error("empty query", hint=_ALLOWED_HINT)
    if len(statements) > 1:
        raise forbidden("multiple statements in one query string are not allowed", hint="send one statement at a time")
    return classify_one(statements[0], limits)


_MULTIWORD_SHOW = {
    "TRANSACTION ISOLATION LEVEL": "transaction_isolation",
    "TIME ZONE": "timezone",
    "SESSION AUTHORIZATION": "session_authorization",
}
_TRANSACTION_SET = re.compile(r"^SET\s+(SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b", re.I)
_TIME_ZONE_SET = re.compile(r"^SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(.+?)\s*$", re.I | re.S)


def classify_one(text: str, limits: QueryLimits = DEFAULT_LIMITS) -> Statement:
    body = _strip_comments(text).strip().rstrip(";").strip()
    upper = " ".join(body.upper().split())
    for words, name in _MULTIWORD_SHOW.items():
        if upper == f"SHOW {words}":
            return ShowCommand(name)
    if _TRANSACTION_SET.match(body):
        return TransactionCommand("SET")
    m = _TIME_ZONE_SET.match(body)
    if m:
        return SetCommand("timezone", _unquote(m.group(1)))
    first = body.split(None, 1)[0].upper().rstrip("(") if body else ""
    if body.startswith("("):
        first = "("
    if _IDENTITY_RESET.match(body):
        return TransactionCommand(first)  # a no-op, answered with its command tag
    if first == "SET":
        if _SET_ROLE_RE.match(body):
            raise forbidden(
                "a connection stays the analyst who logged in: SET ROLE and SET SESSION AUTHORIZATION "
                "are not supported",
                hint="connect as the other analyst, with their own login",
            )
        m = _SET_RE.match(body)
        if not m:
            raise syntax_error("cannot read this SET", hint="write SET name = value, e.g. SET dpsql.epsilon = 0.5")
        if m.group(2).upper() == "DEFAULT":  # SET x TO DEFAULT is RESET x (a quoted 'default' is a value)
            return SetCommand(m.group(1).lower(), None)
        return SetCommand(m.group(1).lower(), _unquote(m.group(2)))
    if first == "RESET":
        m = _RESET_RE.match(body)
        if not m:
            raise syntax_error("cannot read this RESET", hint="write RESET name")
        return SetCommand(m.group(1).lower(), None)
    if first == "SHOW":
        m = _SHOW_RE.match(body)
        if not m:
            raise syntax_error("cannot read this SHOW", hint="write SHOW name, e.g. SHOW dpsql.budget")
        return ShowCommand(m.group(1).lower())
    if first in _TRANSACTION_WORDS:
        return TransactionCommand(first)
    if first in _PIVOT_WORDS:
        raise pivot_refusal()
    if first == "EXPLAIN":
        rest = body[len("EXPLAIN") :].strip()
        if re.match(r"^(ANALYZE|\()", rest, re.I):
            raise unsupported(
                "EXPLAIN ANALYZE and EXPLAIN options are not supported",
                hint="EXPLAIN <query> shows the plan, noise and cost without running the query",
            )
        inner = classify_one(_without_first_word(text, "EXPLAIN"), limits)
        if not isinstance(inner, Query):
            raise unsupported("EXPLAIN works on SELECT queries only")
        return Explain(inner)
    if first in ("SELECT", "WITH", "("):
        plain, options = extract(text, READ_DIALECT)
        return Query(text, _parse(plain, limits), options)
    if first in ("CREATE", "DROP") and re.match(
        r"^(CREATE|DROP)\s+(OR\s+REPLACE\s+)?(TEMP\s+|TEMPORARY\s+)?VIEW\b", body, re.I
    ):
        return _view(body, limits)
    if first == "CREATE" and re.match(r"^CREATE\s+(?:LOCAL\s+|GLOBAL\s+)?(?:TEMP|TEMPORARY)\s+TABLE\b", body, re.I):
        raise forbidden(
            "temporary tables are not supported: dpsql stores nothing",
            hint="CREATE TEMPORARY VIEW name AS SELECT ... keeps a query in your session instead",
        )
    if first:
        raise forbidden(f"{first or 'this'} statements are not allowed", hint=_ALLOWED_HINT)
    raise syntax_error("cannot read the statement", hint=_ALLOWED_HINT)


# A view's name may be qualified by the database and schema (dbt writes "db"."schema"."name"):
# dpsql serves one database, and session views live in no schema of it.
_QUALIFIERS = r"(?:(?:\"[^\"]+\"|\w+)\s*\.\s*){0,2}"
_CREATE_VIEW = re.compile(
    r"^CREATE\s+(?P<replace>OR\s+REPLACE\s+)?(?P<temp>TEMP\s+|TEMPORARY\s+)?VIEW\s+"
    + _QUALIFIERS
    + r"(?P<name>\"[^\"]+\"|\w+)\s+AS\s+(?P<query>.+)$",
    re.I | re.S,
)
_DROP_VIEW = re.compile(
    r"^DROP\s+VIEW\s+(?P<exists>IF\s+EXISTS\s+)?" + _QUALIFIERS + r"(?P<name>\"[^\"]+\"|\w+)"
    r"\s*(?:CASCADE|RESTRICT)?$",
    re.I | re.S,
)


def _view(body: str, limits: QueryLimits) -> ViewCommand:
    m = _DROP_VIEW.match(body)
    if m:
        return ViewCommand(identifier(m.group("name")), None, if_exists=bool(m.group("exists")))
    m = _CREATE_VIEW.match(body)
    if m is None:
        raise syntax_error("cannot read this CREATE VIEW", hint="CREATE TEMPORARY VIEW name AS SELECT ...")
    if not m.group("temp"):
        raise forbidden(
            "dpsql keeps no views in the database; views live in your session",
            hint="CREATE TEMPORARY VIEW name AS SELECT ...: stored as a definition and run, "
            "and charged, only when a query reads it",
        )
    inner = classify_one(m.group("query"), limits)
    if not isinstance(inner, Query):
        raise unsupported("a view is defined by a SELECT query")
    return ViewCommand(identifier(m.group("name")), inner, replace=bool(m.group("replace")))


def identifier(raw: str) -> str:
    """A name as PostgreSQL reads it: "Quoted" as written, otherwise folded to lower case."""
    return raw[1:-1].replace('""', '"') if raw.startswith('"') else raw.lower()


def _without_first_word(text: str, word: str) -> str:
    """The text without its leading keyword, comments kept (they may carry dpsql options)."""
    for token in sqlglot.tokenize(text, read=READ_DIALECT):
        if token.text.upper() == word:
            return text[: token.start] + text[token.end + 1 :]
    return text


_PIVOT_WORDS = {"PIVOT", "UNPIVOT", "PIVOT_WIDER", "PIVOT_LONGER"}
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_PIVOT_SPELLING = re.compile(r"\b(?:UN)?PIVOT(?:_WIDER|_LONGER)?\b", re.I)


def pivot_refusal() -> ProgrammingError:
    """DuckDB's PIVOT (and UNPIVOT, PIVOT_WIDER, PIVOT_LONGER), in any position: without an IN
    list, binding it reads the column's distinct values to name the result's columns, so even
    a schema probe or a describe before the charge would read private rows."""
    return forbidden(
        "PIVOT and UNPIVOT are not allowed: DuckDB's PIVOT reads the data to name its columns",
        hint="group instead: SELECT key, COUNT(*) FROM t GROUP BY key (a declared key's values are its "
        "domain), one row per value; nothing was run or charged",
    )


def _parse(text: str, limits: QueryLimits) -> exp.Query:
    try:
        tree = sqlglot.parse_one(text, read=READ_DIALECT)
    except RecursionError:
        raise syntax_error(
            "the statement nests parentheses or function calls too deeply to read",
            hint="simplify the statement (fewer levels of nesting); nothing was run or charged",
        ) from None
    except ParseError as e:
        if _PIVOT_SPELLING.search(
            _QUOTED.sub("''", _strip_comments(text))
        ):  # PIVOT_WIDER and friends, which sqlglot cannot read
            raise pivot_refusal() from None
        detail = e.errors[0]["description"] if e.errors else str(e)
        raise syntax_error(f"syntax error: {detail}", hint="check the query near the position given") from None
    except TokenError as e:
        raise syntax_error(f"syntax error: {e}") from None
    while isinstance(tree, exp.Subquery) and not any(v for k, v in tree.args.items() if k != "this"):
        tree = tree.this  # (SELECT ...) as a whole statement, or a view's body in parentheses
    if not isinstance(tree, exp.Query):
        raise forbidden("only SELECT queries are allowed", hint=_ALLOWED_HINT)
    if tree.find(exp.Pivot) is not None:  # anywhere: a subquery, a CTE, a join, a view's body
        raise pivot_refusal()
    if tree.find(exp.Into) is not None:
        raise forbidden(
            "SELECT ... INTO creates a table, and dpsql creates none",
            hint="drop the INTO clause to have the answer returned",
        )
    written = written_names(tree, text)
    positionless(tree)
    for node, name in written:
        node.meta[WRITTEN] = name
    limits.tree(tree)
    return _normalized(tree)


def written_names(tree: exp.Expression, text: str) -> list[tuple[exp.Expression, str]]:
    """The functions whose name as written differs from sqlglot's for them (NOW() is its
    CURRENT_TIMESTAMP, TO_CHAR its TIME_TO_STR), with that name: messages name what the
    analyst typed (allowlist.written_name). Read from the parser's token positions, before
    they are dropped."""
    out = []
    for node in tree.walk():
        meta = getattr(node, "_meta", None)
        if not meta or not isinstance(node, exp.Func) or isinstance(node, exp.Anonymous) or "start" not in meta:
            continue
        name = text[meta["start"] : meta["end"] + 1]
        if name.upper() != node.sql_name() and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.append((node, name))
        fmt = node.args.get("format") if isinstance(node, exp.TimeToStr) else None
        if isinstance(fmt, exp.Literal) and fmt.is_string:
            written = _second_string_argument(text, meta["end"] + 1)
            if written is not None:
                out.append((fmt, written))
    return out


def _second_string_argument(text: str, at: int) -> str | None:
    """The string literal that is the second argument of the call whose name ends before `at`,
    as written: sqlglot rewrites TO_CHAR's PostgreSQL pattern into strftime's while parsing, and
    sql/pgfunctions.py reads the pattern PostgreSQL would."""
    try:
        tokens = sqlglot.tokenize(text[at:], read=READ_DIALECT)
    except (TokenError, ValueError):
        return None
    depth = 0
    for k, tok in enumerate(tokens):
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
            if depth <= 0:
                return None
        elif tok.token_type == TokenType.COMMA and depth == 1:
            following = tokens[k + 1] if k + 1 < len(tokens) else None
            return following.text if following is not None and following.token_type == TokenType.STRING else None
    return None


def _normalized(tree: exp.Query) -> exp.Query:
    """PostgreSQL spellings BI tools emit, in the one form the rest of dpsql reads: DATE(x) is
    CAST(x AS DATE) (Looker), transaction_timestamp() and its kin are now(), TO_CHAR keeps its
    PostgreSQL pattern (`to_char_call`), FETCH NEXT n ROWS ONLY is LIMIT n (Looker, Power BI), a table's
    database qualifier (dbt's "dpsql"."public"."patients") is dropped, since dpsql serves one
    database, and `x = ANY(array)` is `x IN (...)` (`array_comparisons`)."""

    def visit(node: exp.Expression) -> exp.Expression:
        if (
            isinstance(node, exp.Date)
            and node.args.get("this") is not None
            and not node.args.get("zone")
            and not node.args.get("expressions")
        ):
            return exp.Cast(this=node.this, to=exp.DataType.build("DATE"))
        if (
            isinstance(node, exp.Fetch)
            and isinstance(node.args.get("count"), exp.Literal)
            and not (node.args.get("limit_options") and node.args["limit_options"].args.get("with_ties"))
        ):
            return exp.Limit(expression=node.args["count"])
        if isinstance(node, exp.Table) and node.args.get("catalog") is not None and node.args.get("db") is not None:
            node.set("catalog", None)
        if isinstance(node, exp.Anonymous) and is_clock(node):  # transaction_timestamp() and the like: now()
            out = exp.CurrentTimestamp()
            out.meta[WRITTEN] = str(node.name)
            return out
        if isinstance(node, exp.TimeToStr):
            return to_char_call(node)
        return node

    if any(
        isinstance(n, (exp.Date, exp.Fetch, exp.TimeToStr))
        or (isinstance(n, exp.Table) and n.args.get("catalog") is not None)
        or (isinstance(n, exp.Anonymous) and is_clock(n))
        for n in tree.walk()
    ):
        tree = tree.transform(visit, copy=True)
    return array_comparisons(tree)


def to_char_call(node: exp.TimeToStr) -> exp.Anonymous:
    """TO_CHAR(x, pattern) as the call PostgreSQL reads, its pattern as written: sqlglot's parser
    turns a literal pattern into strftime's (kept as written by `written_names`), and
    sql/pgfunctions.py writes PostgreSQL's patterns out for every engine."""
    fmt = node.args.get("format")
    written = (getattr(fmt, "_meta", None) or {}).get(WRITTEN) if fmt is not None else None
    pattern = exp.Literal.string(written) if written is not None else fmt.copy() if fmt is not None else exp.Null()
    return exp.Anonymous(this="TO_CHAR", expressions=[node.this.copy(), pattern])


def array_comparisons(tree: exp.Expression) -> exp.Expression:
    """`x = ANY(<array>)` as `x IN (...)` and `x <> ALL(<array>)` as `x NOT IN (...)`, for an
    array dpsql can read: ARRAY[...], a '{a,b}' literal (cast or not: drivers send list
    parameters as text) or NULL. Drivers pass lists this way (node's pg, postgres.js, psycopg);
    the rest of dpsql reads IN lists. Other arrays stay as they are, and are refused later."""
    if not any(
        isinstance(n, exp.Any) or (isinstance(n, exp.Anonymous) and n.name.lower() == "all") for n in tree.walk()
    ):
        return tree

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any):
            items = _array_items(node.expression.this)
            if items is not None:
                return exp.In(this=node.this, expressions=items) if items else exp.false()
        if (
            isinstance(node, exp.NEQ)
            and isinstance(node.expression, exp.Anonymous)
            and node.expression.name.lower() == "all"
            and len(node.expression.expressions) == 1
        ):
            items = _array_items(node.expression.expressions[0])
            if items is not None:
                return exp.Not(this=exp.In(this=node.this, expressions=items)) if items else exp.true()
        return node

    return tree.transform(visit, copy=True)


def _array_items(node: exp.Expression) -> list[exp.Expression] | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Array):
        return list(node.expressions)
    if isinstance(node, exp.Null):
        return [exp.Null()]
    numeric = False
    if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.ARRAY:
        element = node.to.expressions[0] if node.to.expressions else None
        numeric = element is not None and element.is_type(*exp.DataType.NUMERIC_TYPES)
        node = node.this
    if isinstance(node, exp.Literal) and node.is_string and node.this.startswith("{") and node.this.endswith("}"):
        values = _array_text(node.this)
        if values is None:
            return None
        return [
            exp.Null() if v is None else exp.Literal.number(v) if numeric else exp.Literal.string(v) for v in values
        ]
    return None


def _array_text(text: str) -> list[str | None] | None:
    """The elements of a one-dimensional PostgreSQL array literal ('{a,"b c",NULL}')."""
    body, out, i = text[1:-1], [], 0
    if not body.strip():
        return []
    while i <= len(body):
        while i < len(body) and body[i].isspace():
            i += 1
        if i < len(body) and body[i] == '"':
            value, i = [], i + 1
            while i < len(body) and body[i] != '"':
                if body[i] == "\\" and i + 1 < len(body):
                    i += 1
                value.append(body[i])
                i += 1
            if i >= len(body):
                return None
            item: str | None = "".join(value)
            i += 1
        else:
            end = body.find(",", i)
            end = len(body) if end < 0 else end
            raw = body[i:end].strip()
            if raw.startswith("{"):
                return None  # nested arrays
            item = None if raw.upper() == "NULL" else raw
            i = end
        out.append(item)
        while i < len(body) and body[i].isspace():
            i += 1
        if i < len(body) and body[i] != ",":
            return None
        i += 1
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace(value[0] * 2, value[0])
    return value
