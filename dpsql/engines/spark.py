"""Spark: the engine for tables only a cluster can scan.

A local session (`master = "local[2]"`), a cluster master URL, or Spark Connect (`remote =
"sc://host:15002"`). Tables come from their `source` (Parquet or CSV files, a Parquet or Delta
directory) or, without one, from the metastore. ANSI mode is off and must stay off: then a
failing cast, a division by zero or an overflow gives NULL (or wraps) instead of an error,
which is what the rewrite's TRY asks for. Reading files by path from SQL is disabled; dpsql
only ever sends its own rewritten queries, which name the policy's tables.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Any, Mapping

from sqlglot import exp

from ..config import Policy, check_against_schema
from ..errors import OperationalError, PolicyError
from ..sql.build import dtype
from .base import (
    ENGINE_FAILURE_HINT,
    ResultSet,
    canonical_type,
    coin_parts,
    files_version,
    is_coin,
    is_keyed_hash,
    width_bucket_case,
)

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
# EXTRACT fields in Spark's terms, under both spellings a tree may carry (PostgreSQL's, as the
# analyst wrote them, and DuckDB's): dow / dayofweek is 0-6 from Sunday there, Spark's DOW 1-7.
_EXTRACT = {"DAYOFYEAR": "DOY", "ISODOW": "DOW_ISO"}
_DAY_OF_WEEK = ("DAYOFWEEK", "DOW", "WEEKDAY")


class SparkEngine:
    dialect = "spark"

    def __init__(self, policy: Policy):
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise PolicyError(f"{policy.path}: [engine] kind = \"spark\" needs pyspark",
                              hint="pip install 'dpsql[spark]' (pyspark and pyarrow; Java 17 or newer)") from None
        cfg = policy.engine
        for key in _FIXED:
            if key in cfg.conf and cfg.conf[key] != _FIXED[key]:
                raise PolicyError(f"{policy.path}: [engine] conf may not set {key}",
                                  hint=f"dpsql needs {key} = {_FIXED[key]}; remove it from conf")
        builder = SparkSession.builder.appName("dpsql")
        builder = builder.remote(cfg.remote) if cfg.remote else builder.master(cfg.master)
        local = not cfg.remote and (cfg.master or "").startswith("local")
        if local:  # the JVM's own choice of address, before it starts (the driver's settings follow)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for key, value in {**_DEFAULTS, **(_LOCAL if local else {}), **cfg.conf, **_FIXED}.items():
            builder = builder.config(key, value)
        self._policy = policy
        self._timeout = cfg.statement_timeout
        self._files: list[Path] = []
        self._tags = itertools.count()
        self._running: dict[int, str] = {}
        try:
            root = builder.getOrCreate()
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
        except PolicyError:
            raise
        except Exception as e:
            raise PolicyError(f"{policy.path}: cannot open the Spark engine: {type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                              hint="check [engine] master or remote, and the tables' sources") from None
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
                    df = df.select(*[df[n].cast(_spark_type(table.column(n.lower()).file_type())).alias(n)
                                     for n in df.columns])
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

    def prepare(self, tree: exp.Expression, *, owned: bool = False) -> str:
        """With ANSI mode off every expression is total, so TRY is the expression itself."""
        return tree.transform(_lower, copy=not owned).sql(dialect="spark", copy=False)  # copied unless owned

    def execute(self, sql: str) -> ResultSet:
        tag = f"dpsql-{next(self._tags)}"
        ident = threading.get_ident()
        self._spark.addTag(tag)
        self._running[ident] = tag
        timer = threading.Timer(self._timeout, self._spark.interruptTag, args=(tag,))
        timer.daemon = True
        timer.start()
        try:
            df = self._spark.sql(sql)
            names = list(df.columns)
            types = [canonical_type(f.dataType.simpleString(), "spark") for f in df.schema.fields]
            table = df.toArrow()
            columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        except Exception as e:
            if self._running.get(ident) is None or "cancel" in type(e).__name__.lower() or "cancel" in str(e)[:200].lower():
                raise OperationalError("canceling statement due to user request or statement timeout",
                                       sqlstate="57014") from None
            raise OperationalError(
                "the query failed while running in the engine", sqlstate="XX000",
                hint=ENGINE_FAILURE_HINT) from None
        finally:
            timer.cancel()
            self._running.pop(ident, None)
            self._spark.removeTag(tag)
        return ResultSet(names, types, columns)

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
            self._spark.interruptTag(tag)

    def data_version(self) -> str:
        """The source files' sizes and times (a metastore table's changes are not seen)."""
        return files_version(self._files)

    def close(self) -> None:
        """Stops the SparkContext when the process's last engine closes (it is shared)."""
        with _LIVE_LOCK:
            _LIVE[0] -= 1
            last = _LIVE[0] == 0
        if last:
            try:
                self._spark.stop()
            except Exception:
                pass


def _spark_type(name: str) -> str:
    return {"VARCHAR": "STRING"}.get(name, name)


def _lower(node: exp.Expression) -> Any:
    if isinstance(node, exp.Try):
        return node.this.transform(_lower, copy=True)
    if is_coin(node):  # the first 60 bits of SHA-256(salt || ':' || unit), as sql/rewrite.py defines it
        text, _ = coin_parts(node)
        digits = exp.Substring(this=exp.Anonymous(this="sha2", expressions=[text, exp.Literal.number(256)]),
                               start=exp.Literal.number(1), length=exp.Literal.number(15))
        return exp.Cast(this=exp.Anonymous(this="conv", expressions=[digits, exp.Literal.number(16), exp.Literal.number(10)]),
                        to=dtype("BIGINT"))
    if is_keyed_hash(node):
        # xxhash64's signed 64-bit result shifted onto [0, 2^64), as DPSQL_HASH promises
        hashed = exp.Anonymous(this="xxhash64", expressions=[a.copy() for a in node.expressions])
        return exp.Paren(this=exp.Add(this=exp.Cast(this=hashed, to=dtype("DECIMAL(20, 0)")),
                                      expression=exp.Literal.number(2**63)))
    if isinstance(node, exp.WidthBucket):
        return width_bucket_case(node).transform(_lower, copy=False)
    if isinstance(node, exp.Extract):
        name = node.this.name.upper()
        if name in _DAY_OF_WEEK:
            shifted = exp.Extract(this=exp.Var(this="DOW"), expression=node.expression.transform(_lower, copy=True))
            return exp.Paren(this=exp.Sub(this=shifted, expression=exp.Literal.number(1)))
        if name in _EXTRACT:
            return exp.Extract(this=exp.Var(this=_EXTRACT[name]), expression=node.expression.transform(_lower, copy=True))
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
        # Spark's date_trunc gives a TIMESTAMP in the session's zone; the others' has no zone
        return exp.Cast(this=node.copy(), to=dtype("TIMESTAMP_NTZ", dialect="spark"))
    return node
