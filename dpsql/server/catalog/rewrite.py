"""A client's catalog query rewritten onto dpsql's catalog tables: PostgreSQL-isms sqlglot does
not parse, reg* casts, session functions and settings, arrays and unnest, the emulated
functions as macros. A mixin of `Catalog`."""

from __future__ import annotations

import re

from sqlglot import exp

from ... import __version__
from ...errors import Error, ProgrammingError
from ..wire import types as c
from .functions import _REWRITTEN_FUNCTIONS, _SESSION_FUNCTIONS, _func_name
from .tables import _CATALOG_OIDS, _SETTINGS, TABLES


def _pre(sql: str) -> str:
    """Textual PostgreSQL-isms sqlglot does not parse: OPERATOR(pg_catalog.x), COLLATE."""
    sql = re.sub(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([~!=<>*+\-]+)\s*\)", r"\1", sql, flags=re.I)
    sql = re.sub(r"\s+COLLATE\s+(pg_catalog\.)?\"?(default|C|POSIX)\"?", "", sql, flags=re.I)
    # arrays of reg* types (pgcli): the catalog's function tables are empty, text arrays will do
    sql = re.sub(r"::\s*(?:pg_catalog\.)?(?:regtype|regclass|regproc)\s*\[\]", "::text[]", sql, flags=re.I)
    sql = re.sub(r"::\s*(?:pg_catalog\.)?oid\s*\[\]", "::bigint[]", sql, flags=re.I)  # OIDs are numbers
    return sql


