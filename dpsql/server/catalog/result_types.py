"""A catalog query's result columns as PostgreSQL names and types them (where the catalog knows
better than DuckDB), read from the parsed query (pure)."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from ..wire import types as c
from .functions import FUNCTION_TYPES, _func_name
from .tables import TABLES


def _output_names(tree: exp.Expression) -> list[str | None]:
    """Column names as PostgreSQL gives them (None: take the engine's)."""
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return []
    out: list[str | None] = []
    for item in select.expressions:
        if _is_star(item):
            return out + [None] * 1000
        out.append(_pg_name(item))
    return out


_ARRAY_TYPES = {
    c.TEXT: c.TEXT_ARRAY,
    c.NAME: c.NAME_ARRAY,
    c.INT2: c.INT2_ARRAY,
    c.INT4: c.INT4_ARRAY,
    c.INT8: c.INT8_ARRAY,
    c.OID: c.OID_ARRAY,
    c.CHAR: c.CHAR_ARRAY,
    c.BOOL: c.BOOL_ARRAY,
    c.FLOAT8: c.FLOAT8_ARRAY,
    c.VARCHAR: c.TEXT_ARRAY,
}


def _is_star(node: exp.Expression) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


_ELEMENT_TYPES = {array: element for element, array in reversed(list(_ARRAY_TYPES.items()))}


def _pg_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Alias):
        ident = node.args.get("alias")
        return node.alias if (ident is not None and ident.quoted) else node.alias.lower()
    if isinstance(node, exp.Column):
        return node.name if node.this.quoted else node.name.lower()
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Expression):
        return _pg_name(node.expression)
    if isinstance(node, exp.Cast):
        inner = _pg_name(node.this)
        if inner != "?column?":
            return inner
        to = (
            node.to.sql(dialect="postgres").lower().split(".")[-1].strip('"')
            if isinstance(node.to, exp.DataType)
            else "?column?"
        )
        return {
            "int": "int4",
            "integer": "int4",
            "bigint": "int8",
            "smallint": "int2",
            "boolean": "bool",
            "double precision": "float8",
            "real": "float4",
        }.get(to, to)
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        name = _pg_name(default) if default is not None else "?column?"
        return name if name != "?column?" else "case"
    if isinstance(node, (exp.Paren, exp.Window)):
        return _pg_name(node.this)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and node.this.expressions:
        return _pg_name(node.this.expressions[0])
    if isinstance(node, exp.Array):
        return "array"
    if isinstance(node, exp.CurrentUser):
        return "current_user"
    if isinstance(node, exp.Func):
        return _func_name(node)
    return "?column?"


def _output_types(tree: exp.Expression) -> list[int | None]:
    """PostgreSQL type of each output column, where the catalog knows it better than DuckDB."""
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return []
    sources = {**_ctes(tree, select), **_sources(select)}
    out = []
    for item in select.expressions:
        if _is_star(item):  # `*`: every source's columns; `rl.*`: that source's
            prefix = item.table.lower() if isinstance(item, exp.Column) else ""
            chosen = [sources[prefix]] if prefix in sources else [] if prefix else list(sources.values())
            if not any(isinstance(src, exp.Select) or src in TABLES for src in chosen):
                return out + [None] * 1000  # columns of a source not known here: DuckDB's types, not shifted ones
            for src in chosen:
                if isinstance(src, exp.Select):
                    sub = _sources(src)
                    out.extend(
                        _type_of(i.unalias() if isinstance(i, exp.Alias) else i, sub, src) for i in src.expressions
                    )
                else:
                    out.extend(oid for _, oid in TABLES.get(src, []))
            continue
        out.append(_type_of(item.unalias() if isinstance(item, exp.Alias) else item, sources, select))
    return out


def _ctes(tree: exp.Expression, select: exp.Select) -> dict[str, exp.Select]:
    """The query's own WITH tables the outer SELECT reads, by alias, each as its first (anchor)
    SELECT with its items named as the CTE's column list names them (asyncpg's type introspection:
    `WITH RECURSIVE typeinfo_tree(oid, ns, ...) AS (...) SELECT DISTINCT * FROM typeinfo_tree`)."""
    with_ = tree.args.get("with_") if isinstance(tree, exp.Select) else None
    tables = [select.args["from_"].this] if select.args.get("from_") is not None else []
    tables += [j.this for j in select.args.get("joins") or []]
    read = {t.name.lower(): t.alias_or_name.lower() for t in tables if isinstance(t, exp.Table) and not t.db}
    out: dict[str, exp.Select] = {}
    for cte in with_.expressions if with_ is not None else []:
        if cte.alias_or_name.lower() not in read:
            continue
        anchor = cte.this
        while isinstance(anchor, exp.SetOperation):
            anchor = anchor.this
        if not isinstance(anchor, exp.Select):
            continue
        columns = [col.name for col in cte.args["alias"].columns] if cte.args.get("alias") else []
        if columns and len(columns) == len(anchor.expressions):
            anchor = anchor.copy()
            anchor.set(
                "expressions",
                [
                    exp.alias_(item.unalias() if isinstance(item, exp.Alias) else item, name)
                    for item, name in zip(anchor.expressions, columns)
                ],
            )
        out[read[cte.alias_or_name.lower()]] = anchor
    return out


