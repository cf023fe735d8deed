"""Types of untyped parameters ($n sent with type 0), inferred as PostgreSQL would from context:
a cast -> its type (`$4::OID`, `$1::NAME[]`, `CAST($1 AS INTEGER)`: SQLAlchemy's asyncpg
reflection writes every parameter so, and asyncpg encodes a value by the type described);
compared with a column -> that column's type; LIMIT/OFFSET -> bigint; `x = ANY($n)` -> an
array of x's type (how node's pg and postgres.js pass lists); an advisory lock's key -> bigint."""

from __future__ import annotations

import re
from typing import Mapping

import sqlglot
from sqlglot import exp

from ..sql.classify import spaced_parameters
from .wire import types

_COMPARISONS = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Like,
    exp.ILike,
    exp.Between,
    exp.In,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
)
_CASTS = {
    "int": types.INT4,
    "integer": types.INT4,
    "int4": types.INT4,
    "bigint": types.INT8,
    "int8": types.INT8,
    "smallint": types.INT2,
    "int2": types.INT2,
    "text": types.TEXT,
    "varchar": types.VARCHAR,
    "character varying": types.VARCHAR,
    "double precision": types.FLOAT8,
    "float": types.FLOAT8,
    "float8": types.FLOAT8,
    "real": types.FLOAT4,
    "float4": types.FLOAT4,
    "numeric": types.NUMERIC,
    "decimal": types.NUMERIC,
    "boolean": types.BOOL,
    "bool": types.BOOL,
    "date": types.DATE,
    "timestamp": types.TIMESTAMP,
    "timestamp without time zone": types.TIMESTAMP,
    "timestamptz": types.TIMESTAMPTZ,
    "timestamp with time zone": types.TIMESTAMPTZ,
    "time": types.TIME,
    "interval": types.INTERVAL,
    "uuid": types.UUID,
    "json": types.JSON,
    "jsonb": types.JSONB,
    "bytea": types.BYTEA,
    "oid": types.OID,
    "regclass": types.REGCLASS,
    "regtype": types.REGTYPE,
    "regproc": types.REGPROC,
    "regnamespace": types.REGNAMESPACE,
    "name": types.NAME,
    '"char"': types.CHAR,
    "char": types.BPCHAR,
    "character": types.BPCHAR,
    "bpchar": types.BPCHAR,
}
# `$n::type` as written, read from the text (sqlglot reads neither `::OID[]` nor `::"char"`).
_PARAMETER_CAST = re.compile(
    r"(?<![\w$])\$(?P<n>\d+)\s*::\s*(?:pg_catalog\s*\.\s*)?(?P<type>\"char\"|double\s+precision|"
    r"character\s+varying|timestamp\s+with(?:out)?\s+time\s+zone|[a-z_][\w]*)"
    r"(?:\s*\(\s*\d+(?:\s*,\s*\d+)?\s*\))?(?P<array>\s*\[\s*\])?",
    re.I,
)
_ADVISORY = re.compile(r"^pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock(?:_shared)?$")


def cast_types(sql: str) -> dict[int, int]:
    """The type of each parameter written `$n::type` (1-based), by the first such cast."""
    out: dict[int, int] = {}
    for m in _PARAMETER_CAST.finditer(sql):
        name = " ".join(m.group("type").lower().split())
        oid = _CASTS.get(name)
        if oid is not None:
            out.setdefault(int(m.group("n")), types.array_of(oid) if m.group("array") else oid)
    return out


def infer_parameter_types(sql: str, schema: Mapping[str, Mapping[str, str]]) -> list[int]:
    casts = cast_types(sql) if "::" in sql else {}
    if casts:  # typed already; without their casts sqlglot reads the rest (it cannot read `$1::OID[]`)
        sql = _PARAMETER_CAST.sub(lambda m: f"${m.group('n')}", sql)
    try:
        tree = sqlglot.parse_one(spaced_parameters(sql), read="postgres")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        tree = None
    if tree is None:
        return [casts.get(i + 1, types.TEXT) for i in range(max(casts, default=0))]
    columns: dict[str, str] = {}
    for cols in schema.values():
        for name, dtype in cols.items():
            columns.setdefault(name, dtype)
    holders = [n for n in tree.walk() if isinstance(n, exp.Parameter) and isinstance(n.this, exp.Literal)]
    if not holders and not casts:
        return []
    oids = [types.TEXT] * max([int(h.this.this) for h in holders] + list(casts))
    for h in holders:
        oids[int(h.this.this) - 1] = _infer(h, columns)
    for n, oid in casts.items():
        oids[n - 1] = oid
    return oids


def _infer(node: exp.Expression, columns: Mapping[str, str]) -> int:
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if isinstance(parent, exp.Cast):
        to = parent.to
        if to.is_type(exp.DataType.Type.ARRAY) and to.expressions:
            return types.array_of(_CASTS.get(to.expressions[0].sql(dialect="postgres").lower(), types.TEXT))
        return _CASTS.get(to.sql(dialect="postgres").lower(), types.TEXT)
    if isinstance(parent, exp.Anonymous) and _ADVISORY.match(parent.name.lower()):
        return types.INT8 if len(parent.expressions) == 1 else types.INT4
    if isinstance(parent, (exp.Limit, exp.Offset)):
        return types.INT8
    if isinstance(parent, exp.Any):
        return types.array_of(_infer(parent, columns))
    if isinstance(parent, _COMPARISONS):
        for col in parent.find_all(exp.Column):
            dtype = columns.get(col.name.lower())
            if dtype is not None:
                oid = types.oid_of(dtype)
                return types.FLOAT8 if oid == types.NUMERIC else oid
    return types.TEXT