class Rewriting:
    """The rewrite that needs the catalog's connection or the session."""

    def _rewrite(
        self, tree: exp.Expression, session, user: str, local: set[str] = frozenset(), pid: int = 0, io: bool = False
    ) -> exp.Expression:
        """`local`: catalog tables this query reads from the cursor's own copies (with views)."""
        cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        # the system column tableoid (pgAdmin: `sl.classoid = rel.tableoid`) is the catalog table's own OID
        table_oids = {
            t.alias_or_name.lower(): _CATALOG_OIDS[t.name.lower()]
            for t in tree.find_all(exp.Table)
            if isinstance(t.this, exp.Identifier) and t.name.lower() in _CATALOG_OIDS
        }

        def point(node: exp.Table, name: str) -> exp.Table:
            new = _table(node, "pg_proc_with_io" if io and name == "pg_proc" else name)
            if name in local:
                new.set("this", exp.to_identifier(f"session_{name}"))
                new.set("db", None)
            return new

        def visit(node: exp.Expression) -> exp.Expression:
            if (
                isinstance(node, exp.Table)
                and isinstance(node.this, exp.Anonymous)
                and node.this.name.lower() in TABLES
            ):
                name = node.this.name.lower()  # pg_get_keywords(): the table of its rows
                if node.args.get("alias") is None:
                    node = node.copy()
                    node.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
                return point(node, name)
            if (
                isinstance(node, exp.Table)
                and isinstance(node.this, exp.Anonymous)
                and node.this.name.lower() == "generate_subscripts"
            ):
                return _subscripts(node)
            if (
                isinstance(node, exp.Table)
                and not isinstance(node.this, exp.Identifier)
                and node.db.lower() == "pg_catalog"
            ):
                node = node.copy()
                node.set("db", None)
                return node
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
                name, db = node.name.lower(), node.db.lower()
                if db == "information_schema" and f"is_{name}" in TABLES:
                    return point(node, f"is_{name}")
                if db in ("pg_catalog", "") and name in TABLES and name not in cte_names:
                    return point(node, name)
                if db == "pg_catalog" or db == "information_schema":
                    raise Error(f'relation "{db}.{name}" is not available in dpsql\'s catalog', sqlstate="42P01")
                return node
            if (
                isinstance(node, exp.Dot)
                and isinstance(node.this, exp.Identifier)
                and node.this.name.lower() == "pg_catalog"
            ):
                return node.expression
            if isinstance(node, exp.Column) and node.name.lower() == "tableoid" and node.table.lower() in table_oids:
                return exp.Literal.number(table_oids[node.table.lower()])
            if isinstance(node, exp.Column) and node.args.get("db") is not None:
                node = node.copy()
                node.set("db", None)
                return node
            if isinstance(node, exp.Literal) and node.is_string and re.fullmatch(r"\{[^{}]*\}", node.name):
                items = [x.strip().strip('"') for x in node.name[1:-1].split(",") if x.strip()]
                return exp.Array(
                    expressions=[
                        exp.Literal.number(x) if x.lstrip("-").isdigit() else exp.Literal.string(x) for x in items
                    ]
                )
            if isinstance(node, (exp.CurrentUser,)) or (
                isinstance(node, exp.Column)
                and not node.table
                and node.name.lower() in ("current_user", "session_user", "user", "current_role")
            ):
                return exp.Literal.string(user)
            if isinstance(node, exp.CurrentSchema):
                return exp.Literal.string("public")
            if (
                isinstance(node, exp.Cast)
                and _cast_target(node) in ("regproc", "regprocedure")
                and isinstance(node.this, exp.Literal)
                and node.this.is_string
                and isinstance(node.parent, exp.Cast)
                and _cast_target(node.parent) == "oid"
            ):
                return exp.Literal.number(self._function_oid(node.this.name))  # psql's \sf, \ef look the OID up
            if isinstance(node, exp.Cast):
                return _cast(node)
            if (
                isinstance(node, (exp.Like, exp.ILike))
                and not isinstance(node.parent, exp.Escape)
                and "\\" in node.expression.name
            ):  # PostgreSQL's LIKE escapes with \ by default, DuckDB's not
                return exp.Escape(this=node, expression=exp.Literal.string("\\"))
            if (
                isinstance(node, exp.Substring)
                and isinstance(node.args.get("start"), exp.Literal)
                and node.args["start"].is_string
            ):  # substring(x FROM 'regex') (pgAdmin reads reloptions)
                pattern = node.args["start"]
                return exp.Nullif(
                    this=exp.RegexpExtract(
                        this=node.this, expression=pattern, group=exp.Literal.number(1 if "(" in pattern.name else 0)
                    ),
                    expression=exp.Literal.string(""),
                )
            if isinstance(node, exp.Unnest) and isinstance(node.parent, (exp.From, exp.Join)):
                return _unnest_rows(node)
            if isinstance(node, exp.Func):
                name = _func_name(node)
                if name in ("json_build_object", "json_object", "jsonb_build_object"):
                    return exp.Cast(this=exp.Null(), to=exp.DataType.build("VARCHAR"))
                if name in _SESSION_FUNCTIONS:
                    return self._session_value(name, node, session, user, pid)
                if name in _REWRITTEN_FUNCTIONS:
                    return exp.Anonymous(
                        this=f"pgc_{name}",
                        expressions=list(
                            node.args.get("expressions")
                            or [a for a in node.args.values() if isinstance(a, exp.Expression)]
                        ),
                    )
            return node

        return _bottom_up(tree, visit)

    def _function_oid(self, text: str) -> int:
        """The OID of a function named as `'name'::regproc` or `'name(args)'::regprocedure` spell it."""
        name = text.split("(")[0].split(".")[-1].strip().strip('"').lower()
        with self._lock:
            found = self._con.execute("SELECT min(oid) FROM pgc.pg_proc WHERE proname = ?", [name]).fetchone()[0]
        if found is None:
            raise Error(
                f'function "{text}" does not exist', sqlstate="42883", hint="\\df lists the functions queries may use"
            )
        return int(found)

    def _session_value(self, name: str, node: exp.Func, session, user: str, pid: int) -> exp.Expression:
        if name == "version":
            return exp.Literal.string(
                f"PostgreSQL 15.0 (dpsql {__version__}) on x86_64-pc-linux-gnu, differentially private proxy"
            )
        if name == "current_database":
            return exp.Literal.string(self.database)
        if name == "current_schema":
            return exp.Literal.string("public")
        if name in ("current_user", "session_user", "user", "current_role"):
            return exp.Literal.string(user)
        if name == "pg_backend_pid":
            return exp.Literal.number(pid)
        if name == "inet_server_port":
            return exp.Literal.number(0)
        if name == "inet_server_addr":
            return exp.Null()
        if name == "pg_postmaster_start_time":
            return exp.Cast(this=exp.Literal.string("2026-01-01 00:00:00+00"), to=exp.DataType.build("TIMESTAMPTZ"))
        args = [a for a in (node.args.get("expressions") or [node.this]) if isinstance(a, exp.Expression)]
        setting = args[0].name.lower() if args and isinstance(args[0], exp.Literal) else ""
        if name == "set_config" and setting.startswith("dpsql."):  # the budget's settings change through SET only
            raise ProgrammingError(
                f"set_config() cannot change {setting}",
                sqlstate="55P02",
                hint=f"use SET {setting} = ...; SHOW {setting} gives its value",
            )
        if name == "set_config" and len(args) > 1 and isinstance(args[1], exp.Literal):
            return exp.Literal.string(args[1].name)
        if name == "current_setting" and args and not isinstance(args[0], exp.Literal):  # \dconfig: s.name
            return exp.Anonymous(this="pgc_setting_of", expressions=[args[0]])
        value = session.setting(setting) if session is not None else None
        if value is None:  # what pg_settings lists (psql's \dconfig: bytea_output)
            value = next((v for k, v in _SETTINGS.items() if k.lower() == setting), None)
        return exp.Literal.string(value) if value is not None else exp.Null()


