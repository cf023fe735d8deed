"""Weighted tables on PostgreSQL (`[engine] scratch_url`): the DuckDB engine's weighted copies,
built by a second role in a scratch schema, so that the role running analyst-derived queries
stays read-only.

A weighted table holds a private table's rows with __dpsql_n (the rows of the row's unit in the
whole table) and __dpsql_w = floor(limit * 2^bits / max(__dpsql_n, limit)) (guarantee/bounding.py's
row_weight), built in one statement, so both come from one snapshot: the weights always match
the rows they weight. Bounded queries then read only the weighted table (whole, or split by
__dpsql_n), never the live table, so a result is a function of one snapshot. It is rebuilt when
the data version changes (PostgreSQL's statistics, which follow a commit within about a second:
until then queries see the previous snapshot, bounded as before).

Each engine names its tables with an id of its own and holds a session advisory lock on that id
for its life: it drops its tables on close, and the next engine to start drops the tables of any
id whose lock nobody holds (an engine that crashed, or whose connection died). The tables are
UNLOGGED (PostgreSQL empties them after a crash of its own) and readable by the reader role only.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from typing import Any, Callable, Mapping

from sqlglot import exp

from ..errors import OperationalError, PolicyError
from ..guarantee.bounding import unit_rows, weighted_rows
from ..sql import build as b
from .base import quote
from .pg_nonfailing import lower_for_postgres

LOCK_CLASS = 0x64707371  # 'dpsq': the first key of dpsql's two-key advisory locks
PREFIX = "__dpsql_w_"


def build_sql(target: str, schema: str, table: str, unit: str, limit: int, bits: int) -> str:
    """The statement that builds weighted table `target` from `schema`.`table` in one snapshot:
    guarantee/bounding.py's weighted rows, lowered for PostgreSQL (its integer division is `/` of
    integers; DIV() would compute in NUMERIC)."""
    source = exp.Table(this=exp.to_identifier(table, quoted=True), db=exp.to_identifier(schema, quoted=True))
    rows = weighted_rows(source, b.subquery(unit_rows(source, unit), "u"), unit, limit, bits)
    return f"CREATE UNLOGGED TABLE {target} AS {lower_for_postgres(rows, {}, copy=False).sql(dialect='postgres')}"


def _lock_key(engine_id: str) -> int:
    return int(engine_id, 16) - 2**31  # a signed int4


class PgWeights:
    """The scratch role's connection and the weighted tables one engine has built."""

    def __init__(
        self,
        psycopg: Any,
        url: str,
        scratch_schema: str,
        source_schema: str,
        reader: str,
        statement_timeout: float,
        register: Callable[[Any | None], None],
        settings: Mapping[str, str] | None = None,
    ):
        """`settings` are the [engine] settings the reader's connections get too (work_mem, for
        the build's aggregation). `register(con)` marks the connection as the one running on
        this thread while a table is built (None when done), so that a CancelRequest
        interrupts a build too."""
        self._psycopg = psycopg
        self.schema, self._source, self._reader = scratch_schema, source_schema, reader
        self.id = secrets.token_hex(4)
        self._register = register
        self._lock = threading.Lock()
        self._built: dict[str, tuple[str, str]] = {}  # table name -> (data version, source table)
        self._con = psycopg.connect(url, autocommit=True, connect_timeout=10, application_name="dpsql-scratch")
        try:
            self._check_role()
            self._con.execute(f"SET statement_timeout = {int(statement_timeout * 1000)}")
            for name, value in (settings or {}).items():
                self._con.execute("SELECT set_config(%s, %s, false)", (name, value))
            self._con.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, _lock_key(self.id)))
            self._con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.schema)}")
            self._con.execute(f"GRANT USAGE ON SCHEMA {quote(self.schema)} TO {quote(reader)}")
            self.sweep()
        except psycopg.Error as e:
            self._con.close()
            raise PolicyError(
                f"[engine] scratch_url: cannot prepare the scratch schema {self.schema}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
                hint=f"the scratch role needs CREATE on the database (or on schema {self.schema}) and "
                "SELECT on the policy's tables",
            ) from None
        except PolicyError:
            self._con.close()
            raise

    def _check_role(self) -> None:
        user, superuser = self._con.execute(
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if user == self._reader:
            raise PolicyError(
                f"[engine] scratch_url connects as {user}, the role that runs queries",
                hint="give scratch_url a role of its own, so that the reader stays read-only: "
                "CREATE ROLE dpsql_scratch LOGIN; GRANT SELECT ON <tables> TO dpsql_scratch; "
                "GRANT CREATE ON DATABASE <db> TO dpsql_scratch",
            )
        if superuser:
            raise PolicyError(
                f"[engine] scratch_url connects as {user}, a superuser",
                hint="use a role that can only read the policy's tables and create in the scratch schema",
            )

    def name(self, table: str, limit: int, bits: int) -> str:
        digest = hashlib.sha256(repr((table, limit, bits)).encode()).hexdigest()[:8]
        return f"{PREFIX}{digest}_{self.id}"

    def table(self, table: str, unit: str, limit: int, bits: int, version: str) -> str:
        """The weighted table of `table` (rows of at most `limit` per unit at full weight), as of
        `version`: built, or rebuilt in one transaction that replaces it (a query reading it
        meanwhile waits, then reads the new one), and readable by the reader role."""
        name = self.name(table, limit, bits)
        with self._lock:
            if self._built.get(name, ("", ""))[0] != version:
                target = f"{quote(self.schema)}.{quote(name)}"
                build = build_sql(target, self._source, table, unit, limit, bits)
                self._register(self._con)
                try:
                    with self._con.transaction():
                        self._con.execute(f"DROP TABLE IF EXISTS {target}")
                        self._con.execute(build)
                        self._con.execute(f"GRANT SELECT ON {target} TO {quote(self._reader)}")
                    self._con.execute(f"ANALYZE {target}")
                except self._psycopg.errors.QueryCanceled:
                    raise OperationalError("canceling statement due to user request", sqlstate="57014") from None
                except self._psycopg.Error:
                    raise OperationalError(
                        "could not prepare the table's contribution weights",
                        sqlstate="XX000",
                        hint="the engine's message is withheld; check the scratch role's "
                        "privileges and the database's free space",
                    ) from None
                finally:
                    self._register(None)
                self._built[name] = (version, table)
        return f"{quote(self.schema)}.{quote(name)}"

    def tables(self) -> dict[str, str]:
        """Built weighted tables, by name: the source table each copies."""
        return {name: table for name, (_, table) in self._built.copy().items()}  # a copy: builds go on

    def sweep(self) -> list[str]:
        """Drop the weighted tables of engines that are gone (their lock is free)."""
        rows = self._con.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
            (self.schema, PREFIX),
        ).fetchall()
        owners: dict[str, list[str]] = {}
        for (name,) in rows:
            owner = name.rsplit("_", 1)[-1]
            if owner != self.id and len(owner) == 8 and all(c in "0123456789abcdef" for c in owner):
                owners.setdefault(owner, []).append(name)
        dropped = []
        for owner, names in owners.items():
            if self._con.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, _lock_key(owner))).fetchone()[0]:
                try:
                    for name in names:
                        self._con.execute(f"DROP TABLE IF EXISTS {quote(self.schema)}.{quote(name)}")
                        dropped.append(name)
                finally:
                    self._con.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _lock_key(owner)))
        return dropped

    def close(self) -> None:
        """Drop this engine's tables and let go of its lock (idempotent)."""
        with self._lock:
            if self._con.closed:
                return
            try:
                for name in list(self._built):
                    self._con.execute(f"DROP TABLE IF EXISTS {quote(self.schema)}.{quote(name)}")
                self._built.clear()
            except self._psycopg.Error:
                pass  # the next engine's sweep drops them
            finally:
                self._con.close()
