"""The policy as values: tables, columns, budgets, privacy defaults, analysts, the engine (frozen
dataclasses), and the names of the kinds each may take."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import PolicyError
from ..sql.limits import QueryLimits

ROW_UNIT = "row"
MECHANISMS = ("laplace", "gaussian")
FILTERS = ("basic", "advanced", "whitehouse", "zcdp", "rdp", "gdp")
# The largest budget ε a filter's accounting can compute with (`accounting/filters.py`): gdp's
# μ_g takes e^ε in floats (overflow from 710), advanced's and rdp's admissions take e^ε of costs
# up to ε_g with 60 digits (overflow from about 2·10⁶). A policy asking for more is refused.
LARGEST_EPSILON: Mapping[str, Fraction] = MappingProxyType(
    {"gdp": Fraction(700), "advanced": Fraction(10**6), "rdp": Fraction(10**6)}
)


def past_ceiling(kind: str, epsilon: Fraction) -> Fraction | None:
    """The `kind` filter's LARGEST_EPSILON when `epsilon` is past it (a budget it cannot
    account for), else None."""
    largest = LARGEST_EPSILON.get(kind)
    return largest if largest is not None and epsilon > largest else None


SOURCE_FORMATS = {".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


@dataclass(frozen=True)
class ColumnPolicy:
    """Bounds and key domain of one column; both are public by declaration."""

    name: str
    lower: float | None = None
    upper: float | None = None
    keys: tuple[Any, ...] | None = None
    keys_from: tuple[str, str] | None = None
    dates: tuple[datetime.date, datetime.date] | None = None  # bounds of a DATE column
    type: str | None = None  # declared SQL type: the type of a private CSV column (see file_type)

    @property
    def bounded(self) -> bool:
        return self.lower is not None and self.upper is not None

    def file_type(self) -> str:
        """The type a private CSV/TSV column is read as: declared, or derived from the policy
        alone (date bounds: DATE; numeric bounds: DOUBLE; keys: their own type), never sniffed
        from the data, where one person's 42.5 among integers would change the schema."""
        if self.type is not None:
            return self.type
        if self.dates is not None:
            return "DATE"
        if self.bounded:
            return "DOUBLE"
        if self.keys is not None:
            kinds = {type(k) for k in self.keys}
            for kind, name in ((bool, "BOOLEAN"), (int, "BIGINT"), (datetime.date, "DATE")):
                if kinds == {kind}:
                    return name
            if kinds <= {int, float}:
                return "DOUBLE"
        return "VARCHAR"


FILE_TYPES = ("BOOLEAN", "SMALLINT", "INTEGER", "BIGINT", "DOUBLE", "VARCHAR", "DATE", "TIMESTAMP")


@dataclass(frozen=True)
class TablePolicy:
    name: str
    public: bool = False
    privacy_unit: str | None = None
    max_groups: int = 1
    max_rows: int = 1
    max_contributions: int | None = None  # rows per unit in a whole query, in any groups (Laplace)
    source: Path | None = None
    columns: Mapping[str, ColumnPolicy] = field(default_factory=dict)  # read-only (a MappingProxyType)

    def __post_init__(self) -> None:
        if not isinstance(self.columns, MappingProxyType):  # plans hold tables: nothing in one may change
            object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))

    @property
    def row_unit(self) -> bool:
        return self.privacy_unit == ROW_UNIT

    def column(self, name: str) -> ColumnPolicy:
        return self.columns.get(name) or ColumnPolicy(name)


@dataclass(frozen=True)
class BudgetPolicy:
    """A budget as declared: filter kind, totals, the part of delta reserved for releases'
    own delta (partition selection) under non-basic filters, and the RDP order."""

    filter: str
    epsilon: Fraction
    delta: Fraction
    delta_reserve: Fraction = Fraction(0)  # the parser puts the filter's default share (default_reserve)
    rdp_order: Fraction | None = None
    window: int | None = None  # seconds: the filter starts afresh every window (budget windows)
    lifetime_epsilon: Fraction | None = None  # a cap over all windows together, which never refreshes
    lifetime_delta: Fraction = Fraction(0)