def _bottom_up(node: exp.Expression, fn) -> exp.Expression:
    """Apply fn to every node, children first (sqlglot's transform skips the inside of a
    node it has just replaced, and casts and functions here nest)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _bottom_up(value, fn))
        elif isinstance(value, list):
            node.set(key, [_bottom_up(v, fn) if isinstance(v, exp.Expression) else v for v in value])
    return fn(node)


def _table(node: exp.Table, name: str) -> exp.Table:
    """The same table reference (alias, nested joins kept) pointed at dpsql's catalog."""
    new = node.copy()
    new.set("this", exp.to_identifier(name))
    new.set("db", exp.to_identifier("pgc"))
    new.set("catalog", None)
    if new.args.get("alias") is None:
        new.set("alias", exp.TableAlias(this=exp.to_identifier(node.name)))
    return new


_REG_CASTS = {
    "regclass": ("pg_class", "relname", "oid"),
    "regtype": ("pg_type", "typname", "oid"),
    "regrole": ("pg_roles", "rolname", "oid"),
    "regnamespace": ("pg_namespace", "nspname", "oid"),
}


def _cast_target(node: exp.Cast) -> str:
    to = node.to
    return (
        to.sql(dialect="postgres").lower().replace("pg_catalog.", "").strip('"')
        if isinstance(to, exp.DataType)
        else str(to).lower()
    )


def _reg_comparisons(tree: exp.Expression) -> exp.Expression:
    """`x::regtype != 'trigger'::regtype` (pgcli) compares OIDs, while a lone `x::regtype` shows
    a name: a comparison of two reg* casts keeps the column's OID, and a name the catalog does
    not know compares as an OID no row has."""

    def reg(node: exp.Expression) -> str | None:
        return _cast_target(node) if isinstance(node, exp.Cast) and _cast_target(node) in _REG_CASTS else None

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)) and reg(node.this) and reg(node.this) == reg(node.expression):
            sides = []
            for side in (node.this, node.expression):
                inner = side.this
                sides.append(
                    exp.Coalesce(this=_cast(side), expressions=[exp.Literal.number(-1)])
                    if isinstance(inner, exp.Literal) and inner.is_string
                    else inner
                )
            return type(node)(this=sides[0], expression=sides[1])
        return node

    if any(isinstance(n, (exp.EQ, exp.NEQ)) for n in tree.walk()):
        return tree.transform(visit, copy=True)
    return tree


# Columns of type regproc: stored as the function's name ('-' for none), as PostgreSQL shows them.
_REGPROC_COLUMNS = {col for cols in TABLES.values() for col, oid in cols if oid == c.REGPROC}


def _joins_regproc(tree: exp.Expression) -> bool:
    """Whether the query matches a function's OID with a regproc column (`p.oid = t.typreceive`)."""

    def regproc(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() in _REGPROC_COLUMNS

    def oid(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() == "oid"

    return any(
        isinstance(n, (exp.EQ, exp.NEQ))
        and ((regproc(n.this) and oid(n.expression)) or (oid(n.this) and regproc(n.expression)))
        for n in tree.walk()
    )


def _regproc_comparisons(tree: exp.Expression) -> exp.Expression:
    """`typreceive != 0` (ADBC's type loader) compares a regproc with an OID: 0 is the '-' the
    column holds for no function, any other number names a function the catalog does not list.
    `pg_proc.oid = a.typreceive` (Npgsql's type loader) joins on the function's name."""

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)):
            sides = [node.this, node.expression]
            for i, side in enumerate(sides):
                other = sides[1 - i]
                if not (isinstance(side, exp.Column) and side.name.lower() in _REGPROC_COLUMNS):
                    continue
                if isinstance(other, exp.Literal) and other.is_int:
                    sides[1 - i] = exp.Literal.string("-" if int(other.name) == 0 else other.name)
                    return type(node)(this=sides[0], expression=sides[1])
                if isinstance(other, exp.Column) and other.name.lower() == "oid":
                    sides[1 - i] = exp.column("proname", table=other.table or None)
                    return type(node)(this=sides[0], expression=sides[1])
        return node

    return tree.transform(visit, copy=True)


