"""PostgreSQL 15's types as data: the built-in, pseudo and array types pg_type lists, their I/O
function names, and the DuckDB type each type OID is stored as."""

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


# Built-in types clients look up (oid, name, length, category, array oid).
BASE_TYPES = [
    (c.BOOL, "bool", 1, "B", 1000),
    (c.BYTEA, "bytea", -1, "U", 1001),
    (c.CHAR, "char", 1, "Z", 1002),
    (c.NAME, "name", 64, "S", 1003),
    (c.INT8, "int8", 8, "N", 1016),
    (c.INT2, "int2", 2, "N", 1005),
    (c.INT4, "int4", 4, "N", 1007),
    (c.TEXT, "text", -1, "S", 1009),
    (c.OID, "oid", 4, "N", 1028),
    (c.FLOAT4, "float4", 4, "N", 1021),
    (c.FLOAT8, "float8", 8, "N", 1022),
    (c.BPCHAR, "bpchar", -1, "S", 1014),
    (c.VARCHAR, "varchar", -1, "S", 1015),
    (c.DATE, "date", 4, "D", 1182),
    (c.TIME, "time", 8, "D", 1183),
    (c.TIMESTAMP, "timestamp", 8, "D", 1115),
    (c.TIMESTAMPTZ, "timestamptz", 8, "D", 1185),
    (c.INTERVAL, "interval", 16, "T", 1187),
    (c.NUMERIC, "numeric", -1, "N", 1231),
    (c.UUID, "uuid", 16, "U", 2951),
    (c.JSON, "json", -1, "U", 199),
    (c.JSONB, "jsonb", -1, "U", 3807),
    (c.REGCLASS, "regclass", 4, "N", 2210),
    (c.REGPROC, "regproc", 4, "N", 1008),
    (c.REGTYPE, "regtype", 4, "N", 2211),
    (c.REGNAMESPACE, "regnamespace", 4, "N", 4090),
    (c.INT2VECTOR, "int2vector", -1, "A", 1006),
    (c.OIDVECTOR, "oidvector", -1, "A", 1013),
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
    (1000, "_bool", c.BOOL),
    (1001, "_bytea", c.BYTEA),
    (1002, "_char", c.CHAR),
    (1003, "_name", c.NAME),
    (1016, "_int8", c.INT8),
    (1005, "_int2", c.INT2),
    (1007, "_int4", c.INT4),
    (1009, "_text", c.TEXT),
    (1028, "_oid", c.OID),
    (1021, "_float4", c.FLOAT4),
    (1022, "_float8", c.FLOAT8),
    (1015, "_varchar", c.VARCHAR),
    (1182, "_date", c.DATE),
    (1115, "_timestamp", c.TIMESTAMP),
    (1185, "_timestamptz", c.TIMESTAMPTZ),
    (1231, "_numeric", c.NUMERIC),
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


_DATETIME_PRECISION = {c.DATE: 0, c.TIME: 6, c.TIMESTAMP: 6, c.TIMESTAMPTZ: 6, c.INTERVAL: 6}
