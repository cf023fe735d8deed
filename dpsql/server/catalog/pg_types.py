"""PostgreSQL 15's types as data: the built-in, pseudo and array types pg_type lists, their I/O
function names, and the DuckDB type each type OID is stored as (lengths as the wire
sends them, from wire/types.py)."""

from __future__ import annotations

from ..wire import types as c

_STORAGE = {
    c.INT2VECTOR: "SMALLINT[]",
    c.OIDVECTOR: "BIGINT[]",
    c.BOOL: "BOOLEAN",
    c.INT2: "SMALLINT",
    c.INT4: "INTEGER",
    c.INT8: "BIGINT",
    c.OID: "BIGINT",
    c.FLOAT4: "FLOAT",
    c.FLOAT8: "DOUBLE",
    c.TEXT_ARRAY: "VARCHAR[]",
    c.INT2_ARRAY: "SMALLINT[]",
    c.OID_ARRAY: "BIGINT[]",
    c.CHAR_ARRAY: "VARCHAR[]",
    c.FLOAT8_ARRAY: "DOUBLE[]",
    c.ACLITEM_ARRAY: "VARCHAR[]",
    c.TIMESTAMPTZ: "TIMESTAMPTZ",
}


# Built-in types clients look up: (oid, pg_type's name, category). Their length is the wire's
# (wire/types.py) and their array type the one _ARRAYS lists for them (BASE_TYPES below).
_BUILT_IN = [
    (c.BOOL, "bool", "B"),
    (c.BYTEA, "bytea", "U"),
    (c.CHAR, "char", "Z"),
    (c.NAME, "name", "S"),
    (c.INT8, "int8", "N"),
    (c.INT2, "int2", "N"),
    (c.INT4, "int4", "N"),
    (c.TEXT, "text", "S"),
    (c.OID, "oid", "N"),
    (c.FLOAT4, "float4", "N"),
    (c.FLOAT8, "float8", "N"),
    (c.BPCHAR, "bpchar", "S"),
    (c.VARCHAR, "varchar", "S"),
    (c.DATE, "date", "D"),
    (c.TIME, "time", "D"),
    (c.TIMESTAMP, "timestamp", "D"),
    (c.TIMESTAMPTZ, "timestamptz", "D"),
    (c.INTERVAL, "interval", "T"),
    (c.NUMERIC, "numeric", "N"),
    (c.UUID, "uuid", "U"),
    (c.JSON, "json", "U"),
    (c.JSONB, "jsonb", "U"),
    (c.REGCLASS, "regclass", "N"),
    (c.REGPROC, "regproc", "N"),
    (c.REGTYPE, "regtype", "N"),
    (c.REGNAMESPACE, "regnamespace", "N"),
    (c.INT2VECTOR, "int2vector", "A"),
    (c.OIDVECTOR, "oidvector", "A"),
]
# The vector types are arrays of their element (typelem), as asyncpg decodes pg_index.indoption.
_VECTOR_ELEMENTS = {c.INT2VECTOR: c.INT2, c.OIDVECTOR: c.OID}
# Pseudo-types drivers load by name (Npgsql: record, void): (oid, name, length, category, array oid).
PSEUDO_TYPES = [(2249, "record", -1, "P", 2287), (2278, "void", 4, "P", 0), (c.UNKNOWN, "unknown", -2, "X", 0)]
# Types whose I/O functions PostgreSQL names with an underscore (date_recv, not daterecv).
_UNDERSCORED_IO = {
    "json",
    "jsonb",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "interval",
    "numeric",
    "uuid",
    "record",
    "void",
}
_ARRAYS = [
    (c.BOOL_ARRAY, "_bool", c.BOOL),
    (1001, "_bytea", c.BYTEA),
    (c.CHAR_ARRAY, "_char", c.CHAR),
    (c.NAME_ARRAY, "_name", c.NAME),
    (c.INT8_ARRAY, "_int8", c.INT8),
    (c.INT2_ARRAY, "_int2", c.INT2),
    (c.INT4_ARRAY, "_int4", c.INT4),
    (c.TEXT_ARRAY, "_text", c.TEXT),
    (c.OID_ARRAY, "_oid", c.OID),
    (c.FLOAT4_ARRAY, "_float4", c.FLOAT4),
    (c.FLOAT8_ARRAY, "_float8", c.FLOAT8),
    (c.VARCHAR_ARRAY, "_varchar", c.VARCHAR),
    (c.DATE_ARRAY, "_date", c.DATE),
    (c.TIMESTAMP_ARRAY, "_timestamp", c.TIMESTAMP),
    (c.TIMESTAMPTZ_ARRAY, "_timestamptz", c.TIMESTAMPTZ),
    (c.NUMERIC_ARRAY, "_numeric", c.NUMERIC),
    (1014, "_bpchar", c.BPCHAR),
    (1183, "_time", c.TIME),
    (1187, "_interval", c.INTERVAL),
    (2951, "_uuid", c.UUID),
    (199, "_json", c.JSON),
    (3807, "_jsonb", c.JSONB),
    (2210, "_regclass", c.REGCLASS),
    (1008, "_regproc", c.REGPROC),
    (2211, "_regtype", c.REGTYPE),
    (4090, "_regnamespace", c.REGNAMESPACE),
    (1006, "_int2vector", c.INT2VECTOR),
    (1013, "_oidvector", c.OIDVECTOR),
    (2287, "_record", 2249),
]
# pg_type's rows for the built-in types: (oid, name, length, category, array oid).
_ARRAY_TYPE = {elem: oid for oid, _, elem in _ARRAYS}
BASE_TYPES = [(oid, name, c.TYPE_LENGTH.get(oid, -1), category, _ARRAY_TYPE[oid]) for oid, name, category in _BUILT_IN]


_DATETIME_PRECISION = {c.DATE: 0, c.TIME: 6, c.TIMESTAMP: 6, c.TIMESTAMPTZ: 6, c.INTERVAL: 6}
