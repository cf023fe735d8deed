"""Loading a policy file: the TOML read, each section parsed and checked, the Policy built
(pure: nothing here touches the data)."""

from __future__ import annotations

import re
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from ..errors import PolicyError
from ..sql.limits import QueryLimits
from ..synopses.spec import parse_synopses
from .model import (
    ENGINES,
    FILTERS,
    MECHANISMS,
    BudgetPolicy,
    EngineConfig,
    Policy,
    PrivacyPolicy,
    TablePolicy,
    UserPolicy,
    past_ceiling,
)
from .reader import _Reader
from .tables import _check_key_references, _parse_table


def load_policy(path: str | Path, *, ledger_path: str | Path | None = None) -> Policy:
    """Read and validate a policy file; raise PolicyError naming the place and the fix."""
    path = Path(path).resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(
            f"cannot read policy file {path}: {e.strerror}", hint="Pass --policy with the path of a TOML policy file."
        ) from None
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
        raise top.fail(
            "no [tables.NAME] sections",
            'declare at least one table, e.g. [tables.patients] with privacy_unit = "patient_id"',
        )
    tables: dict[str, TablePolicy] = {}
    for name, raw in tables_raw.items():
        if not isinstance(raw, dict):
            raise top.fail(f"tables.{name} is not a table", f"write it as a [tables.{name}] section")
        table = _parse_table(_Reader(path, f"[tables.{name}]", raw), name, base)
        if table.name in tables:
            raise top.fail(f"table {name!r} is declared twice (names are case-insensitive)", "keep one declaration")
        if engine.kind == "postgres" and table.source is not None:
            raise _Reader(path, f"[tables.{name}]", raw).fail(
                'with [engine] kind = "postgres" the table lives in PostgreSQL and takes no source',
                f"remove source, and create the table {name} in the schema [engine] schema names",
            )
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
        b = _parse_budget(
            r,
            BudgetPolicy(
                privacy.filter,
                privacy.epsilon,
                privacy.delta,
                privacy.delta_reserve,
                privacy.rdp_order,
                privacy.window,
                privacy.lifetime_epsilon,
                privacy.lifetime_delta,
            ),
        )
        officer = raw.get("officer", False)
        if not isinstance(officer, bool):
            raise r.fail(
                f"officer = {officer!r} must be true or false",
                "write officer = true for a privacy officer, who sees every analyst in the web console",
            )
        users[name] = UserPolicy(
            name,
            b.epsilon,
            b.delta,
            b.filter,
            b.delta_reserve,
            b.rdp_order,
            b.window,
            b.lifetime_epsilon,
            b.lifetime_delta,
            officer,
        )

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
    return Policy(
        path=path,
        engine=engine,
        privacy=privacy,
        tables=tables,
        users=users,
        ledger_path=ledger,
        ledger_url=url,
        limits=limits,
        ledger_identity=identity,
        synopses=synopses,
    )


