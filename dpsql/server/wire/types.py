"""PostgreSQL's types as the wire sends them, as data: each type's OID, its name in messages,
its length in a RowDescription and the array type a list of it is sent as (one record per type,
TYPES); the DuckDB type each engine type is answered as (oid_of)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

# PostgreSQL type OIDs (pg_type.oid), as clients expect them.
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR = 700, 701, 705, 1043, 1042
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC = 1082, 1083, 1114, 1184, 1186, 1700
UUID, JSON, JSONB, REGCLASS, REGPROC, REGTYPE, REGNAMESPACE = 2950, 114, 3802, 2205, 24, 2206, 4089
INT2VECTOR, OIDVECTOR = 22, 30
VOID = 2278  # what a function returning nothing returns: an empty value, not NULL
TEXT_ARRAY, INT2_ARRAY, INT4_ARRAY, INT8_ARRAY, OID_ARRAY, NAME_ARRAY, CHAR_ARRAY, BOOL_ARRAY = (
    1009,
    1005,
    1007,
    1016,
    1028,
    1003,
    1002,
    1000,
)
FLOAT8_ARRAY, ACLITEM_ARRAY = 1022, 1034
VARCHAR_ARRAY, FLOAT4_ARRAY, DATE_ARRAY, TIMESTAMP_ARRAY, TIMESTAMPTZ_ARRAY, NUMERIC_ARRAY = (
    1015,
    1021,
    1182,
    1115,
    1185,
    1231,
)


@dataclass(frozen=True)
class PgType:
    """One type as the wire describes it."""

    oid: int
    name: str | None = None  # format_type's name, in messages and information_schema (None: not named)
    length: int = -1  # RowDescription's typlen (-1: variable)
    array: int | None = None  # the array type a list of it is sent as (text[] when None)


# In the order information_schema's type names are listed (the catalog's type_display table).
TYPES = (
    PgType(BOOL, "boolean", 1, BOOL_ARRAY),
    PgType(BYTEA, "bytea"),
    PgType(CHAR, '"char"', 1, CHAR_ARRAY),
    PgType(NAME, "name", 64, NAME_ARRAY),
    PgType(INT8, "bigint", 8, INT8_ARRAY),
    PgType(INT2, "smallint", 2, INT2_ARRAY),
    PgType(INT4, "integer", 4, INT4_ARRAY),
    PgType(TEXT, "text", array=TEXT_ARRAY),
    PgType(OID, "oid", 4, OID_ARRAY),
    PgType(FLOAT4, "real", 4),
    PgType(FLOAT8, "double precision", 8, FLOAT8_ARRAY),
    PgType(VARCHAR, "character varying", array=TEXT_ARRAY),
    PgType(BPCHAR, "character"),
    PgType(DATE, "date", 4),
    PgType(TIME, "time without time zone", 8),
    PgType(TIMESTAMP, "timestamp without time zone", 8),
    PgType(TIMESTAMPTZ, "timestamp with time zone", 8),
    PgType(INTERVAL, "interval", 16),
    PgType(NUMERIC, "numeric"),
    PgType(UUID, "uuid", 16),
    PgType(JSON, "json"),
    PgType(REGCLASS, length=4),
    PgType(REGPROC, length=4),
    PgType(REGTYPE, length=4),
    PgType(REGNAMESPACE, length=4),
)
TYPE_LENGTH = {t.oid: t.length for t in TYPES if t.length != -1}
TYPE_NAMES = {t.oid: t.name for t in TYPES if t.name is not None}
_ARRAY_OF = {t.oid: t.array for t in TYPES if t.array is not None}
# Arrays a client may send in binary (psycopg's %b with a list, asyncpg always): one-dimensional.
ARRAY_OIDS = frozenset(_ARRAY_OF.values()) | {
    VARCHAR_ARRAY,
    FLOAT4_ARRAY,
    DATE_ARRAY,
    TIMESTAMP_ARRAY,
    TIMESTAMPTZ_ARRAY,
    NUMERIC_ARRAY,
}

_DUCKDB_TO_OID = {
    "BOOLEAN": BOOL,
    "TINYINT": INT2,
    "SMALLINT": INT2,
    "INTEGER": INT4,
    "BIGINT": INT8,
    "HUGEINT": NUMERIC,
    "UTINYINT": INT2,
    "USMALLINT": INT4,
    "UINTEGER": INT8,
    "UBIGINT": NUMERIC,
    "UHUGEINT": NUMERIC,
    "FLOAT": FLOAT4,
    "REAL": FLOAT4,
    "DOUBLE": FLOAT8,
    "DECIMAL": NUMERIC,
    "VARCHAR": TEXT,
    "BLOB": BYTEA,
    "DATE": DATE,
    "TIME": TIME,
    "TIMESTAMP": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ,
    "INTERVAL": INTERVAL,
    "UUID": UUID,
    "JSON": JSON,
    "NULL": TEXT,
    # type aliases the catalog uses to keep PostgreSQL's own column types
    "PG_NAME": NAME,
    "PG_OID": OID,
    "PG_CHAR": CHAR,
    "PG_REGCLASS": REGCLASS,
    "PG_REGPROC": REGPROC,
    "PG_REGTYPE": REGTYPE,
    "PG_INT2VECTOR": INT2VECTOR,
    "PG_OIDVECTOR": OIDVECTOR,
    "PG_BPCHAR": BPCHAR,
    "PG_VARCHAR": VARCHAR,
    "PG_ACLITEM_ARRAY": ACLITEM_ARRAY,
    "PG_REGNAMESPACE": REGNAMESPACE,
}


def array_of(oid: int) -> int:
    """The array type of a type (text[] where PostgreSQL's array type is not emulated)."""
    return _ARRAY_OF.get(oid, TEXT_ARRAY)


@functools.lru_cache(maxsize=1024)
def oid_of(duckdb_type: str) -> int:
    """The PostgreSQL type OID for a DuckDB type name (lists become arrays); every answer asks
    it for each of its columns."""
    t = duckdb_type.upper().strip()
    if t.endswith("[]"):
        return array_of(oid_of(t[:-2]))
    base = t.split("(")[0]
    return _DUCKDB_TO_OID.get(t, _DUCKDB_TO_OID.get(base, TEXT))
