"""The functions the catalog lists (those a query may use) and the PostgreSQL functions it
emulates: their return types, and the DuckDB macros that stand for them."""

from __future__ import annotations

import re

import sqlglot.expressions as exp

from ..wire import types as c

# The functions a query may use (sql/allowlist.py), listed in pg_proc and
# information_schema.routines so SQL editors complete them: (name, return type, aggregate).
_FUNCTIONS = (
    [
        (name, c.FLOAT8, True)
        for name in (
            "avg",
            "stddev",
            "stddev_pop",
            "stddev_samp",
            "variance",
            "var_pop",
            "var_samp",
            "median",
            "percentile_cont",
            "percentile_disc",
        )
    ]
    + [("count", c.INT8, True), ("sum", c.NUMERIC, True), ("min", c.NUMERIC, True), ("max", c.NUMERIC, True)]
    + [
        (name, c.FLOAT8, False)
        for name in ("abs", "round", "floor", "ceil", "sign", "sqrt", "ln", "log", "exp", "power", "least", "greatest")
    ]
    + [
        (name, c.TEXT, False)
        for name in ("coalesce", "nullif", "lower", "upper", "substring", "trim", "concat", "left", "right", "initcap")
    ]
    + [
        ("length", c.INT4, False),
        ("strpos", c.INT4, False),
        ("width_bucket", c.INT4, False),
        ("extract", c.NUMERIC, False),
        ("date_trunc", c.TIMESTAMP, False),
        ("current_date", c.DATE, False),
    ]
    + [
        ("date_part", c.FLOAT8, False),
        ("to_char", c.TEXT, False),
        ("now", c.TIMESTAMPTZ, False),
        ("localtimestamp", c.TIMESTAMP, False),
        ("current_timestamp", c.TIMESTAMPTZ, False),
        ("transaction_timestamp", c.TIMESTAMPTZ, False),
        ("statement_timestamp", c.TIMESTAMPTZ, False),
        ("clock_timestamp", c.TIMESTAMPTZ, False),
    ]
    + [  # and, over public tables and constants:
        (name, c.TEXT, False)
        for name in (
            "replace",
            "split_part",
            "format",
            "lpad",
            "rpad",
            "repeat",
            "reverse",
            "concat_ws",
            "translate",
            "md5",
        )
    ]
    + [("to_date", c.DATE, False), ("to_timestamp", c.TIMESTAMPTZ, False)]
)


# Return types of the PostgreSQL functions emulated here.
FUNCTION_TYPES = {
    "format_type": c.TEXT,
    "pg_get_userbyid": c.NAME,
    "pg_table_is_visible": c.BOOL,
    "pg_type_is_visible": c.BOOL,
    "pg_get_expr": c.TEXT,
    "pg_get_constraintdef": c.TEXT,
    "pg_get_indexdef": c.TEXT,
    "pg_encoding_to_char": c.NAME,
    "obj_description": c.TEXT,
    "col_description": c.TEXT,
    "shobj_description": c.TEXT,
    "has_table_privilege": c.BOOL,
    "has_schema_privilege": c.BOOL,
    "has_database_privilege": c.BOOL,
    "has_column_privilege": c.BOOL,
    "pg_get_statisticsobjdef_columns": c.TEXT,
    "version": c.TEXT,
    "current_database": c.NAME,
    "current_schema": c.NAME,
    "current_schemas": c.NAME_ARRAY,
    "pg_backend_pid": c.INT4,
    "current_setting": c.TEXT,
    "set_config": c.TEXT,
    "pg_is_in_recovery": c.BOOL,
    "array_to_string": c.TEXT,
    "pg_get_viewdef": c.TEXT,
    "pg_get_function_result": c.TEXT,
    "pg_get_function_arguments": c.TEXT,
    "pg_relation_size": c.INT8,
    "pg_total_relation_size": c.INT8,
    "pg_get_partkeydef": c.TEXT,
    "txid_current": c.INT8,
    "inet_server_port": c.INT4,
    "pg_postmaster_start_time": c.TIMESTAMPTZ,
    "row_number": c.INT8,
    "count": c.INT8,
    "current_user": c.NAME,
    "session_user": c.NAME,
    "user": c.NAME,
    "json_build_object": c.JSON,
    "jsonb_build_object": c.JSONB,
    "json_object": c.JSON,
    "quote_ident": c.TEXT,
    "array_upper": c.INT4,
    "array_lower": c.INT4,
    "to_regtype": c.REGTYPE,
    "to_regclass": c.REGCLASS,
    "pg_relation_is_publishable": c.BOOL,
    "pg_get_serial_sequence": c.TEXT,
    "pg_get_functiondef": c.TEXT,
    "pg_get_function_sqlbody": c.TEXT,
    "array_agg": c.TEXT_ARRAY,
    "lower": c.TEXT,
    "upper": c.TEXT,
}


