"""Types of untyped parameters ($n sent with type 0), inferred as PostgreSQL would from context:
compared with a column -> that column's type; LIMIT/OFFSET -> bigint; a cast -> its type;
`x = ANY($n)` -> an array of x's type (how node's pg and postgres.js pass lists)."""

from __future__ import annotations

from typing import Mapping

import sqlglot
from sqlglot import exp

from ..sql.classify import spaced_parameters
from . import codec

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.Between, exp.In,
                exp.Add, exp.Sub, exp.Mul, exp.Div)
_CASTS = {"int": codec.INT4, "integer": codec.INT4, "bigint": codec.INT8, "smallint": codec.INT2, "text": codec.TEXT,
          "varchar": codec.VARCHAR, "double precision": codec.FLOAT8, "float": codec.FLOAT8, "real": codec.FLOAT4,
          "numeric": codec.NUMERIC, "decimal": codec.NUMERIC, "boolean": codec.BOOL, "bool": codec.BOOL,
          "date": codec.DATE, "timestamp": codec.TIMESTAMP, "timestamptz": codec.TIMESTAMPTZ}


def infer_parameter_types(sql: str, schema: Mapping[str, Mapping[str, str]]) -> list[int]:
    try:
        tree = sqlglot.parse_one(spaced_parameters(sql), read="postgres")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return []
    if tree is None:
        return []
    columns: dict[str, str] = {}
    for cols in schema.values():
        for name, dtype in cols.items():
            columns.setdefault(name, dtype)
    holders = [n for n in tree.walk() if isinstance(n, exp.Parameter) and isinstance(n.this, exp.Literal)]
    if not holders:
        return []
    types = [codec.TEXT] * max(int(h.this.this) for h in holders)
    for h in holders:
        types[int(h.this.this) - 1] = _infer(h, columns)
    return types


def _infer(node: exp.Expression, columns: Mapping[str, str]) -> int:
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if isinstance(parent, exp.Cast):
        return _CASTS.get(parent.to.sql(dialect="postgres").lower(), codec.TEXT)
    if isinstance(parent, (exp.Limit, exp.Offset)):
        return codec.INT8
    if isinstance(parent, exp.Any):
        return codec.array_of(_infer(parent, columns))
    if isinstance(parent, _COMPARISONS):
        for col in parent.find_all(exp.Column):
            dtype = columns.get(col.name.lower())
            if dtype is not None:
                oid = codec.oid_of(dtype)
                return codec.FLOAT8 if oid == codec.NUMERIC else oid
    return codec.TEXT
