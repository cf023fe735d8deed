"""`dpsql policy check`: the policy against the schema, and with --data the owner's report of what
the limits cut, checked number by number against the same figures computed here from the rows."""

from __future__ import annotations

import ast
import json
import math
import random
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsql.cli import main
from dpsql.config import load_policy
from dpsql.engines import open_engine
from dpsql.policy_report import Histogram, keeping_items, keeping_rows, report, round_out

from .backends import READER, load_into_postgres, postgres_policy
from .conftest import ROOT, SAMPLE, make_db, write_policy

KINDS, PLACES = ("a", "b", "c"), ("north", "south", "east")


def generated() -> tuple[list, list, list]:
    """people, events and rows with heavy units, keys outside their domains, NULL units, keys and
    values, and values on both sides of their bounds (events: amount in [0, 50], max_groups 2,
    max_rows 3, so a total bound of 6; rows: v in [-10, 10])."""
    rng = random.Random(20261122)

    def value(low: float, high: float, lower: float, upper: float) -> float | None:
        """NULL, exactly a bound (which clips nothing), or uniform in [low, high]."""
        return rng.choice([None, lower, upper] + [rng.uniform(low, high)] * 17)

    people = [(i, value(-5, 110, 0, 100), rng.choice("FMX"), "Oslo") for i in range(1, 151)]
    events = []
    for pid in range(1, 121):
        n = rng.choice([1, 1, 2, 3, 4, 5, 8]) + (rng.randint(10, 40) if pid % 15 == 0 else 0)
        for _ in range(n):
            events.append((pid, rng.choice(KINDS + ("z", None)), value(-10, 70, 0, 50), rng.choice(PLACES + ("west",))))
    events += [(None, "a", 5.0, "north")] * 7  # no unit: never counted
    rows = [(value(-15, 15, -10, 10), rng.randint(1, 4)) for _ in range(250)]
    return people, events, rows


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("policy_check")
    people, events, rows = generated()
    make_db(directory / "db.duckdb", people, events, rows=rows)
    return write_policy(directory), people, events, rows


@pytest.fixture(scope="module")
def owner_report(data):
    policy = load_policy(data[0])
    engine = open_engine(policy)
    try:
        yield report(engine, policy)
    finally:
        engine.close()


def table(rep: dict, name: str) -> dict:
    return next(t for t in rep["tables"] if t["table"] == name)


# The figures, computed here from the rows --------------------------------------------------------