_MACROS = """
CREATE MACRO pgc_format_type(t, m) AS (SELECT display FROM pgc.type_display WHERE oid = t);
CREATE MACRO pgc_pg_get_userbyid(o) AS 'dpsql';
CREATE MACRO pgc_pg_table_is_visible(o) AS true;
CREATE MACRO pgc_pg_type_is_visible(o) AS true;
CREATE MACRO pgc_pg_get_expr(e, r) AS NULL::VARCHAR, (e, r, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_constraintdef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_indexdef(o) AS NULL::VARCHAR, (o, n, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_viewdef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_partkeydef(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_statisticsobjdef_columns(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_encoding_to_char(e) AS 'UTF8';
CREATE MACRO pgc_obj_description(o) AS
    (SELECT description FROM pgc.pg_description WHERE objoid = o AND objsubid = 0 LIMIT 1),
    (o, k) AS (SELECT description FROM pgc.pg_description WHERE objoid = o AND objsubid = 0 LIMIT 1);
CREATE MACRO pgc_col_description(o, n) AS
    (SELECT description FROM pgc.pg_description WHERE objoid = o AND objsubid = n LIMIT 1);
CREATE MACRO pgc_shobj_description(o, k) AS NULL::VARCHAR;
CREATE MACRO pgc_has_table_privilege(a) AS true, (a, b) AS true, (a, b, d) AS true;
CREATE MACRO pgc_has_schema_privilege(a) AS true, (a, b) AS true, (a, b, d) AS true;
CREATE MACRO pgc_has_database_privilege(a) AS true, (a, b) AS true, (a, b, d) AS true;
CREATE MACRO pgc_has_column_privilege(a, b) AS true, (a, b, d) AS true, (a, b, d, e) AS true;
CREATE MACRO pgc_current_schemas(b) AS CASE WHEN b THEN ['pg_catalog', 'public'] ELSE ['public'] END;
CREATE MACRO pgc_pg_is_in_recovery() AS false;
CREATE MACRO pgc_pg_my_temp_schema() AS 16000;
CREATE MACRO pgc_pg_relation_size(o) AS NULL::BIGINT, (o, f) AS NULL::BIGINT;
CREATE MACRO pgc_pg_total_relation_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_table_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_indexes_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_database_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_size_pretty(n) AS CASE WHEN n IS NULL THEN NULL::VARCHAR ELSE n::VARCHAR || ' bytes' END;
CREATE MACRO pgc_pg_get_function_result(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_function_arguments(o) AS NULL::VARCHAR;
CREATE MACRO pgc_txid_current() AS 1::BIGINT;
CREATE MACRO pgc_quote_ident(s) AS
    CASE WHEN regexp_matches(s, '^[a-z_][a-z0-9_]*$') THEN s ELSE '"' || replace(s, '"', '""') || '"' END;
CREATE MACRO pgc_pg_get_serial_sequence(t, col) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_relation_is_publishable(o) AS false;
CREATE MACRO pgc_array_upper(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE len(a) END;
CREATE MACRO pgc_array_lower(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE 1 END;
CREATE MACRO pgc_regclass_name(x) AS (SELECT relname FROM pgc.pg_class WHERE oid = x);
CREATE MACRO pgc_regclass_oid(t) AS (SELECT oid FROM pgc.pg_class WHERE relname = t);
CREATE MACRO pgc_regtype_name(x) AS (SELECT typname FROM pgc.pg_type WHERE oid = x);
CREATE MACRO pgc_regtype_oid(t) AS (SELECT oid FROM pgc.pg_type WHERE typname = t);
CREATE MACRO pgc_regnamespace_name(x) AS (SELECT nspname FROM pgc.pg_namespace WHERE oid = x);
CREATE MACRO pgc_regnamespace_oid(t) AS (SELECT oid FROM pgc.pg_namespace WHERE nspname = t);
CREATE MACRO pgc_regrole_name(x) AS (SELECT rolname FROM pgc.pg_roles WHERE oid = x);
CREATE MACRO pgc_regrole_oid(t) AS (SELECT oid FROM pgc.pg_roles WHERE rolname = t);
CREATE MACRO pgc_to_regtype(t) AS (SELECT oid FROM pgc.pg_type WHERE typname = t);
CREATE MACRO pgc_to_regclass(t) AS (SELECT oid FROM pgc.pg_class WHERE relname = t);
CREATE MACRO pgc_aclexplode(a) AS
    unnest(CAST([] AS STRUCT(grantor BIGINT, grantee BIGINT, privilege_type VARCHAR, is_grantable BOOLEAN)[]));
CREATE MACRO pgc_pg_get_function_identity_arguments(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_functiondef(o) AS error('{no_source}');
CREATE MACRO pgc_pg_get_function_sqlbody(o) AS NULL::VARCHAR;
CREATE MACRO pgc_setting_of(n) AS (SELECT setting FROM pgc.pg_settings WHERE name = n);
CREATE MACRO pgc_pg_is_wal_replay_paused() AS false;
CREATE MACRO pgc_pg_blocking_pids(p) AS CAST([] AS INTEGER[]);
CREATE MACRO pgc_acldefault(k, r) AS CAST(NULL AS VARCHAR[]);
CREATE MACRO pgc_to_char(v, f) AS CAST(v AS VARCHAR);
"""


# What psql's \sf and \ef ask for a function's source: refused when evaluated (\df+ names
# pg_get_function_sqlbody too, for SQL-bodied functions only, of which there are none).
_NO_SOURCE = (
    "functions have no source here: dpsql is a proxy, and the functions a query may use are the "
    "database's built-ins (\\df name shows one)"
)


_REWRITTEN_FUNCTIONS = {m.group(1) for m in re.finditer(r"CREATE MACRO pgc_(\w+)", _MACROS)}


# Rewritten inside a catalog query, but not what makes a query one (analysts' SQL uses them too).
_GENERAL_FUNCTIONS = {"to_char"}


_SESSION_FUNCTIONS = {
    "version",
    "current_database",
    "current_schema",
    "current_user",
    "session_user",
    "user",
    "pg_backend_pid",
    "current_setting",
    "set_config",
    "inet_server_port",
    "inet_server_addr",
    "pg_postmaster_start_time",
    "current_role",
}


_SQLGLOT_NAMES = {"current_version": "version"}  # sqlglot's names for PostgreSQL's functions


def _func_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    name = node.sql_name().lower()
    return _SQLGLOT_NAMES.get(name, name)
