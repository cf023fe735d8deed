"""DuckDB, embedded: the default engine.

The connection is built once and then locked: only the declared sources are readable, no
extension can be installed or loaded, and the configuration is frozen, so even a bug in the
rewrite could not read /etc/passwd or attach another database.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import duckdb
import sqlglot
from sqlglot import exp

from .. import owner_only
from ..config import Policy, check_against_schema
from ..errors import OperationalError, PolicyError
from ..guarantee.bounding import UNIT_ROWS, unit_rows, weighted_rows
from ..sql import build as b
from ..sql.build import DUCKDB, dtype
from .base import (
    ENGINE_FAILURE_HINT,
    Capabilities,
    Engine,
    ResultSet,
    built_at_one_version,
    coin_parts,
    files_version,
    is_coin,
    is_keyed_hash,
    out_of_memory,
    quote,
    register,
    statement_timeout,
    width_bucket_case,
)
from .scratch import ScratchDir
from .watchdog import Watchdog

# DuckDB's own default is 80 % of the machine's memory, which it then fills with cached blocks
# (a weighted copy's build over 50M rows peaked at 2.6 GB). Joins, aggregations and sorts past the
# limit spill to the engine's private scratch directory, so it caps memory rather than queries.
# dpsql's default is a sixteenth of the machine's memory (or of its cgroup's limit), at least 1 GB
# (half the memory on a machine of less than 2 GB); [engine] memory_limit sets it.
MEMORY_SHARE = 16
MEMORY_FLOOR = 1 << 30
# A weighted copy joins each row to its unit's count: the join's hash table costs about this many
# bytes a unit, plus 16 for each per-unit aggregate (HUGEINT); it may take half the memory limit,
# and a run with more units is built in parts by a hash of the unit (each part one scan of the
# source), because a join past the limit spills every row it probes (2x slower at 100M rows).
UNIT_BYTES = 64
REUSED_RESULTS = 64  # bounded queries' exact results kept per data version (for every analyst together)
REUSED_CELLS = 200_000  # and at most this many values in all (about 10 MB); a larger result is recomputed
PREPARED_PER_CURSOR = 128  # query texts remembered per worker thread's cursor (prepared from the second run)
_PREPARED = itertools.count()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _query_failure() -> OperationalError:
    return OperationalError("the query failed while running in the engine", sqlstate="XX000", hint=ENGINE_FAILURE_HINT)


def bind_failure() -> OperationalError:
    """A query the engine cannot bind (AVG over text, an unknown function): binding reads the
    schema only, never rows, so this much can be said; the engine's own words are still withheld."""
    return OperationalError(
        "the query does not type-check: a function or operator is applied to a value of a type "
        "it does not take, or a function is unknown",
        sqlstate="42883",
        hint="check the columns' types (\\d table in psql) and the functions' arguments",
    )


