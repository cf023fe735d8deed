"""Spark: the engine for tables only a cluster can scan.

A local session (`master = "local[2]"`), a cluster master URL, or Spark Connect (`remote =
"sc://host:15002"`). Tables come from their `source` (Parquet or CSV files, a Parquet or Delta
directory) or, without one, from the metastore. ANSI mode is off and must stay off: then a
failing cast, a division by zero or an overflow gives NULL (or wraps) instead of an error,
which is what the rewrite's TRY asks for. Reading files by path from SQL is disabled; dpsql
only ever sends its own rewritten queries, which name the policy's tables.

A session whose private tables all come from files gets weighted copies, as DuckDB's, where
its executors can all read what they write: a local session (the driver is the only
executor), or a cluster master with `scratch_dir`, a directory mounted at the same path on
the driver and every executor. Each unit's rows are counted and weighted in one job and
written as Parquet into the engine's private scratch directory (a 0700 directory under
scratch_dir, or under the system's temp dir), then read back, held in memory (MEMORY_ONLY: an
evicted or lost partition is read again from the same immutable files, never recomputed from
the live source, so a copy is one snapshot) and queried under a temporary view. The copy counts
only if the source files' version is the same after the write as before. A cluster without
scratch_dir, and Spark Connect (whose driver is another process's), bound per unit in every
query. The driver's own spark.local.dir (shuffle and result blocks it holds) is a private
directory too; executors' are their cluster manager's (a standalone worker's work dir).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from sqlglot import exp

from ..config import Policy, check_against_schema
from ..errors import OperationalError, PolicyError, unsupported
from ..guarantee.bounding import unit_rows, weighted_rows
from ..sql import build as b
from ..sql.build import dtype
from .base import (
    ENGINE_FAILURE_HINT,
    Capabilities,
    Engine,
    ResultSet,
    built_at_one_version,
    canonical_type,
    coin_parts,
    files_version,
    is_coin,
    is_keyed_hash,
    out_of_memory,
    register,
    width_bucket_case,
)
from .scratch import ScratchDir

# Settings dpsql's guarantees rest on: a policy's conf may not change them.
_FIXED = {
    "spark.sql.ansi.enabled": "false",  # errors become NULL: TRY for every expression
    "spark.sql.runSQLOnFiles": "false",  # no SELECT ... FROM parquet.`/any/path`
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
# Defaults a policy's conf may change. No web UI (it would listen on every interface and show
# the queries' plans); a local session's driver listens on loopback only.
_DEFAULTS = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false"}
_LOCAL = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
_LIVE = [0]  # engines open in this process: the last to close stops the shared SparkContext
_LIVE_LOCK = threading.Lock()
# A local SparkContext's spark.local.dir (shuffle files, blocks): private rows, so a private
# directory of the process's, swept by the next start after a crash. The JVM keeps the first
# context's local directories for its whole life (a later context in the same process writes
# there, whatever its own conf says, and would recreate a removed directory world-readable),
# so the directory lives as long as the process: emptied when a context stops, removed at exit.
_LOCAL_DIR: list[ScratchDir | None] = [None]
# EXTRACT fields in Spark's terms, under both spellings a tree may carry (PostgreSQL's, as the
# analyst wrote them, and DuckDB's): dow / dayofweek is 0-6 from Sunday there, Spark's DOW 1-7.
_EXTRACT = {"DAYOFYEAR": "DOY", "ISODOW": "DOW_ISO", "ISOYEAR": "YEAROFWEEK"}
_DAY_OF_WEEK = ("DAYOFWEEK", "DOW", "WEEKDAY")


@register("spark")
class SparkEngine(Engine):
    dialect = "spark"
    # Weighted copies over files only, where executors share the scratch directory (the module's
    # docstring); they hold the weight only, and a SUM
    # weights its row values (TotalCap's row form).
    capabilities = Capabilities(literal_sql=True)

    def __init__(self, policy: Policy):
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise PolicyError(
                f'{policy.path}: [engine] kind = "spark" needs pyspark',
                hint="pip install 'dpsql[spark]' (pyspark and pyarrow; Java 17 or newer)",
            ) from None
        cfg = policy.engine
        for key in _FIXED:
            if key in cfg.conf and cfg.conf[key] != _FIXED[key]:
                raise PolicyError(
                    f"{policy.path}: [engine] conf may not set {key}",
                    hint=f"dpsql needs {key} = {_FIXED[key]}; remove it from conf",
                )
        builder = SparkSession.builder.appName("dpsql")
        builder = builder.remote(cfg.remote) if cfg.remote else builder.master(cfg.master)
        local = not cfg.remote and (cfg.master or "").startswith("local")
        if local:  # the JVM's own choice of address, before it starts (the driver's settings follow)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if not cfg.remote:  # the driver is this process: its blocks and spills hold rows
            if "spark.local.dir" not in cfg.conf:
                with _LIVE_LOCK:
                    if _LOCAL_DIR[0] is None:
                        _LOCAL_DIR[0] = ScratchDir()
                    builder = builder.config("spark.local.dir", str(_LOCAL_DIR[0].path))
        for key, value in {**_DEFAULTS, **(_LOCAL if local else {}), **cfg.conf, **_FIXED}.items():
            builder = builder.config(key, value)
        self._policy = policy
        self._remote = bool(cfg.remote)
        self._timeout = cfg.statement_timeout
        self._files: list[Path] = []
        self._tags = itertools.count()
        self._running: dict[int, str] = {}
        self._scratch: ScratchDir | None = None
        self._copies: dict[str, tuple[str, Any, Path]] = {}  # view -> (data version, cached frame, files)
        self._copies_lock = threading.Lock()
        self._builds = itertools.count()
        try:
            root = builder.getOrCreate()
            if not cfg.remote and root.sparkContext.master != cfg.master:
                # one SparkContext per process: getOrCreate would hand back the other master's
                raise PolicyError(
                    f'{policy.path}: this process already runs Spark with master = "{root.sparkContext.master}"',
                    hint="open policies with one master per process",
                )
            # Its own session (temp views, settings) over the process's one SparkContext, so
            # that two policies in one process do not see each other's tables.
            self._spark = root if cfg.remote else root.newSession()
            for key, value in _FIXED.items():
                self._spark.conf.set(key, value)
            with _LIVE_LOCK:
                _LIVE[0] += 1
            if not cfg.remote:
                root.sparkContext.setLogLevel("ERROR")
            self._register()
            self._schema = self._introspect()
            if (local or (cfg.scratch_dir is not None and not cfg.remote)) and all(
                t.source is not None for t in policy.tables.values() if not t.public
            ):
                self._scratch = ScratchDir(None if local else str(cfg.scratch_dir))
                self.capabilities = replace(self.capabilities, weighted_copy=True)
        except PolicyError:
            raise
        except Exception as e:
            raise PolicyError(
                f"{policy.path}: cannot open the Spark engine: {type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                hint="check [engine] master or remote, and the tables' sources",
            ) from None
        check_against_schema(policy, self._schema)

    def _register(self) -> None:
        reader = self._spark.read
        for table in self._policy.tables.values():
            source = table.source
            if source is None:
                continue  # a metastore table, under its own name
            if source.is_dir():
                fmt = "delta" if (source / "_delta_log").is_dir() else "parquet"
                df = reader.format(fmt).load(str(source))
            elif source.suffix.lower() == ".parquet":
                df = reader.parquet(str(source))
            else:
                sep = "\t" if source.suffix.lower() == ".tsv" else ","
                # Private columns take the policy's types (ColumnPolicy.file_type), never the data's:
                # read as text, cast with ANSI off (a bad value is NULL).
                df = reader.options(header=True, inferSchema=table.public, sep=sep).csv(str(source))
                if not table.public:
                    df = df.select(
                        *[df[n].cast(_spark_type(table.column(n.lower()).file_type())).alias(n) for n in df.columns]
                    )
            df.createOrReplaceTempView(table.name)
            self._files.append(source)

    def _introspect(self) -> dict[str, dict[str, str]]:
        schema: dict[str, dict[str, str]] = {}
        for table in self._policy.tables:
            try:
                fields = self._spark.table(table).schema.fields
            except Exception:
                continue  # reported by check_against_schema with the fix
            schema[table] = {f.name.lower(): canonical_type(f.dataType.simpleString(), "spark") for f in fields}
        return schema

    # The Engine protocol -------------------------------------------------------------------
    def schema(self) -> Mapping[str, Mapping[str, str]]:
        return self._schema

    def sql_of(self, tree: exp.Expression, *, owned: bool = False) -> str:
        """With ANSI mode off every expression is total, so TRY is the expression itself."""
        return tree.transform(_lower, copy=not owned).sql(dialect="spark", copy=False)  # copied unless owned

    def literal_sql(self, literal: exp.Literal) -> str:
        """A literal as `sql_of` writes it, apart from any query (sql/slots.py splices a text's
        filter values into its shape's bounded query)."""
        return literal.sql(dialect="spark")

    @contextlib.contextmanager
    def _job(self, failure: OperationalError) -> Iterator[None]:
        """Spark jobs started inside run under a tag of their own, which a CancelRequest or the
        statement timeout interrupts; the engine's own message never reaches the client."""
        tag = f"dpsql-{next(self._tags)}"
        ident = threading.get_ident()
        self._add_tag(tag)
        self._running[ident] = tag
        timer = threading.Timer(self._timeout, self.interrupt, args=(ident,))  # 57014, as a cancel
        timer.daemon = True
        timer.start()
        try:
            yield
        except Exception as e:
            if (
                self._running.get(ident) is None
                or "cancel" in type(e).__name__.lower()
                or "cancel" in str(e)[:200].lower()
            ):
                raise OperationalError(
                    "canceling statement due to user request or statement timeout", sqlstate="57014"
                ) from None
            if "OutOfMemory" in type(e).__name__ or "java.lang.OutOfMemoryError" in str(e):  # read, never passed on
                raise out_of_memory() from None
            raise failure from None
        finally:
            timer.cancel()
            self._running.pop(ident, None)
            self._remove_tag(tag)

    # Job tags. Spark Connect's are the session's (addTag, interruptTag). A classic session's
    # SparkSession.addTag did not reach the job toArrow starts on a thread of its own (a statement
    # timeout let a query run on), while the SparkContext's job tags, local properties that
    # threads started later inherit, do.
    def _add_tag(self, tag: str) -> None:
        if self._remote:
            self._spark.addTag(tag)
        else:
            self._spark.sparkContext.addJobTag(tag)

    def _remove_tag(self, tag: str) -> None:
        if self._remote:
            self._spark.removeTag(tag)
        else:
            self._spark.sparkContext.removeJobTag(tag)

    def _cancel(self, tag: str) -> None:
        if self._remote:
            self._spark.interruptTag(tag)
        else:
            self._spark.sparkContext.cancelJobsWithTag(tag)

    def execute(self, sql: str) -> ResultSet:
        with self._job(
            OperationalError("the query failed while running in the engine", sqlstate="XX000", hint=ENGINE_FAILURE_HINT)
        ):
            df = self._spark.sql(sql)
            names = list(df.columns)
            types = [canonical_type(f.dataType.simpleString(), "spark") for f in df.schema.fields]
            table = df.toArrow()
            columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        return ResultSet(names, types, columns)

    def weighted_copy(
        self,
        table: str,
        unit: str,
        limit: int,
        bits: int,
        sums: Mapping[str, str] | None = None,
        per_unit: Mapping[str, str] | None = None,
    ) -> str:
        """The rows of `table` with __dpsql_n (its unit's rows in the whole table) and
        __dpsql_w (guarantee/bounding.py's row_weight), as of the current data version:
        written once per version as Parquet in the private scratch directory (see the module's
        docstring), under a view name no policy table has."""
        name = "__dpsql_w_" + hashlib.sha256(repr((table, limit, bits)).encode()).hexdigest()[:12]
        version = self.data_version()
        with self._copies_lock:
            held = self._copies.get(name)
            if held is None or held[0] != version:
                failure = OperationalError(
                    "could not prepare the table's contribution weights",
                    sqlstate="XX000",
                    hint="the engine's message is withheld; check the driver's memory and "
                    "the scratch directory's free space",
                )
                rows_sql = copy_sql(table, unit, limit, bits)

                def build() -> Path:  # the job reads the source twice (the rows, the counts)
                    files = self._scratch.file(f"{name}-{next(self._builds)}")
                    with self._job(failure):
                        self._spark.sql(rows_sql).write.parquet(files.as_uri())  # never the cluster's default FS
                    self._scratch.protect()
                    return files

                files, version = built_at_one_version(  # versions read afresh, as DuckDB's build does
                    build,
                    self.read_data_version,
                    self.read_data_version(),
                    lambda stale: shutil.rmtree(stale, ignore_errors=True),
                )
                from pyspark import StorageLevel

                with self._job(failure):
                    frame = self._spark.read.parquet(files.as_uri()).persist(StorageLevel.MEMORY_ONLY)
                    frame.createOrReplaceTempView(name)
                if held is not None:  # a query still reading the old copy keeps its files: dropped at close
                    held[1].unpersist()
                self._copies[name] = (version, frame, files)
        return name

    def describe(self, sql: str) -> tuple[list[str], list[str]]:
        """Names and types from Spark's analysis of the query (nothing is executed)."""
        try:
            fields = self._spark.sql(sql).schema.fields
        except Exception:
            raise OperationalError("the query could not be described", sqlstate="XX000") from None
        return [f.name for f in fields], [canonical_type(f.dataType.simpleString(), "spark") for f in fields]

    def interrupt(self, thread_ident: int) -> None:
        tag = self._running.pop(thread_ident, None)
        if tag is not None:
            self._cancel(tag)

    def read_data_version(self) -> str:
        """The source files' sizes and times (a metastore table's changes are not seen)."""
        return files_version(self._files)

    def close(self) -> None:
        """Drops the weighted copies (memory and files); stops the SparkContext when the
        process's last engine closes (it is shared)."""
        with self._copies_lock:
            for _, frame, _ in self._copies.values():
                with contextlib.suppress(Exception):
                    frame.unpersist()
            self._copies.clear()
        if self._scratch is not None:
            self._scratch.close()
        with _LIVE_LOCK:
            _LIVE[0] -= 1
            last = _LIVE[0] == 0
        if last:
            try:
                self._spark.stop()
            except Exception:
                pass
            with _LIVE_LOCK:
                if _LIVE[0] == 0 and _LOCAL_DIR[0] is not None:
                    _LOCAL_DIR[0].empty()


def copy_sql(table: str, unit: str, limit: int, bits: int) -> str:
    """The query whose rows a weighted copy holds: guarantee/bounding.py's weighted rows in Spark's
    SQL (one job reads the source twice: the rows, the counts)."""
    source = b.table(table, quote=True)
    return weighted_rows(source, b.subquery(unit_rows(source, unit), "u"), unit, limit, bits).sql(dialect="spark")


def _spark_type(name: str) -> str:
    return {"VARCHAR": "STRING"}.get(name, name)


def _half_away_from_zero(x: exp.Expression) -> exp.Expression:
    """ROUND(x) as the other engines round (half away from zero) without Spark's ROUND, which
    goes through BigDecimal for every row (a weighted SUM at 1M rows: 407 ms with it, 290 ms without)."""
    half = exp.Literal.number(0.5)
    down = exp.Neg(this=exp.Floor(this=exp.Add(this=exp.Neg(this=exp.Paren(this=x.copy())), expression=half)))
    return exp.Case(
        ifs=[exp.If(this=exp.LT(this=x.copy(), expression=exp.Literal.number(0)), true=down)],
        default=exp.Floor(this=exp.Add(this=x.copy(), expression=half)),
    )


def _lower(node: exp.Expression) -> Any:
    if (
        isinstance(node, exp.Cast)
        and node.to.is_type("bigint")
        and isinstance(node.this, exp.Round)
        and node.this.args.get("decimals") is None
    ):  # the rewrite's fixed-point values
        return exp.Cast(this=_half_away_from_zero(node.this.this.transform(_lower, copy=True)), to=node.to.copy())
    if isinstance(node, exp.Try):  # its parentheses kept: TRY(a OR b) AND c is not a OR b AND c
        inner = node.this.transform(_lower, copy=True)
        return exp.Paren(this=inner) if isinstance(inner, (exp.Binary, exp.Unary)) else inner
    if is_coin(node):  # the first 60 bits of SHA-256(salt || ':' || unit), as sql/rewrite.py defines it
        text, _ = coin_parts(node)
        digits = exp.Substring(
            this=exp.Anonymous(this="sha2", expressions=[text, exp.Literal.number(256)]),
            start=exp.Literal.number(1),
            length=exp.Literal.number(15),
        )
        return exp.Cast(
            this=exp.Anonymous(this="conv", expressions=[digits, exp.Literal.number(16), exp.Literal.number(10)]),
            to=dtype("BIGINT"),
        )
    if is_keyed_hash(node):
        # xxhash64's signed 64-bit result shifted onto [0, 2^64), as DPSQL_HASH promises
        hashed = exp.Anonymous(this="xxhash64", expressions=[a.copy() for a in node.expressions])
        return exp.Paren(
            this=exp.Add(this=exp.Cast(this=hashed, to=dtype("DECIMAL(20, 0)")), expression=exp.Literal.number(2**63))
        )
    if isinstance(node, exp.WidthBucket):
        return width_bucket_case(node).transform(_lower, copy=False)
    if isinstance(node, exp.Extract):
        name = node.this.name.upper()
        if name in _DAY_OF_WEEK:
            shifted = exp.Extract(this=exp.Var(this="DOW"), expression=node.expression.transform(_lower, copy=True))
            return exp.Paren(this=exp.Sub(this=shifted, expression=exp.Literal.number(1)))
        if name in _EXTRACT:
            return exp.Extract(
                this=exp.Var(this=_EXTRACT[name]), expression=node.expression.transform(_lower, copy=True)
            )
    if isinstance(node, exp.AtTimeZone):  # Spark's from/to_utc_timestamp depend on the operand's type
        raise unsupported(
            "AT TIME ZONE is not supported on the Spark engine",
            hint="nothing was charged; Spark's timestamps are in UTC already: drop AT TIME ZONE 'UTC'",
        )
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
        # Spark's date_trunc gives a TIMESTAMP in the session's zone; the others' has no zone
        return exp.Cast(this=node.copy(), to=dtype("TIMESTAMP_NTZ", dialect="spark"))
    return node