def _parse_limits(r: _Reader) -> QueryLimits:
    """[limits]: what one statement may cost to read and plan (sql/limits.py)."""
    default = QueryLimits()
    names = (
        "max_query_bytes",
        "max_tokens",
        "max_nodes",
        "max_in_list",
        "max_depth",
        "max_expression_depth",
        "max_join_rows",
    )
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
    allowed = {
        "duckdb": {"database", "threads", "memory_limit", "scratch", "statement_timeout"},
        "postgres": {"url", "schema", "statement_timeout", "settings", "scratch_url", "scratch_schema"},
        "spark": {"master", "remote", "conf", "statement_timeout", "scratch_dir"},
    }[kind]
    r.unknown_keys(allowed | {"kind"})
    timeout = float(r.number("statement_timeout", Fraction(300), positive=True))
    if kind == "postgres":
        url = r.data.get("url")
        if not (isinstance(url, str) and url.startswith(("postgresql://", "postgres://"))):
            raise r.fail(
                'kind = "postgres" needs url = "postgresql://..."',
                'for example url = "postgresql://dpsql_reader@db.internal/clinic" (a role that can only read)',
            )
        schema = r.data.get("schema", "public")
        if not isinstance(schema, str) or not schema:
            raise r.fail(f"schema = {schema!r} must be a schema name", 'for example schema = "public"')
        settings = r.data.get("settings", {})
        if not isinstance(settings, dict) or not all(isinstance(v, (str, int, float)) for v in settings.values()):
            raise r.fail(
                "settings must be a table of PostgreSQL settings", 'for example settings = { work_mem = "256MB" }'
            )
        fixed = sorted(
            set(settings)
            & {
                "search_path",
                "statement_timeout",
                "default_transaction_read_only",
                "transaction_read_only",
                "role",
                "session_authorization",
            }
        )
        if fixed:
            raise r.fail(
                f"settings may not set {fixed[0]}",
                "dpsql fixes it (schema and statement_timeout are [engine] keys of their own)",
            )
        scratch_url = r.data.get("scratch_url")
        if scratch_url is not None and not (
            isinstance(scratch_url, str) and scratch_url.startswith(("postgresql://", "postgres://"))
        ):
            raise r.fail(
                "scratch_url must be a postgresql:// URL",
                'for example scratch_url = "postgresql://dpsql_scratch@db.internal/clinic": a role of its own '
                "that may create tables in scratch_schema and read the policy's tables",
            )
        scratch_schema = r.data.get("scratch_schema", "dpsql_scratch")
        if not isinstance(scratch_schema, str) or not scratch_schema or scratch_schema == schema:
            raise r.fail(
                f"scratch_schema = {scratch_schema!r} must be a schema name other than schema",
                'for example scratch_schema = "dpsql_scratch"',
            )
        return EngineConfig(
            kind=kind,
            url=url,
            schema=schema,
            statement_timeout=timeout,
            conf={str(k): str(v) for k, v in settings.items()},
            scratch_url=scratch_url,
            scratch_schema=scratch_schema,
        )
    if kind == "spark":
        master, remote = r.data.get("master"), r.data.get("remote")
        if master is not None and remote is not None:
            raise r.fail("give master or remote, not both", 'master = "local[2]", or remote = "sc://host:15002"')
        for key, value in (("master", master), ("remote", remote)):
            if value is not None and not isinstance(value, str):
                raise r.fail(f"{key} must be a string", 'for example master = "local[2]"')
        conf = r.data.get("conf", {})
        if not isinstance(conf, dict) or not all(isinstance(v, (str, int, float, bool)) for v in conf.values()):
            raise r.fail(
                "conf must be a table of Spark settings", 'for example conf = { "spark.driver.memory" = "4g" }'
            )
        scratch_dir = r.data.get("scratch_dir")
        if scratch_dir is not None and (remote is not None or not isinstance(scratch_dir, str) or not scratch_dir):
            raise r.fail(
                "scratch_dir must be a directory path, with master (not remote)",
                'for example scratch_dir = "/shared/dpsql-scratch": mounted at this path on the driver '
                "and every executor (weighted copies are written and read there)",
            )
        return EngineConfig(
            kind=kind,
            master=master if master or remote else "local[*]",
            remote=remote,
            conf={str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()},
            statement_timeout=timeout,
            scratch_dir=None if scratch_dir is None else (base / scratch_dir).resolve(),
        )
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
    return EngineConfig(
        kind=kind, database=db_path, threads=threads, memory_limit=memory, scratch=scratch, statement_timeout=timeout
    )


RESERVE_SHARE = Fraction(1, 10)  # of delta, set aside by default for releases with a delta of their own


def default_reserve(kind: str, delta: Fraction) -> Fraction:
    """Under zcdp, rdp and whitehouse, releases that carry their own delta (partition selection)
    spend a reserve kept out of the filter's conversion: by default a tenth of delta, so that
    they are admitted on a fresh budget without any setting."""
    return delta * RESERVE_SHARE if kind in ("zcdp", "rdp", "whitehouse") and delta > 0 else Fraction(0)