@dataclass(frozen=True)
class PrivacyPolicy:
    filter: str = "basic"
    epsilon: Fraction = Fraction(1)
    delta: Fraction = Fraction(0)
    delta_reserve: Fraction | None = None  # as declared; None: each budget's default share
    rdp_order: Fraction | None = None
    window: int | None = None
    lifetime_epsilon: Fraction | None = None
    lifetime_delta: Fraction = Fraction(0)
    global_budget: BudgetPolicy | None = None
    query_epsilon: Fraction = Fraction(1, 10)
    query_delta: Fraction | None = None
    max_query_epsilon: Fraction | None = None  # the most one query (or batch) may spend; None: no cap
    mechanism: str = "laplace"
    confidence: float = 0.95
    bounds: str = "auto"  # a query's limits: chosen per query within the policy's (auto), or the policy's

    @property
    def default_query_delta(self) -> Fraction:
        """δ a query spends when it needs one (Gaussian noise, partition selection)."""
        if self.query_delta is not None:
            return self.query_delta
        return self.delta / 100


@dataclass(frozen=True)
class UserPolicy:
    name: str
    epsilon: Fraction
    delta: Fraction
    filter: str
    delta_reserve: Fraction = Fraction(0)
    rdp_order: Fraction | None = None
    window: int | None = None
    lifetime_epsilon: Fraction | None = None
    lifetime_delta: Fraction = Fraction(0)
    officer: bool = False  # a privacy officer: the web console shows them every analyst's budget and the audit log

    @property
    def budget(self) -> BudgetPolicy:
        return BudgetPolicy(
            self.filter,
            self.epsilon,
            self.delta,
            self.delta_reserve,
            self.rdp_order,
            self.window,
            self.lifetime_epsilon,
            self.lifetime_delta,
        )


ENGINES = ("duckdb", "postgres", "spark")


@dataclass(frozen=True)
class EngineConfig:
    """[engine]: where the private tables live. duckdb: embedded (source files or database);
    postgres: `url` and `schema`; spark: a local `master`, a cluster master URL or a Spark
    Connect `remote`, with extra Spark settings in `conf`."""

    kind: str = "duckdb"
    database: Path | None = None
    threads: int | None = None
    memory_limit: str | None = None
    url: str | None = None
    schema: str = "public"
    statement_timeout: float = 300.0
    master: str | None = None
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)  # Spark settings, or PostgreSQL `settings`
    scratch: str = "disk"  # duckdb: where weighted copies live, "disk" (a private temp dir) or "memory"
    scratch_url: str | None = None  # postgres: a second role that builds weighted tables (pg_weights.py)
    scratch_schema: str = "dpsql_scratch"  # postgres: where it builds them
    scratch_dir: Path | None = None  # spark on a cluster: weighted copies in a directory every executor sees


@dataclass(frozen=True)
class Policy:
    path: Path
    engine: EngineConfig
    privacy: PrivacyPolicy
    tables: Mapping[str, TablePolicy]
    users: Mapping[str, UserPolicy]
    ledger_path: Path
    ledger_url: str | None = None
    limits: QueryLimits = QueryLimits()
    # The ledger's identity file (its id and HMAC key): beside a SQLite ledger; for a shared
    # PostgreSQL ledger beside the policy, so every proxy serving this policy reads the same one.
    ledger_identity: Path | None = None
    synopses: Mapping[str, Any] = field(default_factory=dict)  # name -> synopses.spec.SynopsisSpec

    def table(self, name: str) -> TablePolicy | None:
        return self.tables.get(name.lower())

    def user(self, name: str) -> UserPolicy:
        try:
            return self.users[name]
        except KeyError:
            raise PolicyError(
                f'analyst "{name}" is not declared in {self.path}',
                sqlstate="28000",
                hint=f"Add a [users.{name}] section to the policy file.",
            ) from None