@register("duckdb")
class DuckDBEngine(Engine):
    dialect = "duckdb"
    capabilities = Capabilities(
        literal_sql=True,
        overlaps_admission=True,
        execute_reused=True,
        weighted_copy=True,
        weights_store_sums=True,
        copy_totals=True,
    )

    def __init__(self, policy: Policy):
        self._policy = policy
        config = {
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
        if policy.engine.threads:
            config["threads"] = policy.engine.threads
        config["memory_limit"] = policy.engine.memory_limit or default_memory_limit()
        # A result without ORDER BY comes in whatever order the engine's threads produce it, as
        # in PostgreSQL: DuckDB otherwise keeps the source's order in every parallel operator,
        # which cost a weighted copy's build (three large appends) about a third of its time
        # (16.1 -> 10.2 s at 20M rows). Released rows are ordered by their keys in any case
        # (release.py), and a copy's three runs stay in order, each its own statement.
        config["preserve_insertion_order"] = False
        # A private directory for what the engine writes: the operators' spills (DuckDB's default
        # is .tmp in the working directory, readable by others and left behind by a crash) and
        # the weighted copies, on disk by default, stored compressed, so scanning one costs about
        # what scanning the source does (an in-memory copy was 3x slower); in memory with
        # [engine] scratch = "memory", for small tables.
        self._scratch = ScratchDir()
        owner_only.make_dirs(self._scratch.file("spill"))  # 0700, where DuckDB would make it 0755
        config["temp_directory"] = str(self._scratch.file("spill"))
        self._con = duckdb.connect(":memory:", config=config)
        self._files: list[Path] = []
        target = ":memory:" if policy.engine.scratch == "memory" else str(self._scratch.file("weights.duckdb"))
        try:
            self._con.execute(f"ATTACH {_literal(target)} AS scratch")
            self._scratch.protect()  # DuckDB created the file with the umask's mode, inside the 0700 directory
            self._attach_sources()
            self._schema = self._introspect()
        except duckdb.Error as e:
            self.close()
            raise PolicyError(
                f"{policy.path}: cannot open the data: {e}",
                hint="check the [engine] database and the tables' source files",
            ) from None
        check_against_schema(policy, self._schema)
        self._memory_bytes = _bytes(self._con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        self._lock_down()
        self._local = threading.local()
        self._running: dict[int, duckdb.DuckDBPyConnection] = {}
        self._copies: dict[str, str] = {}  # weighted copy -> the data version it was built from
        self._totals: dict[str, str] = {}  # weighted copy's relation -> its totals' (copy_totals)
        self._copies_lock = threading.Lock()
        self._reused: OrderedDict[tuple[str, str], ResultSet] = OrderedDict()  # see execute_reused
        self._reused_version: str | None = None
        self._reused_cells = 0
        self._reused_lock = threading.Lock()
        self._watchdog = Watchdog(policy.engine.statement_timeout)

    def _attach_sources(self) -> None:
        db = self._policy.engine.database
        existing: dict[str, str] = {}
        if db is not None:
            self._con.execute(f"ATTACH {_literal(str(db))} AS src (READ_ONLY)")
            self._files.append(db)
            for (name,) in self._con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'src' "
                "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = 'src' AND NOT internal"
            ).fetchall():
                existing[name.lower()] = name
        for table in self._policy.tables.values():
            if table.source is not None:
                where = (
                    str(table.source / "**" / f"*{table.source.suffix}") if table.source.is_dir() else str(table.source)
                )
                if table.source.suffix.lower() == ".parquet":
                    body = f"SELECT * FROM read_parquet({_literal(where)})"
                elif table.public:  # public data: its sniffed types reveal nothing private
                    body = f"SELECT * FROM read_csv({_literal(where)})"
                else:
                    body = self._typed_csv(table, where)
                self._files.append(table.source)
            elif table.name in existing:
                body = f"SELECT * FROM src.main.{quote(existing[table.name])}"
            else:
                continue  # reported by check_against_schema with the fix
            self._con.execute(f"CREATE VIEW main.{quote(table.name)} AS {body}")

    def _typed_csv(self, table, where: str) -> str:
        """A private CSV/TSV read as text, each column cast (TRY_CAST: a bad value is NULL) to
        the type the policy gives it (ColumnPolicy.file_type): the schema never depends on data."""
        delim = "\t" if table.source.suffix.lower() == ".tsv" else ","
        reader = f"read_csv({_literal(where)}, all_varchar = true, header = true, delim = {_literal(delim)})"
        names = [d[0] for d in self._con.execute(f"SELECT * FROM {reader} LIMIT 0").description]
        columns = ", ".join(
            f"TRY_CAST({quote(n)} AS {table.column(n.lower()).file_type()}) AS {quote(n)}" for n in names
        )
        return f"SELECT {columns} FROM {reader}"

    def _introspect(self) -> dict[str, dict[str, str]]:
        schema: dict[str, dict[str, str]] = {}
        rows = self._con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_catalog = current_database() AND table_schema = 'main' ORDER BY table_name, ordinal_position"
        ).fetchall()
        for table, column, type_name in rows:
            schema.setdefault(table.lower(), {})[column.lower()] = type_name
        return schema

    def _lock_down(self) -> None:
        paths = ", ".join(_literal(str(p)) for p in self._files if not p.is_dir())
        self._con.execute(f"SET allowed_paths = [{paths}]")
        directories = ", ".join(_literal(str(p) + "/") for p in self._files if p.is_dir())
        if directories:
            self._con.execute(f"SET allowed_directories = [{directories}]")
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET allow_community_extensions = false")
        self._con.execute("SET error_on_division_by_zero = false")
        self._con.execute("SET TimeZone = 'UTC'")  # the zone dpsql reports to clients, whatever the host's
        self._con.execute("SET lock_configuration = true")

    def schema(self) -> Mapping[str, Mapping[str, str]]:
        return self._schema

    def sql_of(self, tree: exp.Expression, *, owned: bool = False) -> str:
        """DuckDB has TRY itself; DPSQL_HASH is its hash(), and width_bucket, which it lacks,
        becomes a CASE."""
        tree = tree if owned else tree.copy()
        # deepest first, so that a lowering that copies its operands copies them lowered; a
        # search and a few replacements take half the time of a transform of every node
        for node in reversed(list(tree.find_all(exp.Anonymous, exp.WidthBucket, bfs=True))):
            lowered = _lower(node)
            if node is tree:
                tree = lowered
            elif lowered is not node:
                node.replace(lowered)
        return tree.sql(dialect=DUCKDB, copy=False)

    def literal_sql(self, literal: exp.Literal) -> str:
        """A literal as `sql_of` writes it, apart from any query (sql/slots.py splices a text's
        filter values into its shape's bounded query)."""
        return literal.sql(dialect=DUCKDB)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self._con.cursor()
        return cur

    @contextlib.contextmanager
    def _tracked(self, failure: Callable[[], OperationalError]) -> Iterator[duckdb.DuckDBPyConnection]:
        """This thread's cursor, registered so that a CancelRequest can interrupt it; engine
        messages may quote data, so an engine error becomes `failure()` and never travels upward."""
        cur = self._cursor()
        ident = threading.get_ident()
        self._running[ident] = cur
        try:
            yield cur
        except duckdb.InterruptException:
            raise OperationalError("canceling statement due to user request", sqlstate="57014") from None
        except duckdb.BinderException:
            raise bind_failure() from None
        except duckdb.OutOfMemoryException:  # past [engine] memory_limit, spilling included
            raise out_of_memory() from None
        except duckdb.Error:
            raise failure() from None
        finally:
            self._running.pop(ident, None)

    @contextlib.contextmanager
    def _timed(self, cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """[engine] statement_timeout: the query is interrupted once it has run that long (a
        weighted copy's build, which is not a query's, is not timed)."""
        with self._watchdog.timed(cur.interrupt) as expired:
            try:
                yield
            except duckdb.InterruptException:
                if expired():
                    raise statement_timeout() from None
                raise

    def execute(self, sql: str, stop: threading.Event | None = None) -> ResultSet:
        """Run dpsql-built SQL; not started once `stop` is set (engines/base.py)."""
        with self._tracked(_query_failure) as cur, self._timed(cur):
            if stop is not None and stop.is_set():
                raise duckdb.InterruptException("stopped before it started")
            self._run(cur, sql)
            names = [d[0] for d in cur.description]
            types = [str(d[1]) for d in cur.description]
            rows = cur.fetchall()
        columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in names]
        return ResultSet(names, types, columns)

    def execute_reused(self, sql: str, scope: str, stop: threading.Event | None = None) -> ResultSet:
        """`execute` for a bounded query whose exact values the data alone determines (no salt,
        no clock): computed once per data version and `scope` (the analyst), so a dashboard's
        repeated query skips the engine; every release of it still draws fresh noise and is
        charged, exactly as when it is recomputed. Kept per analyst, so that no analyst can
        time whether another has asked the same query; dropped when the data changes."""
        version = self.data_version()
        key = (scope, sql)
        with self._reused_lock:
            if self._reused_version != version:
                self._reused.clear()
                self._reused_version, self._reused_cells = version, 0
            hit = self._reused.get(key)
            if hit is not None:
                self._reused.move_to_end(key)
                return hit
        rs = self.execute(sql, stop)
        cells = rs.row_count * len(rs.names)
        if cells <= REUSED_CELLS // 4:
            rs = ResultSet(tuple(rs.names), tuple(rs.types), tuple(tuple(c) for c in rs.columns))
            with self._reused_lock:
                if self._reused_version == version and key not in self._reused:  # else the data changed meanwhile
                    self._reused[key] = rs
                    self._reused_cells += cells
                    while len(self._reused) > REUSED_RESULTS or self._reused_cells > REUSED_CELLS:
                        _, old = self._reused.popitem(last=False)
                        self._reused_cells -= old.row_count * len(old.names)
        return rs

    def _run(self, cur: duckdb.DuckDBPyConnection, sql: str) -> None:
        """Run `sql` on this thread's cursor; from its second run on, through a prepared
        statement of that cursor: a dashboard's repeated query then skips DuckDB's parsing,
        binding and planning, about 40 % of a small query. A new data version starts afresh."""
        prepared: OrderedDict[str, str | None] = self._local.__dict__.setdefault("prepared", OrderedDict())
        version = self.data_version()
        if self._local.__dict__.get("version") != version:
            for name in filter(None, prepared.values()):
                cur.execute(f"DEALLOCATE {name}")
            prepared.clear()
            self._local.version = version
        name = prepared.get(sql)
        if name is None:
            if sql not in prepared:  # first sighting: run it as it is (evicting first: the cursor holds one result)
                prepared[sql] = None
                self._evict(cur, prepared)
                cur.execute(sql)
                return
            name = prepared[sql] = f"dpsql_p{next(_PREPARED)}"
            cur.execute(f"PREPARE {name} AS {sql}")
        prepared.move_to_end(sql)
        cur.execute(f"EXECUTE {name}")

    @staticmethod
    def _evict(cur: duckdb.DuckDBPyConnection, prepared: OrderedDict[str, str | None]) -> None:
        while len(prepared) > PREPARED_PER_CURSOR:
            _, name = prepared.popitem(last=False)
            if name is not None:
                cur.execute(f"DEALLOCATE {name}")

    def weighted_copy(
        self,
        table: str,
        unit: str,
        limit: int,
        bits: int,
        sums: Mapping[str, str] | None = None,
        per_unit: Mapping[str, str] | None = None,
    ) -> str:
        """A copy of `table` whose rows carry __dpsql_n, the rows of the row's unit in the
        whole table, and __dpsql_w = floor(limit * 2^bits / max(__dpsql_n, limit)): built once
        per data version, so per-unit contribution bounding costs one weighted scan per query
        instead of a per-unit aggregation (or, split by __dpsql_n, one aggregation over the few
        units with many rows). `sums` (column name -> expression over the row, __dpsql_w and
        the `per_unit` aggregates, which are computed over each unit's rows) are stored too: a
        SUM over the copy then reads one integer column, with no per-row conversion. The unit
        totals are one hash aggregation joined back to the rows (window functions partition
        and sort the whole table, several times slower with several of them). Rows are stored
        in three runs by __dpsql_n, so the weights (almost all full) compress into long runs and
        sum about as fast as a COUNT(*), and the units with many rows are the copy's tail. Its
        name is not a policy table, so analysts cannot name it. Its column totals are kept
        beside it (copy_totals)."""
        sums = dict(sorted((sums or {}).items()))
        per_unit = dict(sorted((per_unit or {}).items()))
        digest = hashlib.sha256(repr((sums, per_unit)).encode()).hexdigest()[:8] if sums else "plain"
        name = f"__dpsql_w_{table}_{limit}_{bits}_{digest}"
        version = self.data_version()
        with self._copies_lock:
            if self._copies.get(name) != version:
                failure = OperationalError(
                    "could not prepare the table's contribution weights",
                    sqlstate="XX000",
                    hint="the engine's message is withheld; check the engine's memory_limit",
                )

                def build() -> None:  # reads the source several times: kept only at one data version
                    with self._tracked(lambda: failure) as cur:  # a CancelRequest interrupts the build too
                        cur.execute(units_statement(name, table, unit, per_unit))
                        cur.execute(run_sizes_sql(name, limit))
                        parts = [copy_parts(k, self._memory_bytes, len(per_unit)) for k in cur.fetchone()]
                        for statement in run_statements(name, table, unit, limit, bits, sums, per_unit, parts):
                            cur.execute(statement)
                        summed = ["__dpsql_w", *sums]
                        cur.execute(
                            f"SELECT {', '.join(f'SUM({quote(c)})' for c in summed)} FROM scratch.main.{quote(name)}"
                        )
                        constants = ", ".join(
                            f"CAST({'NULL' if v is None else int(v)} AS HUGEINT) AS {quote(c)}"
                            for c, v in zip(summed, cur.fetchone())
                        )
                        cur.execute(
                            f"CREATE OR REPLACE VIEW scratch.main.{quote(name + '_totals')} AS SELECT {constants}"
                        )
                        cur.execute("CHECKPOINT scratch")
                    self._scratch.protect()

                self._copies.pop(name, None)  # the table is replaced from here on: current again once built
                # versions read afresh around the build: the statement's (one_version) may be behind the files
                _, version = built_at_one_version(build, self.read_data_version, self.read_data_version())
                self._copies[name] = version
                self._totals[f"scratch.main.{quote(name)}"] = f"scratch.main.{quote(name + '_totals')}"
        return f"scratch.main.{quote(name)}"

    def copy_totals(self, copy: str) -> str | None:
        """The one-row relation beside weighted copy `copy` (a name weighted_copy returned) that
        holds the SUM of its __dpsql_w and of each stored column, under the same names and
        built with it: a query without filter or GROUP BY that sums only those columns reads
        it instead of the copy, as DuckDB itself answers COUNT(*) from its table statistics
        instead of scanning. A view of the totals as constants (in the private scratch
        database, like the copy's rows): a query over it is constant-folded when prepared,
        where a scan of a one-row table costs more than the rest of the query."""
        return self._totals.get(copy)

    def describe(self, sql: str) -> tuple[list[str], list[str]]:
        """Names and types of a query's result, from binding alone (nothing is executed)."""
        try:
            rel = self._cursor().sql(sql)
            return list(rel.columns), [str(t) for t in rel.types]
        except duckdb.BinderException:
            raise bind_failure() from None
        except duckdb.Error:  # binding reads no rows: a literal or argument the engine does not accept
            raise OperationalError(
                "the engine cannot run the query as written: it does not accept one of its "
                "literals or function arguments",
                sqlstate="22023",
                hint="check the literals and function arguments (a date's format, a unit's name); nothing was charged",
            ) from None

    def interrupt(self, thread_ident: int) -> None:
        """Cancel what the engine runs on that thread (CancelRequest)."""
        cur = self._running.get(thread_ident)
        if cur is not None:
            cur.interrupt()

    def read_data_version(self) -> str:
        return files_version(self._files)

    def close(self) -> None:
        """Close the connection and remove the scratch copies (idempotent)."""
        for cur in list(getattr(self, "_running", {}).values()):
            cur.interrupt()
        if getattr(self, "_watchdog", None) is not None:
            self._watchdog.close()
        self._con.close()
        self._scratch.close()