def _accountable(r: _Reader, kind: str, name: str, epsilon: Fraction | None) -> None:
    """Refuse a budget's ε past what its filter's accounting can compute with."""
    largest = past_ceiling(kind, epsilon) if epsilon is not None else None
    if largest is not None:
        raise r.fail(
            f"the {kind} filter cannot account for {name} = {float(epsilon):g} (at most {largest})",
            'use a smaller epsilon, or filter = "zcdp" or "basic", which take any epsilon',
        )


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
        raise r.fail(
            f"delta_reserve = {float(reserve)} must be below delta = {float(delta)}",
            "keep most of delta for the filter, e.g. delta_reserve = delta / 10",
        )
    if kind in ("advanced", "whitehouse", "zcdp", "rdp", "gdp") and delta <= 0:
        raise r.fail(f"the {kind} filter needs delta > 0", 'set delta, e.g. delta = 1e-6, or use filter = "basic"')
    if kind == "advanced" and delta >= Fraction(1, 3):
        raise r.fail("the advanced filter needs delta below 1/e", "use a small delta such as 1e-6")
    _accountable(r, kind, "epsilon", epsilon)
    if kind == "rdp" and order is not None and order <= 1:
        raise r.fail("rdp_order must be above 1", "for example rdp_order = 8")
    window = _window(r, default.window)
    lifetime_epsilon = r.number("lifetime_epsilon", default.lifetime_epsilon, positive=True)
    _accountable(r, kind, "lifetime_epsilon", lifetime_epsilon)
    lifetime_delta = r.number("lifetime_delta", default.lifetime_delta, minimum=0, maximum=1)
    if lifetime_epsilon is not None and window is None:
        raise r.fail(
            "lifetime_epsilon caps a budget that refreshes, but no window is set",
            'set window = "30d" (or remove lifetime_epsilon: without a window, epsilon is the lifetime budget)',
        )
    if lifetime_epsilon is not None and (lifetime_epsilon < epsilon or lifetime_delta < delta):
        raise r.fail(
            "lifetime_epsilon and lifetime_delta must be at least one window's epsilon and delta",
            f"for example lifetime_epsilon = {float(epsilon * 12):g}",
        )
    return BudgetPolicy(
        kind,
        epsilon,
        delta,
        reserve,
        order,
        window,
        lifetime_epsilon,
        lifetime_delta if lifetime_epsilon is not None else Fraction(0),
    )


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
        raise r.fail(
            f"window = {raw!r} is not a duration", 'write window = "30d" (h, d or w), or "daily", "weekly", "monthly"'
        )
    return int(m.group(1)) * _WINDOW_UNITS[m.group(2)]


def _parse_privacy(r: _Reader) -> PrivacyPolicy:
    r.unknown_keys(
        {
            "filter",
            "epsilon",
            "delta",
            "query_epsilon",
            "query_delta",
            "max_query_epsilon",
            "mechanism",
            "confidence",
            "delta_reserve",
            "rdp_order",
            "global",
            "bounds",
        }
        | WINDOW_KEYS
    )
    budget = _parse_budget(r, BudgetPolicy("basic", Fraction(1), Fraction(0), None))
    query_epsilon = r.number("query_epsilon", min(Fraction(1, 10), budget.epsilon), positive=True)
    query_delta = r.number("query_delta", None, minimum=0, maximum=1)
    max_query_epsilon = r.number("max_query_epsilon", None, positive=True)
    if max_query_epsilon is not None and max_query_epsilon < query_epsilon:
        raise r.fail(
            f"max_query_epsilon = {float(max_query_epsilon):g} is below query_epsilon = {float(query_epsilon):g}",
            "a query's default epsilon must be within the cap: lower query_epsilon or raise max_query_epsilon",
        )
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
        global_budget = _parse_budget(
            gr, BudgetPolicy(budget.filter, budget.epsilon, budget.delta, None, budget.rdp_order, budget.window)
        )
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
