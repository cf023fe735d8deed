"""The benchmark's quick mode runs end to end and writes its tables (a smoke test, not a timing:
the figures themselves are in benchmarks/RESULTS.md, from the full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the quick benchmark

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_writes_every_table(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), "--work", str(ROOT / ".bench")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for heading in (
        "## Latency at 100,000 rows",
        "## Accuracy at 100,000 rows",
        "## Budget:",
        "## Scale:",
        "## Throughput of dpsql serve",
    ):
        assert heading in text, heading
    results = json.loads(out.with_suffix(".json").read_text())
    assert "dpsql" not in {s for errors in results["errors"].values() for s in errors}  # dpsql answers every query
    assert {"smartnoise", "qrlew"} <= {s for per_query in results["accuracy"].values() for s in per_query}
    assert all(r < 0.5 for q in results["accuracy"].values() for s, r in q.items() if s == "dpsql")
    assert (tmp_path / "latency_vs_rows.png").stat().st_size > 1000


@pytest.mark.parametrize("shapes", [[], ["--shapes"]])
def test_new_query_benchmark_runs_every_shape(tmp_path, shapes):
    from benchmarks.new_query import SHAPES

    out = tmp_path / "new_query.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.new_query",
            "--rows",
            "4000",
            "--texts",
            "4",
            "--rounds",
            "2",
            "--out",
            str(out),
        ]
        + shapes,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line[:26].strip(): line[26:].split() for line in proc.stdout.splitlines()}
    for name in SHAPES:
        total, engine, ledger, noise, python, cpu, *_ = map(float, rows[name])
        assert 0 < engine < total and 0 < ledger < total and 0 <= noise < total and python > 0, (name, rows[name])
    assert rows["undeclared keys"][3] != "0.00"  # partition selection draws noise for every group
    assert "worst python per new text" in proc.stdout and "worst python per new text" in out.read_text()


def _utility(*args: str) -> None:
    """Run `python -m benchmarks.utility` with these arguments; it must succeed."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.utility", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_utility_benchmark_scores_every_query(tmp_path):
    """A few queries, 2 runs, dpsql only: one row per query with a finite, non-negative error, the
    summary rows, the spurious groups of a filtered month query, and the section written into an
    existing results file beside what it had."""
    from benchmarks.utility import SECTION

    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmarks\n\n## Latency\n\nkept\n")
    names = ["visits_by_ward", "cost_by_month_2024", "income_avg_by_region"]
    _utility("--runs", "2", "--no-peers", "--queries", *names, "--out", str(out))
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\n## Latency\n\nkept\n") and text.count(SECTION) == 1
    table = text[text.index("| query | dpsql (policy limits) |") :].split("\n\n")[0].splitlines()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]
    assert [r[0] for r in rows] == names + ["**median over queries**", "**worst query**", "**queries above 15%**"]
    assert table[0].count("|") == 4  # query, the policy's limits, auto
    for name, *errors in rows[:4]:
        for error in errors:
            value = float(error.rstrip("%"))
            assert 0 <= value < float("inf"), (name, error)
    assert all(cell.endswith(" of 3") for cell in rows[-1][1:])
    # 2023's months are declared but excluded by the WHERE: narrowed away, never answered
    assert "Spurious groups per answer" not in text


def test_group_errors_count_missing_null_and_spurious_groups():
    from benchmarks.shared import score

    exact = {("a",): 10.0, ("b",): 20.0}
    s = score([[["a", 11.0], ["b", None], ["c", 5.0]], [["a", 9.0]]], exact)
    assert s.errors == [0.1, 1.0, 0.1, 1.0]
    assert s.missing == 0.5 and s.spurious == 0.5


def test_a_section_is_replaced_and_kept(tmp_path):
    """One benchmark rewrites its own section of a results file, and `python -m benchmarks`, which
    writes the file whole, carries the utility benchmark's section over."""
    from benchmarks.shared import replace_section, write_keeping

    text = "# T\n\n## A\n\none\n\n## B\n\ntwo\n"
    assert replace_section(text, "## A\n\nnew\n") == "# T\n\n## A\n\nnew\n\n## B\n\ntwo\n"
    assert replace_section(text, "## B\n\nnew") == "# T\n\n## A\n\none\n\n## B\n\nnew\n"
    assert replace_section(text, "## C\n\nx") == text + "\n## C\n\nx\n"
    assert replace_section("", "## C\n\nx") == "## C\n\nx\n"
    out = tmp_path / "RESULTS.md"
    out.write_text(text + "\n## Kept\n\nk\n")
    write_keeping(out, "# New\n\n## A\n\nfresh\n", ("## Kept",))
    assert out.read_text() == "# New\n\n## A\n\nfresh\n\n## Kept\n\nk\n"


def test_utility_benchmark_runs_auto_bounds_where_the_build_accepts_them():
    """dpsql (auto) is run exactly when SET dpsql.bounds is accepted, and then the policy variant
    asks for the policy's limits explicitly."""
    import dpsql
    from benchmarks.utility import AUTO, POLICY_LIMITS, dpsql_variants

    class Cursor:
        def __init__(self, accepts):
            self.accepts, self.seen = accepts, []

        def execute(self, sql):
            if not self.accepts:
                raise dpsql.ProgrammingError('unrecognized configuration parameter "dpsql.bounds"')
            self.seen.append(sql)

    assert dpsql_variants(Cursor(False)) == {POLICY_LIMITS: []}
    assert dpsql_variants(Cursor(True)) == {
        POLICY_LIMITS: ["SET dpsql.bounds = policy"],
        AUTO: ["SET dpsql.bounds = auto"],
    }


