"""Catalog emulation: pg_catalog and information_schema answered from schema and policy only.

Clients browse with catalog queries (psql \\d, JDBC DatabaseMetaData, ODBC SQLTables,
SQLAlchemy reflection). They run here on a separate in-memory DuckDB that holds tables shaped
like PostgreSQL 15's catalogs, filled from the engine's schema and the policy: names, types,
comments. It holds no row of data; statistics answer NULL or nothing (pg_class.reltuples is -1,
as for a never-analyzed table). The client's SQL is rewritten onto these tables, PostgreSQL
functions become macros, and result column types are PostgreSQL's own.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Mapping

import duckdb
import sqlglot
from sqlglot import exp

from ...config import Policy
from ...duck_rows import insert_rows
from ...errors import Error, ProgrammingError
from ...sql.parameters import bind
from ..wire import types as c
from .contents import Contents
from .detect import is_catalog_query
from .functions import _NO_SOURCE
from .result_types import _output_names, _output_types
from .rewrite import Rewriting, _joins_regproc, _pre, _reg_comparisons, _regproc_comparisons
from .tables import FIRST_VIEW_OID, TABLES, _full_rows

__all__ = ["Catalog", "is_catalog_query"]

log = logging.getLogger(__name__)


class Catalog(Contents, Rewriting):
    """The catalog of one server: an in-memory DuckDB of PostgreSQL-shaped catalog tables."""

    def __init__(self, policy: Policy, schema: Mapping[str, Mapping[str, str]], database: str = "dpsql"):
        self.policy = policy
        self.schema = schema
        self.database = database
        self._con = duckdb.connect(
            ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        )
        self._lock = threading.Lock()
        self._build()
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    def answer(
        self, sql: str, params: list[Any], session, user: str, pid: int = 0
    ) -> tuple[list[str], list[int], list[tuple]]:
        """Run a catalog query: (column names, PostgreSQL type OIDs, rows). `pid` is the one
        the connection's BackendKeyData gave (pg_backend_pid(): tools match the two to find,
        cancel or hide their own session)."""
        try:
            tree = sqlglot.parse_one(_pre(sql), read="postgres")
        except sqlglot.errors.ParseError as e:
            raise ProgrammingError(
                f"syntax error in catalog query: {e.errors[0]['description'] if e.errors else e}", sqlstate="42601"
            ) from None
        names = _output_names(tree)
        types = _output_types(tree)
        io = _joins_regproc(tree)
        tree = _regproc_comparisons(_reg_comparisons(bind(tree, params, absent_as_null=True)))
        views = self._view_rows(session)
        tree = self._rewrite(tree, session, user, set(views), pid, io)
        text = tree.sql(dialect="duckdb")
        with self._lock:
            cur = self._con.cursor()
        try:
            for kind, part in views.items():  # this cursor's own copies, with the session's views added
                cur.execute(f"CREATE TEMP TABLE session_{kind} AS SELECT * FROM pgc.{kind}")
                insert_rows(cur, f"session_{kind}", _full_rows(kind, part), len(TABLES[kind]))
            cur.execute(text)
            rows = cur.fetchall()
            result_names = [d[0] for d in cur.description]
            duck = [str(d[1]) for d in cur.description]
        except duckdb.Error as e:
            if _NO_SOURCE in str(e):
                raise Error(
                    _NO_SOURCE,
                    sqlstate="0A000",
                    hint="the README's 'What SQL is answered' lists the functions queries may use",
                ) from None
            # The emulation holds no data, but an engine's text is never a client's business.
            log.info("catalog query not supported (%s): %s", type(e).__name__, str(e).splitlines()[0])
            missing = _missing_name(str(e).splitlines()[0], sql)
            raise Error(
                "catalog query not supported: it uses a catalog table, column or function dpsql does not "
                "emulate" + (f" ({missing})" if missing else ""),
                sqlstate="0A000",
                hint="dpsql answers catalog queries from an emulation of PostgreSQL's catalog "
                "(tables, columns, types, comments); please report the client and the query",
            ) from None
        finally:
            cur.close()
        n = len(duck)
        names = [a if a is not None else b for a, b in zip((names + [None] * n)[:n], result_names)]
        oids = [t if t is not None else c.oid_of(d) for t, d in zip((types + [None] * n)[:n], duck)]
        return names, oids, [tuple(r) for r in rows]

    def _view_rows(self, session) -> dict[str, list[tuple]]:
        """The catalog rows of the session's temporary views (ibis looks up the columns of the
        view it just created), by catalog table; empty without views."""
        views = session.view_columns() if session is not None else []
        rows: dict[str, list[tuple]] = {}
        for i, (name, cols) in enumerate(views):
            for kind, part in self._relation(
                FIRST_VIEW_OID + 2 * i,
                FIRST_VIEW_OID + 2 * i + 1,
                name,
                cols,
                "dpsql: a temporary view of this session (run and charged when read)",
                {},
                view=True,
            ).items():
                rows.setdefault(kind, []).extend(part)
        return rows


def _missing_name(message: str, sql: str) -> str | None:
    """The table, column or function an engine message says is missing, when the client's own
    query spells it (so that nothing but the client's words is echoed)."""
    column = re.search(r'Table "([^"]{1,63})" does not have a column named "([^"]{1,63})"', message)
    if column:  # the column, as the client's query spells it (`c.is_identity`), not the alias alone
        table, name = column.groups()
        if name.lower() not in sql.lower():
            return None
        try:
            tables = sqlglot.parse_one(_pre(sql), read="postgres").find_all(exp.Table)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            tables = iter(())
        real = next((t for t in tables if t.alias_or_name.lower() == table.lower()), None)
        return f"{real.db + '.' if real.db else ''}{real.name}.{name}" if real is not None else name
    for found in re.findall(r'"([^"]{1,63})"|with name ([A-Za-z_][A-Za-z0-9_]{0,62})', message):
        name = found[0] or found[1]
        if name and name.lower() in sql.lower():
            return name
    return None
