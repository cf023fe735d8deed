"""The catalog's rows, built once from the schema and the policy (names, types, comments), and
a relation's rows in every table that lists relations. A mixin of `Catalog`."""

from __future__ import annotations

from typing import Mapping

from ...duck_rows import insert_rows
from ..wire import types as c
from .functions import _FUNCTIONS, _MACROS, _NO_SOURCE
from .pg_types import (
    _ARRAYS,
    _DATETIME_PRECISION,
    _STORAGE,
    _UNDERSCORED_IO,
    _VECTOR_ELEMENTS,
    BASE_TYPES,
    PSEUDO_TYPES,
)
from .tables import (
    _SETTINGS,
    DATABASE_OID,
    FIRST_FUNCTION_OID,
    FIRST_IO_FUNCTION_OID,
    FIRST_TABLE_OID,
    INFORMATION_SCHEMA,
    OWNER,
    PG_CATALOG,
    PG_TEMP,
    PG_TEMP_NAME,
    PUBLIC,
    TABLES,
    _full_rows,
)


class Contents:
    """Filling the in-memory catalog."""

    def _build(self) -> None:
        con = self._con
        con.execute("CREATE SCHEMA pgc")
        for table, cols in TABLES.items():
            defs = ", ".join(f'"{name}" {_STORAGE.get(oid, "VARCHAR")}' for name, oid in cols)
            con.execute(f"CREATE TABLE pgc.{table} ({defs})")
        con.execute("CREATE TABLE pgc.type_display (oid BIGINT, display VARCHAR)")
        insert_rows(con, "pgc.type_display", list(c.TYPE_NAMES.items()), 2)
        self._insert(
            "pg_namespace",
            [
                (PG_CATALOG, "pg_catalog", OWNER, None),
                (PUBLIC, "public", OWNER, None),
                (INFORMATION_SCHEMA, "information_schema", OWNER, None),
                (PG_TEMP, PG_TEMP_NAME, OWNER, None),
            ],
        )
        self._insert(
            "pg_database",
            [
                (
                    DATABASE_OID,
                    self.database,
                    OWNER,
                    6,
                    "c",
                    False,
                    True,
                    -1,
                    "C.UTF-8",
                    "C.UTF-8",
                    None,
                    None,
                    None,
                    1663,
                )
            ],
        )
        roles = [(OWNER, "dpsql")] + [(20000 + i, u) for i, u in enumerate(sorted(self.policy.users))]
        self._insert(
            "pg_roles",
            [
                (oid, name, False, True, False, False, True, False, -1, False, None, "********", None)
                for oid, name in roles
            ],
        )
        self._insert(
            "pg_user",
            [(u, 20000 + i, False, False, False, False, None) for i, u in enumerate(sorted(self.policy.users))],
        )
        self._insert("pg_am", [(2, "heap", "heap_tableam_handler", "t"), (403, "btree", "bthandler", "i")])
        self._insert("pg_tablespace", [(1663, "pg_default", OWNER), (1664, "pg_global", OWNER)])
        # base types (by value when their length allows) and pseudo-types, each with PostgreSQL's alignment and storage
        types = [
            _type_row(
                oid,
                name,
                PG_CATALOG,
                length=length,
                byval=typtype == "b" and length in (1, 2, 4, 8),
                typtype=typtype,
                category=category,
                elem=_VECTOR_ELEMENTS.get(oid, 0),
                array=array,
                io=_io_prefix(name),
                align=align,
                storage=storage,
            )
            for typtype, align, storage, listed in (("b", "i", "p", BASE_TYPES), ("p", "d", "x", PSEUDO_TYPES))
            for oid, name, length, category, array in listed
        ]
        types += [
            _type_row(
                oid,
                name,
                PG_CATALOG,
                length=-1,
                typtype="b",
                category="A",
                elem=elem,
                io="array_",
                align="i",
                storage="x",
            )
            for oid, name, elem in _ARRAYS
        ]
        rows: dict[str, list[tuple]] = {"pg_type": types}
        for i, (name, table) in enumerate(sorted(self.policy.tables.items())):
            comments = {col: _column_comment(table, col) for col in self.schema.get(name, {})}
            for kind, part in self._relation(
                FIRST_TABLE_OID + i, 30000 + i, name, self.schema.get(name, {}), _table_comment(table), comments
            ).items():
                rows.setdefault(kind, []).extend(part)
        for kind, part in rows.items():
            self._insert(kind, part)
        procs = [_proc_row(FIRST_FUNCTION_OID + i, name, ret, agg) for i, (name, ret, agg) in enumerate(_FUNCTIONS)]
        self._insert("pg_proc", procs)
        # The types' I/O functions, which drivers join pg_type to (Npgsql: pg_proc.oid = typreceive): only such
        # a join reads them (pg_proc_with_io), so that listings and completions show the functions queries may use.
        io = sorted({f for t in types for f in t[14:18]})
        con.execute("CREATE TABLE pgc.io_functions AS SELECT * FROM pgc.pg_proc LIMIT 0")
        insert_rows(
            con,
            "pgc.io_functions",
            _full_rows("pg_proc", [_proc_row(FIRST_IO_FUNCTION_OID + i, name, 0, False) for i, name in enumerate(io)]),
            len(TABLES["pg_proc"]),
        )
        con.execute(
            "CREATE VIEW pgc.pg_proc_with_io AS SELECT * FROM pgc.pg_proc UNION ALL SELECT * FROM pgc.io_functions"
        )
        self._insert(
            "is_routines",
            [
                (
                    self.database,
                    "pg_catalog",
                    f"{p[1]}_{p[0]}",
                    self.database,
                    "pg_catalog",
                    p[1],
                    "FUNCTION",
                    c.TYPE_NAMES.get(p[3], "text"),
                    _udt_name(p[3]),
                    "EXTERNAL",
                    None,
                    "C",
                    "YES",
                    "INVOKER",
                )
                for p in procs
            ],
        )
        categories = {
            "reserved": ("R", "reserved"),
            "unreserved": ("U", "unreserved"),
            "column_name": ("C", "unreserved (cannot be function or type name)"),
            "type_function": ("T", "reserved (can be function or type name)"),
        }
        keywords = self._con.execute(
            "SELECT keyword_name, keyword_category FROM duckdb_keywords() ORDER BY 1"
        ).fetchall()
        self._insert(
            "pg_get_keywords",
            [
                (word, code, True, label, "can be bare label")
                for word, kind in keywords
                for code, label in [categories.get(kind, ("U", "unreserved"))]
            ],
        )
        self._insert(
            "is_schemata",
            [
                (self.database, "public", "dpsql"),
                (self.database, "pg_catalog", "dpsql"),
                (self.database, "information_schema", "dpsql"),
            ],
        )
        settings = [
            {
                "name": k,
                "setting": v,
                "category": "dpsql",
                "short_desc": "",
                "context": "user",
                "vartype": "string",
                "source": "default",
                "boot_val": v,
                "reset_val": v,
                "pending_restart": False,
            }
            for k, v in sorted(_SETTINGS.items())
        ]
        self._insert("pg_settings", settings)
        self._insert("pg_show_all_settings", settings)  # pg_settings is PostgreSQL's view of this function
        for stmt in _MACROS.replace("{no_source}", _NO_SOURCE.replace("'", "''")).strip().split(";\n"):
            if stmt.strip():
                con.execute(stmt)

    def _relation(
        self,
        oid: int,
        rowtype: int,
        name: str,
        cols: Mapping[str, str],
        comment: str | None,
        column_comments: Mapping[str, str | None],
        view: bool = False,
    ) -> dict[str, list[tuple]]:
        """A relation's rows in every catalog table that lists relations: a declared table in
        public, or a session's temporary view in its pg_temp schema."""
        space, space_name = (PG_TEMP, PG_TEMP_NAME) if view else (PUBLIC, "public")
        out: dict[str, list[tuple]] = {
            "pg_type": [
                _type_row(
                    rowtype,
                    name,
                    space,
                    length=-1,
                    typtype="c",
                    category="C",
                    relid=oid,
                    io="record_",
                    align="d",
                    storage="x",
                ),
            ],
            "pg_class": [
                (
                    oid,
                    name,
                    space,
                    rowtype,
                    0,
                    OWNER,
                    0 if view else 2,
                    0 if view else oid,
                    0,
                    0,
                    -1.0,
                    0,
                    0,
                    False,
                    False,
                    "t" if view else "p",
                    "v" if view else "r",
                    len(cols),
                    0,
                    False,
                    False,
                    False,
                    False,
                    False,
                    True,
                    "n" if view else "d",
                    False,
                    0,
                    None,
                    None,
                    None,
                )
            ],
            "pg_attribute": [],
            "pg_description": [],
            "is_columns": [],
            "is_tables": [
                {
                    "table_catalog": self.database,
                    "table_schema": space_name,
                    "table_name": name,
                    "table_type": "VIEW" if view else "BASE TABLE",
                    "is_insertable_into": "NO",
                    "is_typed": "NO",
                }
            ],
        }
        if comment:
            out["pg_description"].append((oid, 1259, 0, comment))
        if not view:
            for stats in ("pg_stat_user_tables", "pg_stat_all_tables", "pg_statio_user_tables", "pg_statio_all_tables"):
                out[stats] = [{"relid": oid, "schemaname": "public", "relname": name}]  # every counter unknown: NULL
            out["pg_tables"] = [("public", name, "dpsql", None, False, False, False, False)]
        for num, (col, dtype) in enumerate(cols.items(), start=1):
            typ = c.oid_of(dtype)
            out["pg_attribute"].append(
                (
                    oid,
                    col,
                    typ,
                    -1,
                    c.TYPE_LENGTH.get(typ, -1),
                    num,
                    0,
                    -1,
                    -1,
                    c.TYPE_LENGTH.get(typ, -1) in (1, 2, 4, 8),
                    "i",
                    "p",
                    "",
                    False,
                    False,
                    False,
                    "",
                    "",
                    False,
                    True,
                    0,
                    0,
                    None,
                    None,
                    None,
                )
            )
            if column_comments.get(col):
                out["pg_description"].append((oid, 1259, num, column_comments[col]))
            out["is_columns"].append(
                {
                    "table_catalog": self.database,
                    "table_schema": space_name,
                    "table_name": name,
                    "column_name": col,
                    "ordinal_position": num,
                    "is_nullable": "YES",
                    "data_type": c.TYPE_NAMES.get(typ, "text"),
                    "udt_catalog": self.database,
                    "udt_schema": "pg_catalog",
                    "udt_name": _udt_name(typ),
                    "datetime_precision": _DATETIME_PRECISION.get(typ),
                    "dtd_identifier": str(num),
                    "is_self_referencing": "NO",
                    "is_identity": "NO",
                    "identity_cycle": "NO",
                    "is_generated": "NEVER",
                    "is_updatable": "NO",
                }
            )
        return out

    def _insert(self, table: str, rows: list[tuple | dict]) -> None:
        insert_rows(self._con, f"pgc.{table}", _full_rows(table, rows), len(TABLES[table]))