def test_huge_run_writes_its_own_section_and_a_full_run_keeps_it(tmp_path):
    """`python -m benchmarks --huge ROWS` (here at a small size): the weighted copy's build, peak
    RSS and the three grouped queries beside plain DuckDB, in its own section of the results
    file, which the full run carries over."""
    from benchmarks.copy_build import SECTION
    from benchmarks.run import KEPT_SECTIONS, main

    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmarks\n\n## Latency\n\nkept\n")
    main(["--huge", "20000", "--work", str(tmp_path), "--out", str(out)])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\n## Latency\n\nkept\n")
    mine = text[text.index(SECTION) :]
    assert "20,000 rows" in mine and "weighted-copy build" in mine and "its CPU time" in mine
    for label in ("COUNT(*) GROUP BY grp", "SUM(value) GROUP BY grp", "AVG(value) GROUP BY grp"):
        row = next(line for line in mine.splitlines() if line.startswith(f"| {label} |"))
        plain, dp, ratio = (cell.strip() for cell in row.strip("|").split("|")[1:])
        assert plain.endswith(" ms") and dp.endswith(" ms") and ratio.endswith("x")
    assert not (tmp_path / "data" / "events_20000.parquet").exists()  # the DuckDB file alone
    assert SECTION in KEPT_SECTIONS


def test_keys_benchmark_writes_its_section(tmp_path, monkeypatch):
    """`python -m benchmarks.keys --out FILE`: the table (with the keys dpsql released, which plain
    DuckDB returns all of) as its own section of FILE, replaced in place on the next run."""
    from benchmarks import keys
    from benchmarks.run import KEPT_SECTIONS

    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmarks\n\n## Latency\n\nkept\n")
    for _ in range(2):
        monkeypatch.setattr(sys, "argv", ["keys", "--rows", "3000", "--keys", "10", "--repeat", "1", "--out", str(out)])
        keys.main()
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\n## Latency\n\nkept\n") and text.count(keys.SECTION) == 1
    row = next(line for line in text.splitlines() if line.startswith("| 10 |"))
    released = int(row.strip("|").split("|")[-1].strip().replace(",", ""))
    assert released == 10  # 300 people per key: every key clears the threshold
    assert keys.SECTION in KEPT_SECTIONS


def test_the_heldout_workload_is_its_own_and_writes_its_own_section(tmp_path):
    """`--workload heldout` runs the second workload (no query of the first, by name or SQL; at
    least 20) into its own section, beside the first workload's."""
    from benchmarks.utility import HELDOUT, HELDOUT_SECTION, QUERIES, SECTION

    assert len(HELDOUT) >= 20 and len({q.name for q in HELDOUT}) == len(HELDOUT)
    assert not {q.name for q in HELDOUT} & {q.name for q in QUERIES}
    assert not {q.sql for q in HELDOUT} & {q.sql for q in QUERIES}
    out = tmp_path / "RESULTS.md"
    out.write_text(f"# Benchmarks\n\n{SECTION}\n\nkept\n")
    names = ["cost_median_by_smoker", "older_smokers"]
    _utility("--workload", "heldout", "--runs", "1", "--no-peers", "--queries", *names, "--out", str(out))
    text = out.read_text()
    assert text.startswith(f"# Benchmarks\n\n{SECTION}\n\nkept\n") and text.count(HELDOUT_SECTION) == 1
    section = text[text.index(HELDOUT_SECTION) :]
    assert all(f"| {name} |" in section for name in names)


def test_each_workload_writes_its_own_section_and_shapes_holds_filters():
    """`--workload shapes` (DESIGN.md §10's shapes and aggregates under FILTER) is registered with
    a section of its own, as every workload is."""
    from benchmarks.utility import SHAPES, SHAPES_SECTION, WORKLOADS

    assert WORKLOADS["shapes"] == (SHAPES, SHAPES_SECTION)
    assert len({section for _, section in WORKLOADS.values()}) == len(WORKLOADS)
    assert len({q.name for q in SHAPES}) == len(SHAPES) and sum("FILTER (WHERE" in q.sql for q in SHAPES) >= 3


def _perquery(*args: str) -> list[str]:
    """The last two lines `python -m benchmarks.perquery ARGS` prints: a query's CPU and its split."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.perquery", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return out.splitlines()[-2:]


def test_perquery_splits_the_servers_cpu_by_thread_under_another_filter():
    """`benchmarks.perquery` serves the sample under the filter asked for and tells the server's
    CPU per statement and its split by thread, the statement threads and the ledger writer named."""
    line, split = _perquery("--statements", "400", "--clients", "2", "--only", "grouped COUNT", "--filter", "zcdp")
    assert "grouped COUNT, 2 client(s), 400 statements: server CPU" in line  # a writer's 0.1 s at least
    roles = dict(part.rsplit(" ", 1) for part in split.split("by thread: ")[1].removesuffix(" ms").split(", "))
    assert {"statement threads", "ledger writer"} <= set(roles) and all(float(v) > 0 for v in roles.values())


def test_perquery_splits_the_cpu_of_serve_workers_by_process():
    """`benchmarks.perquery --workers 2` serves as `dpsql serve --workers 2` and tells the CPU per
    statement of the supervisor (its ledger writer) and of the workers, each of them at work."""
    line, split = _perquery("--statements", "200", "--clients", "2", "--only", "grouped COUNT", "--workers", "2")
    assert "grouped COUNT, 2 client(s), 200 statements: server CPU" in line
    roles = dict(part.rsplit(" ", 1) for part in split.split("by process: ")[1].removesuffix(" ms").split(", "))
    assert set(roles) == {"workers", "supervisor (ledger writer)"} and all(float(v) > 0 for v in roles.values())