def _sources(select: exp.Select) -> dict[str, Any]:
    """alias -> catalog table name (original names) or the SELECT of a derived table,
    through parenthesized joins too."""
    out: dict[str, Any] = {}

    def add(node: exp.Expression | None) -> None:
        if node is None:
            return
        if isinstance(node, (exp.From, exp.Join)):
            add(node.this)
            return
        if isinstance(node, exp.Table):
            name, db = node.name.lower(), node.db.lower()
            table = f"is_{name}" if db == "information_schema" else name
            if table in TABLES:
                out[(node.alias or node.name).lower()] = table
            for j in node.args.get("joins") or []:
                add(j)
        elif isinstance(node, exp.Subquery):
            if node.alias and isinstance(node.this, exp.Select):
                out[node.alias.lower()] = node.this
            elif not node.alias:
                add(node.this)
            for j in node.args.get("joins") or []:
                add(j)

    add(select.args.get("from_"))
    for j in select.args.get("joins") or []:
        add(j)
    for cte in select.root().find_all(exp.CTE):  # a CTE read by name is typed as its query
        name = cte.alias_or_name.lower()
        if (
            isinstance(cte.this, exp.Select)
            and name not in out
            and any(
                isinstance(t, exp.Table) and t.name.lower() == name and not t.db for t in select.find_all(exp.Table)
            )
        ):
            for t in select.find_all(exp.Table):
                if t.name.lower() == name and not t.db:
                    out[(t.alias or t.name).lower()] = cte.this
    return out


def _type_of(node: exp.Expression, sources: dict[str, str], select: exp.Select) -> int | None:
    if isinstance(node, exp.Column):
        name = node.name.lower()
        tables = (
            [sources[node.table.lower()]] if node.table and node.table.lower() in sources else list(sources.values())
        )
        for t in tables:
            if isinstance(t, exp.Select):
                inner = _sources(t)
                for item in t.expressions:
                    if _is_star(item):  # `s.*` or `*`: the column of that name in the derived table's sources
                        prefix = item.table.lower() if isinstance(item, exp.Column) else ""
                        found = _type_of(exp.column(name, table=prefix or None), inner, t)
                        if found is not None:
                            return found
                    elif _pg_name(item).lower() == name:
                        return _type_of(item.unalias() if isinstance(item, exp.Alias) else item, inner, t)
                continue
            for col, oid in TABLES.get(t, []):
                if col == name:
                    return oid
        return None
    if isinstance(node, exp.Paren):
        return _type_of(node.this, sources, select)
    if isinstance(node, exp.Nullif):
        return _type_of(node.this, sources, select)
    if isinstance(node, exp.Coalesce):
        for arg in [node.this, *node.expressions]:
            t = _type_of(arg, sources, select)
            if t is not None:
                return t
        return None
    if isinstance(node, exp.Case):  # a quoted literal takes the type of the other branches ('a' or typtype: "char")
        results = [b.args["true"] for b in node.args.get("ifs") or []] + [node.args.get("default")]
        for branch in sorted((r for r in results if r is not None), key=lambda r: isinstance(r, exp.Literal)):
            t = _type_of(branch, sources, select)
            if t is not None:
                return t
        return None
    if isinstance(node, exp.Boolean):
        return c.BOOL
    if isinstance(node, exp.Cast):
        target = (
            node.to.sql(dialect="postgres").lower().replace("pg_catalog.", "").strip('"')
            if isinstance(node.to, exp.DataType)
            else ""
        )
        return {
            "text": c.TEXT,
            "varchar": c.VARCHAR,
            "bigint": c.INT8,
            "int": c.INT4,
            "integer": c.INT4,
            "smallint": c.INT2,
            "boolean": c.BOOL,
            "regclass": c.REGCLASS,
            "regtype": c.REGTYPE,
            "regproc": c.REGPROC,
            "oid": c.OID,
            "name": c.NAME,
            "char": c.CHAR,
            "regnamespace": c.REGNAMESPACE,
        }.get(target)
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Expression):
        return _type_of(node.expression, sources, select)
    if isinstance(node, exp.ArrayAgg) or (
        isinstance(node, exp.Anonymous) and node.name.lower() == "array_agg" and node.expressions
    ):  # pg_catalog.array_agg(...) parses as a name
        arg = node.this if isinstance(node, exp.ArrayAgg) else node.expressions[0]
        inner = _type_of(arg.this if isinstance(arg, exp.Order) else arg, sources, select)
        return _ARRAY_TYPES.get(inner) if inner is not None else None
    if (
        isinstance(node, exp.Array)
        and len(node.expressions) == 1
        and isinstance(node.expressions[0], (exp.Select, exp.Subquery))
    ):
        sub = node.expressions[0].this if isinstance(node.expressions[0], exp.Subquery) else node.expressions[0]
        if isinstance(sub, exp.Select) and sub.expressions:
            inner = _type_of(sub.expressions[0].unalias(), _sources(sub), sub)
            return _ARRAY_TYPES.get(inner) if inner is not None else None
    if isinstance(node, (exp.Predicate, exp.Not, exp.And, exp.Or)):
        return c.BOOL
    if isinstance(node, (exp.Explode, exp.Unnest)) or (
        isinstance(node, exp.Anonymous) and node.name.lower() == "unnest"
    ):
        args = node.expressions if isinstance(node, (exp.Anonymous, exp.Unnest)) else [node.this]
        inner = _type_of(args[0], sources, select) if len(args) == 1 else None
        return _ELEMENT_TYPES.get(inner) if inner is not None else None
    if isinstance(node, exp.Anonymous) and str(node.name).lower().startswith("pgc_"):
        return FUNCTION_TYPES.get(str(node.name).lower()[4:])
    if isinstance(node, exp.Func):
        return FUNCTION_TYPES.get(_func_name(node))
    if isinstance(node, exp.Literal):
        return c.TEXT if node.is_string else (c.INT4 if node.is_int else c.NUMERIC)
    if isinstance(node, exp.Subquery):
        inner = node.this if isinstance(node.this, exp.Select) else None
        if inner is not None and inner.expressions:
            return _type_of(inner.expressions[0].unalias(), _sources(inner), inner)
    return None