def _subscripts(node: exp.Table) -> exp.Expression:
    """`generate_subscripts(a, 1) AS k` in FROM (peewee): the subscripts of a one-dimensional
    array, a column named as the alias, the way PostgreSQL names a function's only column."""
    alias = node.alias or "generate_subscripts"
    array = node.this.expressions[0].copy()
    numbers = exp.Anonymous(
        this="range",
        expressions=[exp.Literal.number(1), exp.Add(this=exp.Length(this=array), expression=exp.Literal.number(1))],
    )
    select = exp.select(exp.alias_(exp.Unnest(expressions=[numbers]), alias))
    return select.subquery(alias)


def _unnest_rows(node: exp.Unnest) -> exp.Expression:
    """`unnest(a, b) WITH ORDINALITY AS k(x, y, n)` in FROM (Django's index query): PostgreSQL
    walks the arrays side by side; DuckDB's unnest takes one, so a lateral subquery indexes them."""
    arrays = node.expressions
    offset = node.args.get("offset")
    if len(arrays) < 2 and not offset:
        return node
    alias = node.args.get("alias")
    names = [col.name for col in (alias.columns if alias is not None else [])]
    names += ["unnest"] * (len(arrays) - len(names))
    if isinstance(offset, exp.Identifier):
        names.append(offset.name)
    elif offset:
        names.append("ordinality")
    position = exp.column("dpsql_n", table="dpsql_r")
    items = [exp.alias_(exp.Bracket(this=a.copy(), expressions=[position.copy()]), n) for a, n in zip(arrays, names)]
    if offset:
        items.append(exp.alias_(position.copy(), names[-1]))
    longest = (
        exp.Greatest(
            this=exp.Length(this=arrays[0].copy()), expressions=[exp.Length(this=a.copy()) for a in arrays[1:]]
        )
        if len(arrays) > 1
        else exp.Length(this=arrays[0].copy())
    )
    rows = exp.Table(
        this=exp.Anonymous(
            this="range", expressions=[exp.Literal.number(1), exp.Add(this=longest, expression=exp.Literal.number(1))]
        ),
        alias=exp.TableAlias(this=exp.to_identifier("dpsql_r"), columns=[exp.to_identifier("dpsql_n")]),
    )
    select = exp.select(*items).from_(rows)
    return exp.Lateral(
        this=select.subquery(),
        alias=exp.TableAlias(this=exp.to_identifier(alias.name if alias is not None else "unnest")),
    )


def _cast(node: exp.Cast) -> exp.Expression:
    """::regclass / ::regtype / ::regproc / ::oid / ::name / ::"char" onto plain values."""
    target = _cast_target(node)
    inner = node.this
    if target in _REG_CASTS:
        table, name_col, oid_col = _REG_CASTS[target]
        if isinstance(inner, exp.Literal) and inner.is_string:
            text = inner.name.split(".")[-1].strip('"')
            if text.isdigit():
                return exp.Literal.number(int(text))
            if target == "regclass" and text.lower() in _CATALOG_OIDS:
                return exp.Literal.number(_CATALOG_OIDS[text.lower()])
            return exp.Anonymous(this=f"pgc_{target}_oid", expressions=[exp.Literal.string(text)])
        return exp.Anonymous(this=f"pgc_{target}_name", expressions=[inner])
    if target == "regproc":
        if isinstance(inner, exp.Literal) and inner.is_string:
            return exp.Literal.string(inner.name.split(".")[-1])
        return inner
    if target in (
        "oid",
        "name",
        '"char"',
        "char",
        "text",
        "pg_catalog.text",
        "information_schema.sql_identifier",
        "xid",
    ):
        if target in ("oid", "xid"):
            return exp.Cast(this=inner, to=exp.DataType.build("BIGINT"))
        return exp.Cast(this=inner, to=exp.DataType.build("VARCHAR"))
    base = target.rstrip("[]")
    if base in _PG_TYPE_ALIASES:
        return exp.Cast(
            this=inner, to=exp.DataType.build(_PG_TYPE_ALIASES[base] + ("[]" if target.endswith("[]") else ""))
        )
    return node


_PG_TYPE_ALIASES = {
    "int2": "SMALLINT",
    "int4": "INTEGER",
    "int8": "BIGINT",
    "float4": "FLOAT",
    "float8": "DOUBLE",
    "bool": "BOOLEAN",
    "int2vector": "SMALLINT[]",
    "oidvector": "BIGINT[]",
    "regrole": "VARCHAR",
    "bpchar": "VARCHAR",
    "character varying": "VARCHAR",
}