def disc(values, q: float):
    """PERCENTILE_DISC: the value at position ceil(q * n) in sorted order."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(Fraction(str(q)) * len(ordered))) - 1]


def cut(sizes, limit: int) -> int:
    return sum(max(n - limit, 0) for n in sizes)


def smallest(fits) -> int:
    return next(limit for limit in range(1, 10_000) if fits(limit))


def clip_figures(values, lower: float, upper: float) -> dict:
    present = [v for v in values if v is not None]
    moved = sum(abs(v - min(max(v, lower), upper)) for v in present)
    return {
        "null_share": 1 - len(present) / len(values),
        "below_lower_share": sum(v < lower for v in present) / len(present),
        "above_upper_share": sum(v > upper for v in present) / len(present),
        "sum_clipped_share": moved / sum(abs(v) for v in present),
    }


def test_total_bound_counts_rows_beyond_it(data, owner_report):
    events = [e for e in data[2] if e[0] is not None]
    sizes = list(Counter(e[0] for e in events).values())
    t = table(owner_report, "events")
    assert (t["rows"], t["rows_without_unit"], t["units"]) == (len(data[2]), 7, len(sizes))
    assert t["rows_per_unit"] == {
        "p50": disc(sizes, 0.5),
        "p90": disc(sizes, 0.9),
        "p99": disc(sizes, 0.99),
        "max": max(sizes),
    }
    assert max(sizes) > 6 and cut(sizes, 6) > 0  # the data does test the bound
    assert t["total_bound"] == {
        "limit": 6,
        "declared": False,
        "rows_cut": cut(sizes, 6),
        "rows_cut_share": cut(sizes, 6) / len(events),
        "units_over": sum(n > 6 for n in sizes),
        "units_over_share": sum(n > 6 for n in sizes) / len(sizes),
        "rows_of_units_over_share": sum(n for n in sizes if n > 6) / len(events),
    }


@pytest.mark.parametrize("column, field, domain", [("kind", 1, set(KINDS)), ("place", 3, set(PLACES))])
def test_per_group_caps_per_declared_key_column(data, owner_report, column, field, domain):
    events = [e for e in data[2] if e[0] is not None]
    grouped = [e for e in events if e[field] in domain]  # NULL and undeclared keys are in no group
    cells = Counter((e[0], e[field]) for e in grouped).values()
    keys, held = defaultdict(set), Counter()
    for e in grouped:
        keys[e[0]].add(e[field])
        held[e[0]] += 1
    over = [u for u in keys if len(keys[u]) > 2]
    units = len({e[0] for e in events})
    k = next(k for k in table(owner_report, "events")["keys"] if k["column"] == column)
    assert cut(cells, 3) > 0 and over  # the data does test both caps
    assert k["rows_outside_domain_share"] == (len(events) - len(grouped)) / len(events) > 0
    assert k["max_rows"] == {"limit": 3, "rows_cut": cut(cells, 3), "rows_cut_share": cut(cells, 3) / len(events)}
    assert k["max_groups"] == {
        "limit": 2,
        "units_over": len(over),
        "units_over_share": len(over) / units,
        "rows_of_units_over_share": sum(held[u] for u in over) / len(events),
    }
    assert k["rows_per_unit_and_key"] == {"p50": disc(cells, 0.5), "p99": disc(cells, 0.99), "max": max(cells)}


@pytest.mark.parametrize(
    "name, field, bounds, counted",
    [
        ("events", 2, (0, 50), lambda r: r[0] is not None),  # a unit's rows only
        ("people", 1, (0, 100), lambda r: True),
        ("rows", 0, (-10, 10), lambda r: True),  # every row its own unit
    ],
)
def test_bounded_columns_clipped_shares(data, owner_report, name, field, bounds, counted):
    rows = {"people": data[1], "events": data[2], "rows": data[3]}[name]
    values = [r[field] for r in rows if counted(r)]
    present = [v for v in values if v is not None]
    (c,) = table(owner_report, name)["columns"]
    figures = clip_figures(values, *bounds)
    assert figures["below_lower_share"] > 0 and figures["above_upper_share"] > 0 and bounds[1] in present
    assert {k: c[k] for k in figures} == pytest.approx(figures, rel=1e-12)
    assert (c["p1"], c["p50"], c["p99"]) == (disc(present, 0.01), disc(present, 0.5), disc(present, 0.99))


def test_suggested_limits_keep_99_percent(data, owner_report):
    events = [e for e in data[2] if e[0] is not None]
    n, units = len(events), len({e[0] for e in events})
    sizes = list(Counter(e[0] for e in events).values())
    by_key = []
    for field, domain in ((1, set(KINDS)), (3, set(PLACES))):
        grouped = [e for e in events if e[field] in domain]
        reach = defaultdict(set)
        for e in grouped:
            reach[e[0]].add(e[field])
        by_key.append((list(Counter((e[0], e[field]) for e in grouped).values()), [len(s) for s in reach.values()]))
    spared = Fraction(1, 100)
    total = smallest(lambda c: cut(sizes, c) <= spared * n)
    rows = max(smallest(lambda r, cells=cells: cut(cells, r) <= spared * n) for cells, _ in by_key)
    groups = max(smallest(lambda g, reach=reach: sum(k > g for k in reach) <= spared * units) for _, reach in by_key)
    s = {x["limit"]: x for x in table(owner_report, "events")["suggestions"]}
    assert (s["max_contributions"]["suggested"], s["max_rows"]["suggested"], s["max_groups"]["suggested"]) == (
        total,
        rows,
        groups,
    )
    assert s["max_contributions"]["cut_suggested"] == cut(sizes, total) / n <= 0.01
    assert s["max_contributions"]["cut_now"] == cut(sizes, 6) / n
    assert s["max_contributions"]["noise_ratio"] == total / 6 and s["max_rows"]["noise_ratio"] == rows / 3
    assert s["max_rows"]["cut_suggested"] == max(cut(cells, rows) for cells, _ in by_key) / n
    amount = s["columns.amount"]
    present = [e[2] for e in events if e[2] is not None]
    low, high = disc(present, 0.01), disc(present, 0.99)
    assert amount["suggested"] == [round_out(low, up=False), round_out(high, up=True)]
    figures = clip_figures([e[2] for e in events], *amount["suggested"])
    assert amount["cut_suggested"] == pytest.approx(figures["below_lower_share"] + figures["above_upper_share"])
    assert amount["sum_clipped_suggested"] == pytest.approx(figures["sum_clipped_share"])
    assert amount["noise_ratio"] == pytest.approx(max(map(abs, amount["suggested"])) / 50)
    assert amount["avg_noise_ratio"] == pytest.approx((amount["suggested"][1] - amount["suggested"][0]) / 50)


@pytest.mark.parametrize(
    "x, up, rounded",
    [
        (4213, True, 4300),
        (4213, False, 4200),
        (43.72, False, 43),
        (0.01234, True, 0.013),
        (-4213, False, -4300),
        (-4213, True, -4200),
        (11436.02, True, 12000),
        (0, True, 0),
    ],
)
def test_bounds_round_out_to_two_significant_digits(x, up, rounded):
    assert round_out(x, up) == pytest.approx(rounded, rel=1e-12)


def test_histogram_quantiles_and_cuts():
    h = Histogram.of_rows({1: 5, 2: 3, 10: 2})  # sizes 1,1,1,1,1,2,2,2,10,10
    assert (h.total_items, h.total_rows, h.largest) == (10, 31, 10)
    assert [h.quantile(q) for q in (0.1, 0.5, 0.6, 0.8, 0.81, 1.0)] == [1, 1, 2, 2, 10, 10]
    assert (h.excess(2), h.over(2), h.rows_over(2), h.excess(10)) == (16, 2, 20, 0)


def test_suggestion_rules_at_their_edges():
    # a cut of exactly 1 % of the rows (or of the units) is kept
    assert keeping_rows(Histogram.of_rows({1: 98, 2: 1}), 0.99, 100) == 1
    assert keeping_rows(Histogram.of_rows({1: 97, 3: 1}), 0.99, 100) == 2
    # units over max_groups are a share of all units, also those with no row in the grouping's domain
    reach = Histogram({1: 49, 3: 1}, {1: 49, 3: 3})
    assert keeping_items(reach, 0.99, 100) == 1 and keeping_items(reach, 0.99, 50) == 3


# The command line ------------------------------------------------------------------------------


def run(*args: str):
    return CliRunner().invoke(main, ["policy", "check", *args])


def test_check_without_data_says_ok(data):
    out = run("-p", str(data[0]))
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("ok: ") and "4 tables (3 private), 2 analysts" in out.stdout
    assert not (data[0].parent / "policy.ledger.sqlite").exists()  # a check opens no ledger


def test_invalid_policy_lists_every_problem_and_fails(tmp_path):
    make_db(tmp_path / "db.duckdb", [], [])
    path = write_policy(tmp_path)
    path.write_text(
        path.read_text()
        .replace("columns.age =", "columns.agee =")
        .replace('columns.kind = { keys = ["a", "b", "c"] }', "columns.kind = { lower = 0, upper = 1 }")
    )
    for extra in ([], ["--data"]):
        out = run("-p", str(path), *extra)
        assert out.exit_code == 1 and out.stdout == ""
        assert out.stderr.count("PROBLEM: ") == 2 and out.stderr.count("  FIX: ") == 2, out.stderr
        assert "column 'agee': no such column" in out.stderr and "column 'kind': bounds on a VARCHAR" in out.stderr
    out = run("-p", str(path), "--json")
    problems = json.loads(out.stdout)
    assert out.exit_code == 1 and problems["ok"] is False and len(problems["problems"]) == 2
    assert set(problems["problems"][0]) == {"message", "fix", "sqlstate"}
    path.write_text("[tables\n")
    out = run("-p", str(path))
    assert out.exit_code == 1 and "not valid TOML" in out.stderr and "FIX: " in out.stderr


def test_report_text_and_progress(data, owner_report):
    out = run("-p", str(data[0]), "--data")
    assert out.exit_code == 0, out.output
    t = table(owner_report, "events")
    total = t["total_bound"]
    assert "The data owner's view" in out.stdout and "Never show it to analysts" in out.stdout
    assert "limits copied from it into the policy, which is public, disclose" in out.stdout
    assert f"events: {t['rows']:,} rows, {t['units']:,} units of pid (7 rows without a unit" in out.stdout
    assert f"total bound 6 (max_groups × max_rows): cuts {total['rows_cut_share']:.2%} of rows" in out.stdout
    suggested = {s["limit"]: s for s in t["suggestions"]}["max_contributions"]
    assert (
        f"max_contributions 6 → {suggested['suggested']} would cut {suggested['cut_suggested']:.2%} of rows "
        f"(now {total['rows_cut_share']:.2%}) and scale sum/count noise by"
    ) in out.stdout
    assert "rows: 250 rows, each its own unit" in out.stdout
    assert "max_contributions: the smallest total bound that cuts at most 1% of rows" in out.stdout
    assert out.stderr.splitlines() == [
        f"policy check: reading {name} ({i} of 3 private tables)"
        for i, name in enumerate(("people", "events", "rows"), 1)
    ]


def test_report_json_schema(data):
    out = run("-p", str(data[0]), "--data", "--json", "--keep", "0.9")
    assert out.exit_code == 0, out.output
    rep = json.loads(out.stdout)
    assert set(rep) == {"policy", "engine", "keep", "tables"} and rep["keep"] == 0.9
    assert [t["table"] for t in rep["tables"]] == ["people", "events", "rows"]  # public tables hold nobody
    events = table(rep, "events")
    assert set(events) == {
        "table",
        "privacy_unit",
        "rows",
        "rows_without_unit",
        "units",
        "rows_per_unit",
        "total_bound",
        "keys",
        "columns",
        "suggestions",
    }
    assert set(events["keys"][0]) == {
        "column",
        "domain",
        "rows_outside_domain_share",
        "rows_per_unit_and_key",
        "max_rows",
        "keys_per_unit",
        "max_groups",
    }
    assert set(events["columns"][0]) == {
        "column",
        "kind",
        "lower",
        "upper",
        "null_share",
        "below_lower_share",
        "above_upper_share",
        "sum_clipped_share",
        "p1",
        "p50",
        "p99",
    }
    assert [s["limit"] for s in events["suggestions"]] == [
        "max_contributions",
        "max_rows",
        "max_groups",
        "columns.amount",
    ]
    assert {"current", "suggested", "rule", "cut_of", "cut_now", "cut_suggested", "noise_ratio"} <= set(
        events["suggestions"][0]
    )
    assert "at most 10%" in events["suggestions"][0]["rule"]
    assert set(table(rep, "rows")) == {
        "table",
        "privacy_unit",
        "rows",
        "rows_without_unit",
        "units",
        "columns",
        "suggestions",
    }


def test_sample_data_report():
    ledger = SAMPLE / "dpsql.ledger.sqlite"
    had_ledger = ledger.exists()
    out = run("-p", str(SAMPLE / "dpsql.toml"), "--data", "--json")
    assert out.exit_code == 0, out.output
    visits = table(json.loads(out.stdout), "visits")
    total = visits["total_bound"]
    assert (visits["rows"], visits["units"], total["limit"]) == (112_820, 19_506, 40)
    # the rows beyond 40 per patient are 13 % of visits; the 1.8 % of patients above 40 hold a quarter
    assert total["rows_cut_share"] == pytest.approx(0.1296, abs=1e-4)
    assert total["rows_of_units_over_share"] == pytest.approx(0.2533, abs=1e-4)
    assert total["units_over_share"] == pytest.approx(0.0179, abs=1e-4)
    assert ledger.exists() == had_ledger


@pytest.mark.backends
def test_postgres_reports_what_duckdb_does(pg_server, tmp_path):
    admin = pg_server.create_database("policy_check")
    load_into_postgres(admin)
    policies = [
        load_policy(SAMPLE / "dpsql.toml"),
        load_policy(postgres_policy(tmp_path, admin.replace("postgres@", f"{READER}@"))),
    ]
    reports = []
    for policy in policies:
        engine = open_engine(policy)
        try:
            reports.append(_rounded(report(engine, policy)["tables"]))
        finally:
            engine.close()
    assert reports[0] == reports[1]


def _rounded(value):
    """Floats to 9 significant digits: sums of doubles differ in their last bits between engines."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


# No analyst reaches the owner's view -----------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """The dpsql modules a file imports (anywhere in it, lazily too), as dotted names."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, [base, node.module]))
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] == "dpsql"}


def _reached(start: str) -> set[str]:
    """Every dpsql module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        path = next(
            (
                p
                for p in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__init__.py")
                if p.exists()
            ),
            None,
        )
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += _imports(path) | {module.rsplit(".", 1)[0]}  # a module's package runs first
    return seen


@pytest.mark.parametrize(
    "front_end",
    ["dpsql", "dpsql.dbapi", "dpsql.session", "dpsql.server.app", "dpsql.server.worker", "dpsql.console.app"],
)
def test_no_analyst_front_end_imports_the_owners_report(front_end):
    reached = _reached(front_end)
    assert "dpsql.session" in reached  # the walk does follow imports
    assert "dpsql.policy_report" not in reached and "dpsql.cli" not in reached
