"""What a backend offers the session: a dialect, the schema, execution of rewritten SQL, and the
optional parts it declares in its Capabilities."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import sqlglot
from sqlglot import exp

from ..errors import OperationalError
from ..sql.build import dtype

_PINS = threading.local()  # per thread: id(engine) -> [its version in the statement under way, or None]
BUILD_ATTEMPTS = 3  # weighted-copy builds while the source files keep changing, before giving up
T = TypeVar("T")


def built_at_one_version(
    build: Callable[[], T],
    data_version: Callable[[], str],
    version: str,
    discard: Callable[[T], None] = lambda made: None,
) -> tuple[T, str]:
    """`build()`, which reads its source more than once, and the data version it holds: a build
    counts only if the version is the same after it as before (else a unit's __dpsql_n could
    disagree with the rows it weights), and is done again, `discard`ing the stale one, up to
    BUILD_ATTEMPTS times; then the query is refused before anything is charged (40001)."""
    for _ in range(BUILD_ATTEMPTS):
        made = build()
        after = data_version()
        if after == version:
            return made, version
        discard(made)
        version = after
    raise OperationalError(
        "the table's files kept changing while its contribution weights were prepared",
        sqlstate="40001",
        hint="nothing was charged; send the query again once the data is written",
    )


@dataclass(frozen=True)
class ResultSet:
    """Columnar result of one engine query: names, engine type names, and one list per column."""

    names: Sequence[str]
    types: Sequence[str]
    columns: Sequence[Sequence[Any]]

    @property
    def row_count(self) -> int:
        return len(self.columns[0]) if self.columns else 0


@dataclass(frozen=True)
class Capabilities:
    """What an engine offers beyond the methods every engine has, declared once per engine (and
    per instance where it depends on the configuration: a PostgreSQL engine builds weighted
    tables only with a scratch role). The session reads these flags, never the engine's
    attributes, and calls the matching method only when its flag is set."""

    literal_sql: bool = False  # literal_sql(literal): a literal's SQL apart from any query (sql/slots.py)
    # execute(sql, stop) and execute_reused(sql, scope, stop) take a threading.Event checked once
    # the query is registered for interrupt() and before it starts, so a query stopped by a
    # refused charge (set, then interrupt()) never runs to its end, and interrupt() never reaches
    # a later query: such an engine runs a query while the ledger admits its charge; others after.
    overlaps_admission: bool = False
    execute_reused: bool = False  # execute_reused(sql, scope[, stop]): exact results kept per data version
    # weighted_copy(table, unit, limit, bits, sums, per_unit) -> a relation name holding the
    # table's rows with __dpsql_n (rows of the unit) and __dpsql_w (guarantee/bounding.py's
    # row_weight), kept per data version. Engines without it bound contributions with a
    # per-unit aggregation instead.
    weighted_copy: bool = False
    # The weighted copy also stores the columns `sums` names (column -> SQL over the row,
    # __dpsql_w and per_unit's aggregates over the unit's rows): ready-weighted values.
    weights_store_sums: bool = False
    copy_totals: bool = False  # copy_totals(copy): a one-row relation of a copy's column sums


class Engine:
    """The contract between the session and a backend: a dialect, the schema, execution of
    dpsql-built SQL, and the optional parts its `capabilities` declare (engines/__init__.py
    registers each engine under the name a policy's [engine] kind gives)."""

    dialect: str
    capabilities: Capabilities = Capabilities()

    def schema(self) -> Mapping[str, Mapping[str, str]]:
        """table -> column -> type name in DuckDB's spelling (canonical_type), so analysis and
        the wire codec read one vocabulary whatever the backend; the policy's tables only."""
        raise NotImplementedError

    def sql_of(self, tree: exp.Expression, *, owned: bool = False) -> str:
        """The neutral tree (rewrite's, or a public query's) as this engine's SQL, with dpsql's
        TRY and DPSQL_HASH lowered; raises a refusal when the engine cannot run it safely, and
        is called before anything is charged. `owned`: the caller hands the tree over (a tree
        rewrite() has just built), so it is lowered and generated in place instead of copied
        first (a copy of a bounded query's tree costs about as much as generating its SQL)."""
        raise NotImplementedError

    def execute(self, sql: str) -> ResultSet:
        """Run a query built by dpsql (never the analyst's text)."""
        raise NotImplementedError

    def describe(self, sql: str) -> tuple[list[str], list[str]]:
        """Names and types of a query's result, without executing it."""
        raise NotImplementedError

    def interrupt(self, thread_ident: int) -> None:
        """Cancel the query running on that thread, if any."""
        raise NotImplementedError

    def data_version(self) -> str:
        """Changes whenever the underlying data may have changed (keys the answer cache, the
        plan cache, weighted copies and reused results). Within `one_version()`, the version
        first read in it on this thread: a statement reads it once (a DuckDB file source costs
        a stat() a file, PostgreSQL a query), however many of its steps ask."""
        pins = getattr(_PINS, "engines", None)
        pin = pins.get(id(self)) if pins else None
        if pin is None:
            return self.read_data_version()
        if pin[0] is None:
            pin[0] = self.read_data_version()
        return pin[0]

    @contextlib.contextmanager
    def one_version(self) -> Iterator[None]:
        """One statement (on this thread): data_version() is read once, when first asked, and
        answers that version until the block ends; a change of the data is seen by the next
        block. Nested blocks share the outermost's version. A weighted copy's build still
        compares versions read afresh (read_data_version) before and after it."""
        pins = _PINS.__dict__.setdefault("engines", {})
        key = id(self)
        if key in pins:
            yield
            return
        pins[key] = [None]
        try:
            yield
        finally:
            del pins[key]

    def read_data_version(self) -> str:
        """The data version, read now (the engine's own: files' sizes and times, table statistics)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # Optional parts: called only where `capabilities` declares them.
    def literal_sql(self, literal: exp.Literal) -> str:
        raise NotImplementedError

    def execute_reused(self, sql: str, scope: str, stop: threading.Event | None = None) -> ResultSet:
        raise NotImplementedError

    def weighted_copy(
        self,
        table: str,
        unit: str,
        limit: int,
        bits: int,
        sums: Mapping[str, str] | None = None,
        per_unit: Mapping[str, str] | None = None,
    ) -> str:
        raise NotImplementedError

    def copy_totals(self, copy: str) -> str | None:
        raise NotImplementedError


_DUCKDB_NAMES = {"INT": "INTEGER", "TEXT": "VARCHAR", "REAL": "FLOAT", "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}


# An engine failure's hint: the session adds whether a charge stays (only when one was recorded).
ENGINE_FAILURE_HINT = "the engine's own message is withheld because it may quote private values"


def out_of_memory() -> OperationalError:
    """The engine ran out of memory (53200): its own message is withheld, as every engine
    message is; that it happened is all the client learns."""
    return OperationalError(
        "out of memory: the query needed more memory than the engine may use",
        sqlstate="53200",
        hint="narrow the query (fewer groups or joined tables, a filter), or ask the operator to "
        "raise the engine's memory limit ([engine] memory_limit, or work_mem)",
    )


def statement_timeout() -> OperationalError:
    return OperationalError(
        "canceling statement due to statement timeout",
        sqlstate="57014",
        hint="narrow the query, or ask the operator to raise [engine] statement_timeout",
    )


def canonical_type(type_name: str, dialect: str) -> str:
    """An engine's type name in the one spelling analysis and the wire codec read: DuckDB's
    (INTEGER, DOUBLE, VARCHAR, DATE, DECIMAL(p, s)...), see Engine.schema."""
    try:
        name = exp.DataType.build(type_name, dialect=dialect).sql(dialect="duckdb")
    except (sqlglot.errors.ParseError, ValueError):
        return type_name.upper()
    return _DUCKDB_NAMES.get(name, name)


def is_keyed_hash(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "DPSQL_HASH"


def is_coin(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "DPSQL_COIN"


def coin_parts(node: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    """DPSQL_COIN(unit, salt): the text SHA-256 is taken of, salt || ':' || unit, and the salt."""
    unit, salt = node.expressions
    text = exp.DPipe(
        this=exp.DPipe(this=salt.copy(), expression=exp.Literal.string(":")),
        expression=exp.Cast(this=unit.copy(), to=dtype("VARCHAR")),
    )
    return text, salt


def width_bucket_case(node: exp.WidthBucket) -> exp.Expression:
    """width_bucket(x, lo, hi, n) as PostgreSQL defines it for lo < hi: 0 below lo, n + 1 from
    hi on, else 1 + floor((x - lo) * n / (hi - lo))."""
    x, lo, hi, n = (node.args[k] for k in ("this", "min_value", "max_value", "num_buckets"))
    inside = exp.Add(
        this=exp.Floor(
            this=exp.Div(
                this=exp.Mul(this=exp.Paren(this=exp.Sub(this=x.copy(), expression=lo.copy())), expression=n.copy()),
                expression=exp.Paren(this=exp.Sub(this=hi.copy(), expression=lo.copy())),
            )
        ),
        expression=exp.Literal.number(1),
    )
    return exp.Case(
        ifs=[
            exp.If(this=exp.LT(this=x.copy(), expression=lo.copy()), true=exp.Literal.number(0)),
            exp.If(
                this=exp.GTE(this=x.copy(), expression=hi.copy()),
                true=exp.Add(this=n.copy(), expression=exp.Literal.number(1)),
            ),
        ],
        default=exp.Cast(this=inside, to=dtype("BIGINT")),
    )


def quote(name: str) -> str:
    """An identifier quoted as DuckDB and PostgreSQL read it."""
    return '"' + name.replace('"', '""') + '"'


def files_version(paths: Iterable[Path]) -> str:
    """Changes when any of the files (or any file under a directory) changes: size and mtime.
    A file costs one stat: every query asks (twice), so this is on the hot path."""
    h = hashlib.sha256()
    for p in paths:
        st = _stat(p)
        files = [(f, _stat(f)) for f in sorted(p.rglob("*"))] if st and stat.S_ISDIR(st.st_mode) else [(p, st)]
        for f, st in files:
            h.update((f"{f}:missing;" if st is None else f"{f}:{st.st_mtime_ns}:{st.st_size};").encode())
    return h.hexdigest()[:16]


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


ENGINES: dict[str, type[Engine]] = {}  # [engine] kind -> the engine class (engines/__init__.py imports them all)
E = TypeVar("E", bound=type[Engine])


def register(kind: str) -> Callable[[E], E]:
    """Class decorator: the engine a policy's `[engine] kind = "<kind>"` opens."""

    def add(cls: E) -> E:
        ENGINES[kind] = cls
        return cls

    return add
