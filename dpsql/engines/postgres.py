"""PostgreSQL: the private tables stay in the database that holds them.

Every connection is read-only (default_transaction_read_only, and each query runs in its own
transaction that is rolled back), has a fixed search_path and a statement_timeout, and must
belong to a role that is no superuser and cannot write the policy's tables. PostgreSQL has no
TRY, so the rewrite's TRY is lowered to forms that cannot raise (pg_nonfailing.py), or the query is
refused before anything is charged. With `[engine] scratch_url`, a second role builds weighted
tables for contribution bounding (pg_weights.py); the reader still only reads.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from typing import Any, Mapping

from sqlglot import exp

from ..config import Policy, check_against_schema
from ..errors import OperationalError, PolicyError
from .base import (
    ENGINE_FAILURE_HINT,
    Capabilities,
    Engine,
    ResultSet,
    canonical_type,
    out_of_memory,
    quote,
    register,
    statement_timeout,
)
from .pg_nonfailing import lower_for_postgres
from .pg_weights import PgWeights


@register("postgres")
class PostgresEngine(Engine):
    dialect = "postgres"
    capabilities = Capabilities()  # weighted tables with [engine] scratch_url (they store no sums)

    def __init__(self, policy: Policy):
        import psycopg

        self._psycopg = psycopg
        self._policy = policy
        self._config = policy.engine
        self._local = threading.local()
        self._all: list[Any] = []
        self._all_lock = threading.Lock()
        self._running: dict[int, Any] = {}
        self._checked: dict[str, None] = {}
        self._public = frozenset(name for name, t in policy.tables.items() if t.public)
        self._weights: PgWeights | None = None
        try:
            con = self._connection()
            reader = self._check_role(con)
            self._schema = self._introspect(con)
            if self._config.scratch_url is not None:
                self._weights = PgWeights(
                    psycopg,
                    self._config.scratch_url,
                    self._config.scratch_schema,
                    self._config.schema,
                    reader,
                    self._config.statement_timeout,
                    self._building,
                    self._config.conf,
                )
                self.capabilities = replace(self.capabilities, weighted_copy=True)
        except psycopg.Error as e:
            self.close()
            raise PolicyError(
                f"{policy.path}: cannot open the PostgreSQL engine: {type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                hint="check [engine] url, and that the server accepts this role",
            ) from None
        except PolicyError:
            self.close()
            raise
        check_against_schema(policy, self._schema)

    # Connections ----------------------------------------------------------------------------
    def _connection(self):
        con = getattr(self._local, "con", None)
        if con is not None and not con.closed:
            return con
        con = self._psycopg.connect(self._config.url, autocommit=False, connect_timeout=10, application_name="dpsql")
        with con.cursor() as cur:
            cur.execute(f"SET search_path = {quote(self._config.schema)}")
            cur.execute(f"SET statement_timeout = {int(self._config.statement_timeout * 1000)}")
            cur.execute("SET default_transaction_read_only = on")
            cur.execute("SET TimeZone = 'UTC'")  # the zone dpsql reports to clients (sql/clock.py)
            cur.execute("SET idle_in_transaction_session_timeout = 60000")
            for name, value in self._config.conf.items():  # [engine] settings, e.g. work_mem
                cur.execute("SELECT set_config(%s, %s, false)", (name, value))
        con.commit()
        self._local.con = con
        with self._all_lock:
            self._all.append(con)
        return con

    def _check_role(self, con) -> str:
        """Refuse a role that could change data or read around the policy: a superuser, or one
        that may write a policy table. (Reading other tables is refused by analysis already;
        a role that can read only the policy's tables is the advice in the README.) Returns
        the role's name."""
        with con.cursor() as cur:
            cur.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
            user, superuser = cur.fetchone()
            if superuser:
                raise PolicyError(
                    f"{self._policy.path}: [engine] connects as {user}, a superuser",
                    hint="connect as a role that can only SELECT the policy's tables: CREATE ROLE "
                    "dpsql_reader LOGIN; GRANT SELECT ON <tables> TO dpsql_reader",
                )
            for table in self._policy.tables:
                cur.execute("SELECT to_regclass(%s)", (f"{quote(self._config.schema)}.{quote(table)}",))
                oid = cur.fetchone()[0]
                if oid is None:
                    continue  # reported by check_against_schema
                cur.execute("SELECT has_table_privilege(%s::regclass, 'INSERT, UPDATE, DELETE, TRUNCATE')", (oid,))
                if cur.fetchone()[0]:
                    raise PolicyError(
                        f"{self._policy.path}: [engine] role {user} may write table {table}",
                        hint=f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {table} FROM {user}; dpsql needs SELECT only",
                    )
        con.rollback()
        return user

    def _introspect(self, con) -> dict[str, dict[str, str]]:
        schema: dict[str, dict[str, str]] = {}
        with con.cursor() as cur:
            cur.execute(
                "SELECT table_name, column_name, data_type, numeric_precision, numeric_scale "
                "FROM information_schema.columns WHERE table_schema = %s AND table_name = ANY(%s) "
                "ORDER BY table_name, ordinal_position",
                (self._config.schema, list(self._policy.tables)),
            )
            for table, column, dtype, precision, scale in cur.fetchall():
                if dtype == "numeric" and precision is not None:
                    dtype = f"numeric({precision}, {scale or 0})"
                schema.setdefault(table.lower(), {})[column.lower()] = canonical_type(dtype, "postgres")
        con.rollback()
        return schema

    # The Engine protocol -------------------------------------------------------------------
    def schema(self) -> Mapping[str, Mapping[str, str]]:
        return self._schema

    def weighted_copy(
        self,
        table: str,
        unit: str,
        limit: int,
        bits: int,
        sums: Mapping[str, str] | None = None,
        per_unit: Mapping[str, str] | None = None,
    ) -> str:
        """The weighted table of `table` as of the current data version (see pg_weights.py): it
        stores no ready-weighted sums (a query weights its own values per row)."""
        return self._weights.table(table, unit, limit, bits, self.data_version())

    def _building(self, con: Any | None) -> None:
        ident = threading.get_ident()
        if con is None:
            self._running.pop(ident, None)
        else:
            self._running[ident] = con

    def _types(self) -> Mapping[str, Mapping[str, str]]:
        """The schema, with the weighted tables' columns: their source's and the weights."""
        if self._weights is None:
            return self._schema
        extra = {
            name: {**self._schema[source], "__dpsql_n": "BIGINT", "__dpsql_w": "BIGINT"}
            for name, source in self._weights.tables().items()
        }
        return {**self._schema, **extra}

    def sql_of(self, tree: exp.Expression, *, owned: bool = False) -> str:
        """Lower TRY and the keyed hash, transpile, and have PostgreSQL plan it (EXPLAIN reads
        no rows), so that a type error refuses the query before it is charged."""
        sql = lower_for_postgres(tree, self._types(), self._public, copy=not owned).sql(dialect="postgres", copy=False)
        if sql not in self._checked:
            con = self._connection()
            try:
                with con.cursor() as cur:
                    cur.execute("EXPLAIN " + sql)
            except self._psycopg.Error:
                raise OperationalError(
                    "PostgreSQL cannot plan this query",
                    sqlstate="0A000",
                    hint="nothing was charged; a type mismatch in an expression is the usual "
                    "cause (compare and combine values of one type)",
                ) from None
            finally:
                con.rollback()
            if len(self._checked) > 1024:
                self._checked.clear()
            self._checked[sql] = None
        return sql

    def execute(self, sql: str) -> ResultSet:
        con = self._connection()
        ident = threading.get_ident()
        self._running[ident] = con
        try:
            with con.cursor() as cur:
                cur.execute(sql)
                names = [d.name for d in cur.description]
                types = [self._type_name(d.type_code) for d in cur.description]
                rows = cur.fetchall()
        except self._psycopg.errors.QueryCanceled as e:
            if "user request" not in str(e):
                raise statement_timeout() from None
            raise OperationalError("canceling statement due to user request", sqlstate="57014") from None
        except self._psycopg.Error as e:
            if (e.sqlstate or "").startswith("53"):  # insufficient resources: out of memory, disk full
                raise (
                    out_of_memory()
                    if e.sqlstate == "53200"
                    else OperationalError(
                        "the engine ran out of resources (disk or connections) running the query",
                        sqlstate=e.sqlstate,
                        hint=ENGINE_FAILURE_HINT,
                    )
                ) from None
            raise OperationalError(
                "the query failed while running in the engine", sqlstate="XX000", hint=ENGINE_FAILURE_HINT
            ) from None
        finally:
            self._running.pop(ident, None)
            if not con.closed:
                con.rollback()
        columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in names]
        return ResultSet(names, types, columns)

    def _type_name(self, oid: int) -> str:
        info = self._psycopg.adapters.types.get(oid)
        return canonical_type(info.name if info is not None else "text", "postgres")

    def describe(self, sql: str) -> tuple[list[str], list[str]]:
        """Names and types from a prepared statement's description (nothing is executed)."""
        con = self._connection()
        try:
            with con.cursor() as cur:
                cur.execute(f"SELECT * FROM ({sql}) AS q LIMIT 0")
                return [c.name for c in cur.description], [self._type_name(c.type_code) for c in cur.description]
        except self._psycopg.Error:
            raise OperationalError("the query could not be described", sqlstate="XX000") from None
        finally:
            con.rollback()

    def interrupt(self, thread_ident: int) -> None:
        con = self._running.get(thread_ident)
        if con is not None:
            try:
                con.cancel_safe()
            except Exception as e:  # the query ends anyway; a failed cancel must not crash the server
                print(f"dpsql: cancel failed: {type(e).__name__}", file=sys.stderr)

    def read_data_version(self) -> str:
        """Changes when rows of a policy table are written (PostgreSQL's cumulative statistics,
        which it updates within about a second of a commit)."""
        con = self._connection()
        try:
            with con.cursor() as cur:
                cur.execute(
                    "SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0), COUNT(*) "
                    "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = ANY(%s)",
                    (self._config.schema, list(self._policy.tables)),
                )
                writes, tables = cur.fetchone()
        finally:
            con.rollback()
        return f"pg:{writes}:{tables}"

    def close(self) -> None:
        if getattr(self, "_weights", None) is not None:
            self._weights.close()  # drops its weighted tables
        with self._all_lock:
            for con in self._all:
                try:
                    con.close()
                except Exception:
                    pass
            self._all.clear()
