"""Whether a statement is a catalog query (decided on the parsed statement)."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

from ...sql.classify import first_word
from .functions import _GENERAL_FUNCTIONS, _REWRITTEN_FUNCTIONS, _SESSION_FUNCTIONS, FUNCTION_TYPES, _func_name
from .rewrite import _REG_CASTS, _cast_target, _pre
from .tables import TABLES

_CATALOG_MARKERS = re.compile(
    r"\b(pg_catalog|information_schema|pg_[a-z_]+|current_schema|current_database|"
    r"current_user|session_user|current_setting|set_config|version|current_role|current_schemas|"
    r"regclass|regtype|regnamespace|regrole|regproc|regprocedure|"
    r"format_type|obj_description|col_description|has_\w+_privilege)\b",
    re.I,
)


def is_catalog_query(sql: str) -> bool:
    """A statement the catalog answers: it reads pg_catalog/information_schema tables or calls
    catalog/session functions (decided on the parsed statement; a regex only pre-filters)."""
    head = first_word(sql)
    if not (head in ("SELECT", "WITH") or head.startswith("(")) or not _CATALOG_MARKERS.search(sql):
        return False
    try:
        tree = sqlglot.parse_one(_pre(sql), read="postgres")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return False
    if tree is None:
        return False
    for t in tree.find_all(exp.Table):
        db = t.db.lower()
        if db in ("pg_catalog", "information_schema") or (not db and t.name.lower() in TABLES):
            return True
        if isinstance(t.this, exp.Anonymous) and t.this.name.lower() in TABLES:
            return True
    for f in tree.find_all(exp.Func):
        name = _func_name(f)
        if (
            name in _SESSION_FUNCTIONS
            or (name in _REWRITTEN_FUNCTIONS and name not in _GENERAL_FUNCTIONS)
            or name in FUNCTION_TYPES
            and name.startswith(("pg_", "has_"))
        ):
            return True
    if any(
        isinstance(n, exp.Cast) and (_cast_target(n) in _REG_CASTS or _cast_target(n) in ("regproc", "regprocedure"))
        for n in tree.walk()
    ):
        return True
    return any(isinstance(n, (exp.CurrentUser, exp.CurrentSchema)) for n in tree.walk())