def default_memory_limit(total: int | None = None) -> str:
    """The engine's memory limit when the policy sets none: a MEMORY_SHARE of `total` bytes (the
    machine's memory, or its cgroup's limit in a container), at least MEMORY_FLOOR but at most half."""
    if total is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        with contextlib.suppress(OSError, ValueError):  # no cgroup v2, or "max": no limit
            total = min(total, int(Path("/sys/fs/cgroup/memory.max").read_text().strip()))
    return f"{max(total // MEMORY_SHARE, min(MEMORY_FLOOR, total // 2)) >> 20}MiB"


_UNITS = {"": 1, "bytes": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def _bytes(setting: str) -> int:
    """DuckDB's memory_limit as it shows it ('953.6 MiB') in bytes."""
    number, unit = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", setting).groups()
    return int(float(number) * _UNITS[unit.lower()])


def copy_parts(units: int, memory_bytes: int, aggregates: int) -> int:
    """Into how many parts (by a hash of the unit) a run of a weighted copy's build with `units`
    units is split, so that each part's join keeps its hash table within half the memory limit."""
    per_part = max(1, memory_bytes // 2 // (UNIT_BYTES + 16 * aggregates))
    return max(1, math.ceil(units / per_part))


def _runs(limit: int) -> list[exp.Expression]:
    """A weighted copy's three runs by the unit's rows (u.__dpsql_n): one row, within the limit,
    beyond it."""
    n = b.col(UNIT_ROWS, "u")
    return [
        exp.EQ(this=n.copy(), expression=b.node(1)),
        b.conjunction([exp.GT(this=n.copy(), expression=b.node(1)), exp.LTE(this=n.copy(), expression=b.node(limit))]),
        exp.GT(this=n.copy(), expression=b.node(limit)),
    ]


def _units_table(name: str) -> str:
    return f"scratch.main.{quote(name + '_units')}"


def units_statement(name: str, table: str, unit: str, per_unit: Mapping[str, str]) -> str:
    """The statement that stores weighted copy `name`'s units: each unit's rows in `table` and
    its `per_unit` aggregates (DuckDB SQL), one hash aggregation."""
    source = exp.Table(this=exp.to_identifier(table, quoted=True), db=exp.to_identifier("main"))
    aggregates = [exp.alias_(sqlglot.parse_one(e, dialect=DUCKDB), c, quoted=True) for c, e in per_unit.items()]
    return f"CREATE OR REPLACE TABLE {_units_table(name)} AS {unit_rows(source, unit, aggregates).sql(dialect=DUCKDB)}"


def run_sizes_sql(name: str, limit: int) -> str:
    """The units in each of the copy's three runs (_runs), from its units table."""
    counts = [f"COUNT(*) FILTER (WHERE {r.sql(dialect=DUCKDB)})" for r in _runs(limit)]
    return f"SELECT {', '.join(counts)} FROM {_units_table(name)} AS u"


def run_statements(
    name: str,
    table: str,
    unit: str,
    limit: int,
    bits: int,
    sums: Mapping[str, str],
    per_unit: Mapping[str, str],
    parts: Sequence[int] = (1, 1, 1),
) -> list[str]:
    """The statements that store weighted copy `name` from its units table (units_statement):
    guarantee/bounding.py's weighted rows with the columns `sums` appended, in three runs
    appended in turn instead of a sort (which held the whole table in memory): units of one
    row, then those within the limit, then the others, so a split's tail (__dpsql_n > limit)
    skips the row groups before it. Run i is appended in parts[i] parts, each the units (and
    rows) whose unit hashes to it, so each join's hash table fits in memory (copy_parts).
    `sums` and `per_unit` are DuckDB SQL (the session's)."""
    source = exp.Table(this=exp.to_identifier(table, quoted=True), db=exp.to_identifier("main"))
    extra = [exp.alias_(sqlglot.parse_one(e, dialect=DUCKDB), c, quoted=True) for c, e in sums.items()]
    star = exp.Star(except_=[b.quoted(c) for c in per_unit] or None)  # the aggregates, kept in the weighted sums only
    units = b.qualified(_units_table(name), "u")

    def rows(where: exp.Expression) -> str:
        weighted = weighted_rows(source, units, unit, limit, bits, list(per_unit), where)
        return b.select([star.copy(), *[e.copy() for e in extra]], b.subquery(weighted, "weighted")).sql(dialect=DUCKDB)

    def part(where: exp.Expression, count: int, i: int) -> exp.Expression:
        if count == 1:
            return where
        # the units' side splits the join's hash table; the rows' side spares the others' probes
        hashed = [b.binary(exp.Mod, b.anonymous("hash", b.quoted(unit, side)), count) for side in ("u", "t")]
        hashed = [exp.EQ(this=h, expression=b.node(i)) for h in hashed]
        return b.conjunction([where, *hashed])

    copy = f"scratch.main.{quote(name)}"
    appends = [rows(part(where, count, i)) for where, count in zip(_runs(limit), parts) for i in range(count)]
    return [
        f"CREATE OR REPLACE TABLE {copy} AS {appends[0]}",
        *[f"INSERT INTO {copy} {a}" for a in appends[1:]],
        f"DROP TABLE {_units_table(name)}",
    ]


def _lower(node: exp.Expression) -> exp.Expression:
    if is_coin(node):  # the first 15 hex digits of SHA-256: 60 bits, a non-negative BIGINT
        text, _ = coin_parts(node)
        digits = exp.Substring(
            this=exp.Anonymous(this="sha256", expressions=[text]),
            start=exp.Literal.number(1),
            length=exp.Literal.number(15),
        )
        return exp.Cast(this=exp.DPipe(this=exp.Literal.string("0x"), expression=digits), to=dtype("BIGINT"))
    if is_keyed_hash(node):
        return exp.Anonymous(this="hash", expressions=node.expressions)
    if isinstance(node, exp.WidthBucket):
        return width_bucket_case(node)
    return node
