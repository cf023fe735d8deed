"""The policy file (TOML): what may be queried, with which bounds, by whom, on what budget.

The policy is public information (DESIGN §1): everything here may shape answers and error
messages. Loading it is pure validation; checks that need the data's schema (does the column
exist?) take the schema as an argument, so nothing here touches the database.
"""

from __future__ import annotations

import datetime
import math
import re
import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import PolicyError
from .sql.limits import QueryLimits
from .synopses.spec import parse_synopses

ROW_UNIT = "row"
MECHANISMS = ("laplace", "gaussian")
FILTERS = ("basic", "advanced", "whitehouse", "zcdp", "rdp", "gdp")
SOURCE_FORMATS = {".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


def exact(value: float | int | str | Fraction) -> Fraction:
    """The exact rational a human meant: 0.001 is 1/1000, not the nearest binary double.

    Budgets are summed exactly (DESIGN §5); reading a float through its shortest decimal
    representation is what makes a thousand queries of 0.001 add up to exactly 1.
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not finite")
        return Fraction(repr(value))
    return Fraction(value)


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
    columns: Mapping[str, ColumnPolicy] = field(default_factory=dict)

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
        return BudgetPolicy(self.filter, self.epsilon, self.delta, self.delta_reserve, self.rdp_order,
                            self.window, self.lifetime_epsilon, self.lifetime_delta)


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


class _Reader:
    """Reads one section of the TOML document, naming the place of every mistake."""

    def __init__(self, path: Path, where: str, data: Mapping[str, Any]):
        self.path, self.where, self.data = path, where, data

    def fail(self, what: str, fix: str) -> PolicyError:
        return PolicyError(f"{self.path}: {self.where}: {what}", hint=fix)

    def unknown_keys(self, allowed: Iterable[str]) -> None:
        extra = sorted(set(self.data) - set(allowed))
        if extra:
            raise self.fail(
                f"unknown key {extra[0]!r}",
                f"allowed keys here are: {', '.join(sorted(allowed))}",
            )

    def number(self, key: str, default: Any = None, *, positive: bool = False,
               minimum: float | None = None, maximum: float | None = None) -> Fraction | None:
        if key not in self.data:
            return default
        raw = self.data[key]
        try:
            value = exact(raw)
        except (ValueError, TypeError):
            raise self.fail(f"{key} = {raw!r} is not a finite number", f"write {key} as a number, e.g. {key} = 1.0") from None
        if positive and value <= 0:
            raise self.fail(f"{key} = {raw} must be greater than 0", f"set {key} to a positive number")
        if minimum is not None and value < minimum:
            raise self.fail(f"{key} = {raw} is below {minimum}", f"set {key} to at least {minimum}")
        if maximum is not None and value > maximum:
            raise self.fail(f"{key} = {raw} is above {maximum}", f"set {key} to at most {maximum}")
        return value

    def integer(self, key: str, default: int) -> int:
        raw = self.data.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise self.fail(f"{key} = {raw!r} must be a whole number of at least 1", f"for example {key} = {default}")
        return raw

    def choice(self, key: str, default: str, options: Iterable[str]) -> str:
        raw = self.data.get(key, default)
        options = tuple(options)
        if raw not in options:
            raise self.fail(f"{key} = {raw!r} is not one of {', '.join(options)}", f"set {key} to one of: {', '.join(options)}")
        return raw


def load_policy(path: str | Path, *, ledger_path: str | Path | None = None) -> Policy:
    """Read and validate a policy file; raise PolicyError naming the place and the fix."""
    path = Path(path).resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"cannot read policy file {path}: {e.strerror}", hint="Pass --policy with the path of a TOML policy file.") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{path}: not valid TOML: {e}", hint="Fix the TOML syntax at the position shown.") from None
    return parse_policy(doc, path, ledger_path=ledger_path)


def parse_policy(doc: Mapping[str, Any], path: Path, *, ledger_path: str | Path | None = None) -> Policy:
    base = path.parent
    top = _Reader(path, "top level", doc)
    top.unknown_keys({"engine", "privacy", "tables", "users", "ledger", "limits", "synopses"})

    engine = _parse_engine(_Reader(path, "[engine]", _section(top, "engine")), base)
    privacy = _parse_privacy(_Reader(path, "[privacy]", _section(top, "privacy")))

    tables_raw = _section(top, "tables")
    if not tables_raw:
        raise top.fail("no [tables.NAME] sections", "declare at least one table, e.g. [tables.patients] with privacy_unit = \"patient_id\"")
    tables: dict[str, TablePolicy] = {}
    for name, raw in tables_raw.items():
        if not isinstance(raw, dict):
            raise top.fail(f"tables.{name} is not a table", f"write it as a [tables.{name}] section")
        table = _parse_table(_Reader(path, f"[tables.{name}]", raw), name, base)
        if table.name in tables:
            raise top.fail(f"table {name!r} is declared twice (names are case-insensitive)", "keep one declaration")
        if engine.kind == "postgres" and table.source is not None:
            raise _Reader(path, f"[tables.{name}]", raw).fail(
                "with [engine] kind = \"postgres\" the table lives in PostgreSQL and takes no source",
                f'remove source, and create the table {name} in the schema [engine] schema names')
        if table.source is None and engine.database is None and engine.kind == "duckdb":
            raise _Reader(path, f"[tables.{name}]", raw).fail(
                "the table has no source and [engine] has no database",
                f'add source = "{name}.parquet" to [tables.{name}], or database = "file.duckdb" to [engine]',
            )
        tables[table.name] = table
    _check_key_references(path, tables)

    users: dict[str, UserPolicy] = {}
    for name, raw in _section(top, "users").items():
        r = _Reader(path, f"[users.{name}]", raw if isinstance(raw, dict) else {})
        if not isinstance(raw, dict):
            raise r.fail("is not a table", f"write it as a [users.{name}] section")
        r.unknown_keys({"epsilon", "delta", "filter", "delta_reserve", "rdp_order", "officer"} | WINDOW_KEYS)
        b = _parse_budget(r, BudgetPolicy(privacy.filter, privacy.epsilon, privacy.delta, privacy.delta_reserve,
                                          privacy.rdp_order, privacy.window, privacy.lifetime_epsilon,
                                          privacy.lifetime_delta))
        officer = raw.get("officer", False)
        if not isinstance(officer, bool):
            raise r.fail(f"officer = {officer!r} must be true or false",
                         "write officer = true for a privacy officer, who sees every analyst in the web console")
        users[name] = UserPolicy(name, b.epsilon, b.delta, b.filter, b.delta_reserve, b.rdp_order, b.window,
                                 b.lifetime_epsilon, b.lifetime_delta, officer)

    ledger_section = _section(top, "ledger")
    lr = _Reader(path, "[ledger]", ledger_section)
    lr.unknown_keys({"path", "url", "identity"})
    url = ledger_section.get("url")
    if url is not None and not (isinstance(url, str) and url.startswith(("postgresql://", "postgres://"))):
        raise lr.fail(f"url = {url!r} is not a PostgreSQL URL", 'write url = "postgresql://user@host/dbname"')
    if ledger_path is not None:
        ledger = Path(ledger_path)
    elif "path" in ledger_section:
        ledger = (base / ledger_section["path"]).resolve()
    else:
        ledger = base / f"{path.stem}.ledger.sqlite"
    if "identity" in ledger_section:
        identity = (base / str(ledger_section["identity"])).resolve()
    elif url is not None:
        identity = base / f"{path.stem}.ledger.id"
    else:
        identity = Path(f"{ledger}.id")
    limits = _parse_limits(_Reader(path, "[limits]", _section(top, "limits")))
    synopses = parse_synopses(doc.get("synopses"), path, tables, users)
    return Policy(path=path, engine=engine, privacy=privacy, tables=tables, users=users, ledger_path=ledger,
                  ledger_url=url, limits=limits, ledger_identity=identity, synopses=synopses)


def _parse_limits(r: _Reader) -> QueryLimits:
    """[limits]: what one statement may cost to read and plan (sql/limits.py)."""
    default = QueryLimits()
    names = ("max_query_bytes", "max_tokens", "max_nodes", "max_in_list", "max_depth", "max_expression_depth",
             "max_join_rows")
    r.unknown_keys(set(names) | {"planning_seconds"})
    values = {name: r.integer(name, getattr(default, name)) for name in names}
    seconds = float(r.number("planning_seconds", Fraction(default.planning_seconds), positive=True))
    return QueryLimits(**values, planning_seconds=seconds)


def _section(reader: _Reader, key: str) -> Mapping[str, Any]:
    value = reader.data.get(key, {})
    if not isinstance(value, dict):
        raise reader.fail(f"{key} must be a table", f"write it as a [{key}] section")
    return value


def _parse_engine(r: _Reader, base: Path) -> EngineConfig:
    kind = r.choice("kind", "duckdb", ENGINES)
    allowed = {"duckdb": {"database", "threads", "memory_limit", "scratch", "statement_timeout"},
               "postgres": {"url", "schema", "statement_timeout", "settings", "scratch_url", "scratch_schema"},
               "spark": {"master", "remote", "conf", "statement_timeout", "scratch_dir"}}[kind]
    r.unknown_keys(allowed | {"kind"})
    timeout = float(r.number("statement_timeout", Fraction(300), positive=True))
    if kind == "postgres":
        url = r.data.get("url")
        if not (isinstance(url, str) and url.startswith(("postgresql://", "postgres://"))):
            raise r.fail("kind = \"postgres\" needs url = \"postgresql://...\"",
                         'for example url = "postgresql://dpsql_reader@db.internal/clinic" (a role that can only read)')
        schema = r.data.get("schema", "public")
        if not isinstance(schema, str) or not schema:
            raise r.fail(f"schema = {schema!r} must be a schema name", 'for example schema = "public"')
        settings = r.data.get("settings", {})
        if not isinstance(settings, dict) or not all(isinstance(v, (str, int, float)) for v in settings.values()):
            raise r.fail("settings must be a table of PostgreSQL settings", 'for example settings = { work_mem = "256MB" }')
        fixed = sorted(set(settings) & {"search_path", "statement_timeout", "default_transaction_read_only",
                                        "transaction_read_only", "role", "session_authorization"})
        if fixed:
            raise r.fail(f"settings may not set {fixed[0]}", "dpsql fixes it (schema and statement_timeout are "
                                                             "[engine] keys of their own)")
        scratch_url = r.data.get("scratch_url")
        if scratch_url is not None and not (isinstance(scratch_url, str)
                                            and scratch_url.startswith(("postgresql://", "postgres://"))):
            raise r.fail("scratch_url must be a postgresql:// URL",
                         'for example scratch_url = "postgresql://dpsql_scratch@db.internal/clinic": a role of its own '
                         "that may create tables in scratch_schema and read the policy's tables")
        scratch_schema = r.data.get("scratch_schema", "dpsql_scratch")
        if not isinstance(scratch_schema, str) or not scratch_schema or scratch_schema == schema:
            raise r.fail(f"scratch_schema = {scratch_schema!r} must be a schema name other than schema",
                         'for example scratch_schema = "dpsql_scratch"')
        return EngineConfig(kind=kind, url=url, schema=schema, statement_timeout=timeout,
                            conf={str(k): str(v) for k, v in settings.items()}, scratch_url=scratch_url,
                            scratch_schema=scratch_schema)
    if kind == "spark":
        master, remote = r.data.get("master"), r.data.get("remote")
        if master is not None and remote is not None:
            raise r.fail("give master or remote, not both", 'master = "local[2]", or remote = "sc://host:15002"')
        for key, value in (("master", master), ("remote", remote)):
            if value is not None and not isinstance(value, str):
                raise r.fail(f"{key} must be a string", 'for example master = "local[2]"')
        conf = r.data.get("conf", {})
        if not isinstance(conf, dict) or not all(isinstance(v, (str, int, float, bool)) for v in conf.values()):
            raise r.fail("conf must be a table of Spark settings", 'for example conf = { "spark.driver.memory" = "4g" }')
        scratch_dir = r.data.get("scratch_dir")
        if scratch_dir is not None and (remote is not None or not isinstance(scratch_dir, str) or not scratch_dir):
            raise r.fail("scratch_dir must be a directory path, with master (not remote)",
                         'for example scratch_dir = "/shared/dpsql-scratch": mounted at this path on the driver '
                         "and every executor (weighted copies are written and read there)")
        return EngineConfig(kind=kind, master=master if master or remote else "local[*]", remote=remote,
                            conf={str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()},
                            statement_timeout=timeout,
                            scratch_dir=None if scratch_dir is None else (base / scratch_dir).resolve())
    database = r.data.get("database")
    db_path = None
    if database is not None:
        db_path = (base / database).resolve()
        if not db_path.is_file():
            raise r.fail(f"database file {db_path} does not exist", "fix the path (it is relative to the policy file)")
    threads = r.data.get("threads")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise r.fail(f"threads = {threads!r} must be a whole number of at least 1", "remove it to use every core")
    memory = r.data.get("memory_limit")
    if memory is not None and not isinstance(memory, str):
        raise r.fail("memory_limit must be a string", 'for example memory_limit = "4GB"')
    scratch = r.choice("scratch", "disk", ("disk", "memory"))
    return EngineConfig(kind=kind, database=db_path, threads=threads, memory_limit=memory, scratch=scratch,
                        statement_timeout=timeout)


RESERVE_SHARE = Fraction(1, 10)  # of delta, set aside by default for releases with a delta of their own


def default_reserve(kind: str, delta: Fraction) -> Fraction:
    """Under zcdp, rdp and whitehouse, releases that carry their own delta (partition selection)
    spend a reserve kept out of the filter's conversion: by default a tenth of delta, so that
    they are admitted on a fresh budget without any setting."""
    return delta * RESERVE_SHARE if kind in ("zcdp", "rdp", "whitehouse") and delta > 0 else Fraction(0)


def _parse_budget(r: _Reader, default: BudgetPolicy) -> BudgetPolicy:
    """filter/epsilon/delta/delta_reserve/rdp_order of one budget, checked for its filter."""
    kind = r.choice("filter", default.filter, FILTERS)
    epsilon = r.number("epsilon", default.epsilon, positive=True)
    delta = r.number("delta", default.delta, minimum=0, maximum=1)
    if delta >= 1:
        raise r.fail(f"delta = {float(delta)} must be below 1", "use a small delta such as 1e-6")
    reserve = r.number("delta_reserve", default.delta_reserve, minimum=0)
    if reserve is None:
        reserve = default_reserve(kind, delta)
    order = r.number("rdp_order", default.rdp_order, minimum=1)
    if kind != "basic" and kind != "gdp" and reserve >= delta and delta > 0:
        raise r.fail(f"delta_reserve = {float(reserve)} must be below delta = {float(delta)}",
                     "keep most of delta for the filter, e.g. delta_reserve = delta / 10")
    if kind in ("advanced", "whitehouse", "zcdp", "rdp", "gdp") and delta <= 0:
        raise r.fail(f"the {kind} filter needs delta > 0", "set delta, e.g. delta = 1e-6, or use filter = \"basic\"")
    if kind == "advanced" and delta >= Fraction(1, 3):
        raise r.fail("the advanced filter needs delta below 1/e", "use a small delta such as 1e-6")
    if kind == "rdp" and order is not None and order <= 1:
        raise r.fail("rdp_order must be above 1", "for example rdp_order = 8")
    window = _window(r, default.window)
    lifetime_epsilon = r.number("lifetime_epsilon", default.lifetime_epsilon, positive=True)
    lifetime_delta = r.number("lifetime_delta", default.lifetime_delta, minimum=0, maximum=1)
    if lifetime_epsilon is not None and window is None:
        raise r.fail("lifetime_epsilon caps a budget that refreshes, but no window is set",
                     'set window = "30d" (or remove lifetime_epsilon: without a window, epsilon is the lifetime budget)')
    if lifetime_epsilon is not None and (lifetime_epsilon < epsilon or lifetime_delta < delta):
        raise r.fail("lifetime_epsilon and lifetime_delta must be at least one window's epsilon and delta",
                     f"for example lifetime_epsilon = {float(epsilon * 12):g}")
    return BudgetPolicy(kind, epsilon, delta, reserve, order, window, lifetime_epsilon,
                        lifetime_delta if lifetime_epsilon is not None else Fraction(0))


WINDOW_KEYS = {"window", "lifetime_epsilon", "lifetime_delta"}
_WINDOW_WORDS = {"hourly": 3600, "daily": 86400, "weekly": 7 * 86400, "monthly": 30 * 86400}
_WINDOW_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def _window(r: _Reader, default: int | None) -> int | None:
    """window = "30d" (h, d or w; or hourly, daily, weekly, monthly = 30 days): in seconds."""
    raw = r.data.get("window")
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in _WINDOW_WORDS:
        return _WINDOW_WORDS[text]
    m = re.fullmatch(r"(\d+)\s*([hdw])", text)
    if not isinstance(raw, str) or m is None or int(m.group(1)) == 0:
        raise r.fail(f"window = {raw!r} is not a duration", 'write window = "30d" (h, d or w), or "daily", "weekly", "monthly"')
    return int(m.group(1)) * _WINDOW_UNITS[m.group(2)]


def _parse_privacy(r: _Reader) -> PrivacyPolicy:
    r.unknown_keys({"filter", "epsilon", "delta", "query_epsilon", "query_delta", "max_query_epsilon", "mechanism",
                    "confidence", "delta_reserve", "rdp_order", "global", "bounds"} | WINDOW_KEYS)
    budget = _parse_budget(r, BudgetPolicy("basic", Fraction(1), Fraction(0), None))
    query_epsilon = r.number("query_epsilon", min(Fraction(1, 10), budget.epsilon), positive=True)
    query_delta = r.number("query_delta", None, minimum=0, maximum=1)
    max_query_epsilon = r.number("max_query_epsilon", None, positive=True)
    if max_query_epsilon is not None and max_query_epsilon < query_epsilon:
        raise r.fail(f"max_query_epsilon = {float(max_query_epsilon):g} is below query_epsilon = {float(query_epsilon):g}",
                     "a query's default epsilon must be within the cap: lower query_epsilon or raise max_query_epsilon")
    confidence = r.number("confidence", Fraction(95, 100), positive=True)
    if confidence >= 1:
        raise r.fail("confidence must be below 1", "for example confidence = 0.95")
    global_budget = None
    if "global" in r.data:
        g = r.data["global"]
        gr = _Reader(r.path, "[privacy.global]", g if isinstance(g, dict) else {})
        if not isinstance(g, dict):
            raise gr.fail("is not a table", "write it as a [privacy.global] section")
        gr.unknown_keys({"filter", "epsilon", "delta", "delta_reserve", "rdp_order"} | WINDOW_KEYS)
        if "epsilon" not in g:
            raise gr.fail("missing epsilon", "the global budget bounds all analysts together: set epsilon")
        global_budget = _parse_budget(gr, BudgetPolicy(budget.filter, budget.epsilon, budget.delta,
                                                       None, budget.rdp_order, budget.window))
    return PrivacyPolicy(
        filter=budget.filter,
        epsilon=budget.epsilon,
        delta=budget.delta,
        delta_reserve=r.number("delta_reserve", None, minimum=0),
        rdp_order=budget.rdp_order,
        window=budget.window,
        lifetime_epsilon=budget.lifetime_epsilon,
        lifetime_delta=budget.lifetime_delta,
        global_budget=global_budget,
        query_epsilon=query_epsilon,
        query_delta=query_delta,
        max_query_epsilon=max_query_epsilon,
        mechanism=r.choice("mechanism", "laplace", MECHANISMS),
        confidence=float(confidence),
        bounds=r.choice("bounds", "auto", ("auto", "policy")),
    )


def _parse_table(r: _Reader, name: str, base: Path) -> TablePolicy:
    r.unknown_keys({"public", "privacy_unit", "max_groups", "max_rows", "max_contributions", "source", "columns"})
    public = r.data.get("public", False)
    if not isinstance(public, bool):
        raise r.fail("public must be true or false", "write public = true for a table with no private data")
    unit = r.data.get("privacy_unit")
    if public and unit is not None:
        raise r.fail("a public table has no privacy unit", "remove privacy_unit, or remove public = true")
    if not public:
        if unit is None:
            raise r.fail(
                "missing privacy_unit",
                'name the column that identifies a person (privacy_unit = "patient_id"), '
                'or privacy_unit = "row" if every row is a different person, or public = true',
            )
        if not isinstance(unit, str) or not unit:
            raise r.fail(f"privacy_unit = {unit!r} must be a column name or \"row\"", 'for example privacy_unit = "patient_id"')
    source = r.data.get("source")
    source_path = None
    if source is not None:
        source_path = (base / source).resolve()
        if source_path.suffix.lower() not in SOURCE_FORMATS:
            raise r.fail(f"source {source!r} has an unknown format", f"use one of: {', '.join(SOURCE_FORMATS)}")
        if not source_path.exists():
            raise r.fail(f"source file {source_path} does not exist", "fix the path (it is relative to the policy file)")
    columns_raw = r.data.get("columns", {})
    if not isinstance(columns_raw, dict):
        raise r.fail("columns must be a table", "write columns.NAME = { lower = 0, upper = 100 }")
    columns: dict[str, ColumnPolicy] = {}
    for col, spec in columns_raw.items():
        columns[col.lower()] = _parse_column(_Reader(r.path, f"{r.where} column {col!r}", spec if isinstance(spec, dict) else {"?": spec}), col)
    return TablePolicy(
        name=name.lower(),
        public=public,
        privacy_unit=None if public else (unit if unit == ROW_UNIT else unit.lower()),
        max_groups=r.integer("max_groups", 1),
        max_rows=r.integer("max_rows", 1),
        max_contributions=r.integer("max_contributions", 1) if "max_contributions" in r.data else None,
        source=source_path,
        columns=columns,
    )


def _parse_column(r: _Reader, name: str) -> ColumnPolicy:
    r.unknown_keys({"lower", "upper", "keys", "keys_from", "type"})
    declared = r.data.get("type")
    if declared is not None:
        if not isinstance(declared, str) or not (declared.upper() in FILE_TYPES or _DECIMAL.fullmatch(declared.upper())):
            raise r.fail(f"type = {declared!r} is not a supported column type",
                         f"use one of {', '.join(FILE_TYPES)} or DECIMAL(p, s)")
        declared = declared.upper().replace(" ", "")
    lower, upper = r.data.get("lower"), r.data.get("upper")
    if (lower is None) != (upper is None):
        raise r.fail("has only one of lower and upper", "declare both bounds, e.g. { lower = 0, upper = 100 }")
    dates = None
    if isinstance(lower, datetime.date) or isinstance(upper, datetime.date):
        if not all(isinstance(v, datetime.date) and not isinstance(v, datetime.datetime) for v in (lower, upper)):
            raise r.fail("date bounds must both be dates", "for example { lower = 2023-01-01, upper = 2024-12-31 }")
        if lower > upper:
            raise r.fail(f"lower bound {lower} is after upper bound {upper}", "swap them")
        dates, lower, upper = (lower, upper), None, None
    elif lower is not None:
        for key, value in (("lower", lower), ("upper", upper)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise r.fail(f"{key} = {value!r} is not a finite number", "bounds must be finite numbers")
        if lower > upper:
            raise r.fail(f"lower bound {lower} is greater than upper bound {upper}", f"swap them: {{ lower = {upper}, upper = {lower} }}")
    keys = r.data.get("keys")
    keys_from = r.data.get("keys_from")
    if keys is not None and keys_from is not None:
        raise r.fail("has both keys and keys_from", "declare the key domain once")
    if isinstance(keys, dict):
        keys = _key_range(r, keys)
    if keys is not None:
        if not isinstance(keys, list) or not keys:
            raise r.fail("keys must be a non-empty list", 'for example keys = ["F", "M", "X"]')
        for k in keys:
            if isinstance(k, float) and not math.isfinite(k):
                raise r.fail(f"key {k} is not finite", "list only finite values")
            if isinstance(k, (dict, list)):
                raise r.fail(f"key {k!r} is not a single value", "list strings, numbers, booleans or dates")
        if len(set(keys)) != len(keys):
            raise r.fail("keys has duplicates", "list each key once")
    parsed_from = None
    if keys_from is not None:
        if not isinstance(keys_from, str) or keys_from.count(".") != 1:
            raise r.fail(f"keys_from = {keys_from!r} must name a public table column as TABLE.COLUMN", 'for example keys_from = "wards.name"')
        t, c = keys_from.lower().split(".")
        parsed_from = (t, c)
    return ColumnPolicy(
        name=name.lower(),
        lower=None if lower is None else float(lower),
        upper=None if upper is None else float(upper),
        keys=tuple(keys) if keys is not None else None,
        keys_from=parsed_from,
        dates=dates,
        type=declared,
    )


MAX_KEYS = 100_000
_DECIMAL = re.compile(r"DECIMAL\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\)")


def _key_range(r: _Reader, spec: dict) -> list[int]:
    """keys = { range = [0, 110] }: every integer from the first to the last, both included."""
    bounds = spec.get("range")
    if set(spec) != {"range"} or not (isinstance(bounds, list) and len(bounds) == 2
                                      and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)):
        raise r.fail(f"keys = {spec!r} is not a key list or an integer range", "write keys = { range = [0, 110] }")
    lo, hi = bounds
    if not lo <= hi or hi - lo >= MAX_KEYS:
        raise r.fail(f"keys range [{lo}, {hi}] must be ascending and hold at most {MAX_KEYS} keys",
                     "narrow the range")
    return list(range(lo, hi + 1))


def _check_key_references(path: Path, tables: Mapping[str, TablePolicy]) -> None:
    for table in tables.values():
        for col in table.columns.values():
            if col.keys_from is None:
                continue
            t, _ = col.keys_from
            where = f"[tables.{table.name}] column {col.name!r}"
            target = tables.get(t)
            if target is None:
                raise PolicyError(f"{path}: {where}: keys_from names table {t!r}, which the policy does not declare",
                                  hint=f"declare [tables.{t}] with public = true, or fix the name")
            if not target.public:
                raise PolicyError(f"{path}: {where}: keys_from names table {t!r}, which is private",
                                  hint="key domains must come from a public table: add public = true to it if it holds no personal data")


class SchemaMismatch(PolicyError):
    """The policy disagrees with the data's schema: the first problem is the message and hint
    (what `dpsql serve` stops with), `problems` holds every one (what `dpsql policy check` lists)."""

    def __init__(self, problems: list[PolicyError]):
        super().__init__(problems[0].message, hint=problems[0].hint)
        self.problems = problems


def check_against_schema(policy: Policy, schema: Mapping[str, Mapping[str, str]]) -> None:
    """Check the policy against the data's schema (table -> column -> type name); raise
    SchemaMismatch with every problem (schema_problems), the first as its message."""
    problems = schema_problems(policy, schema)
    if problems:
        raise SchemaMismatch(problems)


def schema_problems(policy: Policy, schema: Mapping[str, Mapping[str, str]]) -> list[PolicyError]:
    """Every mismatch between the policy and the data's schema, in the policy's order.

    Every declared table, column, privacy unit and keys_from must exist, and bounds must sit on
    numeric columns; each message names file, table, column and the fix.
    """
    problems: list[PolicyError] = []
    for table in policy.tables.values():
        where = f"{policy.path}: [tables.{table.name}]"
        cols = schema.get(table.name)
        if cols is None:
            origin = str(table.source or policy.engine.database)
            problems.append(PolicyError(f"{where}: no table {table.name!r} in {origin}",
                                        hint="fix the table name, or give the table a source file"))
            continue
        if table.privacy_unit and not table.row_unit and table.privacy_unit not in cols:
            problems.append(PolicyError(f"{where}: privacy_unit column {table.privacy_unit!r} does not exist",
                                        hint=f"the table's columns are: {', '.join(cols)}"))
        for col in table.columns.values():
            problem = _column_problem(where, col, cols, schema)
            if problem is not None:
                problems.append(problem)
    return problems


def _column_problem(where: str, col: ColumnPolicy, cols: Mapping[str, str],
                    schema: Mapping[str, Mapping[str, str]]) -> PolicyError | None:
    """The first mismatch of one declared column with the data (None: it fits)."""
    if col.name not in cols:
        return PolicyError(f"{where} column {col.name!r}: no such column in the data",
                           hint=f"the table's columns are: {', '.join(cols)}")
    if col.bounded and not is_numeric_type(cols[col.name]):
        return PolicyError(f"{where} column {col.name!r}: bounds on a {cols[col.name]} column",
                           hint="declare lower/upper only on numeric columns; use keys for categories")
    if col.dates and cols[col.name].upper() != "DATE":
        return PolicyError(f"{where} column {col.name!r}: date bounds on a {cols[col.name]} column",
                           hint="declare date bounds only on DATE columns")
    if col.keys is not None and (wrong := _key_type_problem(where, col, cols[col.name])) is not None:
        return wrong
    if col.keys_from:
        t, c = col.keys_from
        if c not in schema.get(t, {}):
            return PolicyError(f"{where} column {col.name!r}: keys_from = \"{t}.{c}\" does not resolve: "
                               f"table {t!r} has no column {c!r}",
                               hint=f"columns of {t}: {', '.join(schema.get(t, {}))}")
    return None


def _key_kind(type_name: str) -> tuple[str, tuple[type, ...]] | None:
    """What TOML values a column of this type takes as keys (None: not checked)."""
    base = type_name.upper().split("(")[0]
    if base in INTEGER_TYPES:
        return "integers", (int,)
    if base in NUMERIC_TYPES:
        return "numbers", (int, float)
    if base in ("VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR"):
        return "strings", (str,)
    if base == "DATE":
        return "dates", (datetime.date,)
    if base in ("BOOLEAN", "BOOL"):
        return "booleans", (bool,)
    return None


def _key_type_problem(where: str, col: ColumnPolicy, type_name: str) -> PolicyError | None:
    """Keys must be values of the column's own type: ' 1', '01' and 1 are one INTEGER key to the
    engine, and a key released once per spelling would be released several times."""
    kind = _key_kind(type_name)
    if kind is None:
        return None
    label, types = kind
    for k in col.keys:
        ok = isinstance(k, types) and (bool in types or not isinstance(k, bool))
        if not ok or (label == "dates" and isinstance(k, datetime.datetime)):
            return PolicyError(f"{where} column {col.name!r}: key {k!r} is not of the column's type {type_name}",
                               hint=f"list {label} as keys of this column, each once")
    return None


INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                 "UINTEGER", "UBIGINT", "UHUGEINT")

NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                 "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC")


def is_numeric_type(type_name: str) -> bool:
    return type_name.upper().split("(")[0] in NUMERIC_TYPES