def _type_row(
    oid: int,
    name: str,
    namespace: int,
    *,
    length: int,
    typtype: str,
    category: str,
    io: str,
    align: str,
    storage: str,
    byval: bool = False,
    relid: int = 0,
    elem: int = 0,
    array: int = 0,
) -> tuple:
    """A pg_type row, up to typdefault (the columns after it are NULL): its I/O functions are
    `io` + in, out, recv and send; everything not given is PostgreSQL's default."""
    return (
        oid,
        name,
        namespace,
        OWNER,
        length,
        byval,
        typtype,
        category,
        False,
        True,
        ",",
        relid,
        elem,
        array,
        f"{io}in",
        f"{io}out",
        f"{io}recv",
        f"{io}send",
        0,
        -1,
        0,
        0,
        False,
        align,
        storage,
        None,
    )


def _io_prefix(name: str) -> str:
    """The prefix of a type's I/O functions' names (ADBC maps types by typreceive's name)."""
    return f"{name}_" if name in _UNDERSCORED_IO else name


def _proc_row(oid: int, name: str, rettype: int, agg: bool) -> tuple:
    """A pg_proc row, up to proiswindow (the columns after it are NULL): a built-in function
    (or aggregate) in pg_catalog, its source its name, in language 12 (internal)."""
    return (
        oid,
        name,
        PG_CATALOG,
        rettype,
        "a" if agg else "f",
        None,
        None,
        None,
        None,
        False,
        None,
        name,
        12,
        agg,
        False,
    )


def _udt_name(oid: int) -> str:
    """A type's name in pg_type (information_schema's udt_name), text for one it does not list."""
    return next((t[1] for t in BASE_TYPES if t[0] == oid), "text")


def _table_comment(table) -> str:
    if table.public:
        return "dpsql: public table (rows may be read directly)"
    unit = "each row" if table.row_unit else table.privacy_unit
    return (
        f"dpsql: private table; privacy unit {unit}; a unit counts in at most {table.max_groups} group(s) "
        f"with at most {table.max_rows} row(s) each per query; aggregates only"
    )


def _column_comment(table, col: str) -> str | None:
    p = table.columns.get(col)
    if p is None:
        return None
    parts = []
    if p.bounded:
        parts.append(f"bounds [{p.lower:g}, {p.upper:g}]")
    if p.keys is not None:
        parts.append("keys " + ", ".join(map(str, p.keys)))
    if p.keys_from is not None:
        parts.append(f"keys from {p.keys_from[0]}.{p.keys_from[1]}")
    return "dpsql: " + "; ".join(parts) if parts else None
