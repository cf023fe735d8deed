"""A repeated bounded query's exact values, computed once per data version and analyst
(DuckDBEngine.execute_reused): every release still draws fresh noise and is charged, a change
of the data is seen at once, and what depends on more than the data is never reused."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from dpsql.config import load_policy
from dpsql.session import Session
from dpsql.sql.classify import classify

QUERY = "SELECT g, COUNT(*) FROM t GROUP BY g"


def _write(path: Path, rows: int) -> None:
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT i AS pid, 1 + i % 2 AS g, DATE '2020-01-01' + CAST(i AS INTEGER) AS d FROM range({rows}) r(i)) "
        f"TO '{path}' (FORMAT PARQUET)"
    )
    con.close()


def _session(tmp_path: Path, user: str = "alice") -> Session:
    if not (tmp_path / "t.parquet").exists():
        _write(tmp_path / "t.parquet", 300)
        (tmp_path / "policy.toml").write_text("""
[privacy]
epsilon = 1000.0
delta = 1e-6
query_epsilon = 1.0
[tables.t]
source = "t.parquet"
privacy_unit = "pid"
columns.g = { keys = [1, 2] }
columns.d = { lower = 2020-01-01, upper = 2021-12-31 }
[users.alice]
[users.bob]
""")
    return Session(load_policy(tmp_path / "policy.toml"), user, ledger=_ledger(tmp_path))


def _ledger(tmp_path: Path):
    from dpsql.ledger import open_ledger

    return open_ledger(tmp_path / "ledger.sqlite", None)


def _bounded(session: Session, sql: str) -> str:
    stmt = classify(sql)
    plan, _ = session._prepare(stmt.tree, stmt.options)
    return session.bounded_sql(plan)


def test_each_release_of_a_reused_result_is_noised_afresh_and_charged(tmp_path):
    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    answers = {tuple(s.execute(QUERY).rows) for _ in range(20)}
    assert len(answers) > 1  # all 20 equal: probability below 1e-10 at epsilon 1
    assert s.budget()["queries"] == 20
    assert list(s.engine._reused) == [("alice", _bounded(s, QUERY))]  # computed once, kept
    s.close()


def test_a_change_of_the_data_is_seen_by_the_next_query(tmp_path):
    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    sql = _bounded(s, QUERY)
    s.execute(QUERY)
    before = s.engine.execute_reused(sql, "alice")
    assert [list(c) for c in before.columns] == s.engine.execute(sql).columns
    stat = os.stat(tmp_path / "t.parquet")
    _write(tmp_path / "t.parquet", 500)
    os.utime(tmp_path / "t.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    s.execute(QUERY)
    sql = _bounded(s, QUERY)
    after = s.engine.execute_reused(sql, "alice")
    assert [list(c) for c in after.columns] == s.engine.execute(sql).columns != [list(c) for c in before.columns]
    assert len(s.engine._reused) == 1  # the old data's values are gone
    s.close()


def test_results_are_kept_apart_per_analyst(tmp_path):
    alice = _session(tmp_path)
    bob = Session(alice.policy, "bob", engine=alice.engine, ledger=alice.ledger)
    for s in (alice, bob):
        s.execute("SET dpsql.cache = off")
        s.execute(QUERY)
    sql = _bounded(alice, QUERY)
    assert set(alice.engine._reused) == {("alice", sql), ("bob", sql)}
    bob.close()
    alice.close()


def test_sampled_queries_are_recomputed_and_clock_ones_keyed_by_their_time(tmp_path):
    """A sample is drawn afresh each time; the clock is read once per statement and written in
    as a literal (sql/clock.py), so a clock query's exact result is kept under that literal:
    the next day's CURRENT_DATE is another key."""
    import datetime

    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    s.execute("SELECT COUNT(*) FROM t TABLESAMPLE BERNOULLI (50)")
    assert s.engine._reused == {}
    s.execute("SELECT COUNT(*) FROM t WHERE d < CURRENT_DATE")
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    yesterday = (datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)).isoformat()
    (key,) = s.engine._reused  # (a run across midnight UTC reads either day)
    assert today in key[1] or yesterday in key[1]
    s.execute("SELECT COUNT(*) FROM t WHERE d < DATE '2020-06-01'")
    assert len(s.engine._reused) == 2
    s.close()


def test_reuse_can_be_turned_off_for_the_session(tmp_path):
    """SET dpsql.reuse = off: the engine computes every execution (benchmarks against a plain
    engine compare like with like); SHOW and RESET as for every dpsql setting."""
    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    s.execute("SET dpsql.reuse = off")
    assert s.execute("SHOW dpsql.reuse").rows == [("off",)]
    ran = []
    execute = s.engine.execute
    s.engine.execute = lambda sql, *stop: ran.append(sql) or execute(sql, *stop)
    for _ in range(3):
        s.execute(QUERY)
    assert sum("SUM(" in q for q in ran) == 3 and s.engine._reused == {}  # (and the domain's keys, once)
    s.execute("RESET dpsql.reuse")
    assert s.execute("SHOW dpsql.reuse").rows == [("on",)]
    for _ in range(3):
        s.execute(QUERY)
    assert sum("SUM(" in q for q in ran) == 4  # computed once more, then reused
    s.close()


def test_an_analysts_sessions_share_plans_but_not_settings(tmp_path):
    """A plan made by one connection serves the analyst's next (a BI tool opens one per chart);
    one made at other settings (epsilon, the filter's exact curve...) is not taken for it, nor
    is another analyst's (whose timing would tell that the query was asked)."""
    first = _session(tmp_path)
    second = Session(first.policy, "alice", engine=first.engine, ledger=first.ledger)
    bob = Session(first.policy, "bob", engine=first.engine, ledger=first.ledger)
    planned = []
    plan = first._plan_and_calibrate
    for s in (first, second, bob):
        s._plan_and_calibrate = lambda tree, options, plan=plan: planned.append(1) or plan(tree, options)
        s.execute("SET dpsql.cache = off")
    first.execute(QUERY)
    second.execute(QUERY)
    assert len(planned) == 1
    bob.execute(QUERY)
    assert len(planned) == 2
    second.execute("SET dpsql.epsilon = 0.5")
    second.execute(QUERY)
    second.settings.exact_curve = not second.settings.exact_curve
    second.execute(QUERY)
    assert len(planned) == 4
    _, cal = first._prepare(classify(QUERY).tree, text=QUERY)
    assert cal.cost.epsilon == 1  # the first session's own settings' plan, not the second's
    for s in (bob, second, first):
        s.close()


def test_kept_results_are_bounded_in_number_and_size(tmp_path, monkeypatch):
    """Exact aggregates held between queries stay few: the oldest go first, and a result too
    large for the budget is recomputed every time."""
    from dpsql.engines import duckdb as engine_module

    monkeypatch.setattr(engine_module, "REUSED_RESULTS", 3)
    monkeypatch.setattr(engine_module, "REUSED_CELLS", 24)  # a grouped COUNT here is 2 rows x 3 values
    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    queries = [f"SELECT g, COUNT(*) FROM t WHERE pid > {i} GROUP BY g" for i in range(5)]
    for q in queries:
        s.execute(q)
    kept = [sql for _, sql in s.engine._reused]
    assert kept == [_bounded(s, q) for q in queries[2:]]  # the three newest
    assert s.engine._reused_cells == sum(r.row_count * len(r.names) for r in s.engine._reused.values()) == 18
    monkeypatch.setattr(engine_module, "REUSED_CELLS", 20)  # 6 values > 20 // 4: not kept
    s.execute("SELECT g, COUNT(*) FROM t WHERE pid > 99 GROUP BY g")
    assert len(s.engine._reused) == 3 and _bounded(s, "SELECT g, COUNT(*) FROM t WHERE pid > 99 GROUP BY g") not in [
        sql for _, sql in s.engine._reused
    ]
    s.close()


def test_an_ungrouped_unfiltered_query_reads_the_copys_totals_of_the_current_data(tmp_path):
    """COUNT(*) with no filter or GROUP BY reads the weighted copy's stored totals (built with
    the copy, as DuckDB answers COUNT(*) from its statistics): the values are those of the scan
    it replaces, and a change of the data rebuilds them with the copy."""
    from dpsql.guarantee.bounding import WeightedCopy
    from dpsql.sql.rewrite import rewrite

    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    stmt = classify("SELECT COUNT(*) FROM t")
    for rows in (300, 500):
        if rows == 500:
            stat = os.stat(tmp_path / "t.parquet")
            _write(tmp_path / "t.parquet", rows)
            os.utime(tmp_path / "t.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        plan, _ = s._prepare(stmt.tree, stmt.options)
        assert "_totals" in s.bounded_sql(plan)
        read = s.bounded_result(plan)
        copy = s._weighting(plan)
        scanned = s.engine.execute(s.engine.sql_of(rewrite(plan, None, None, WeightedCopy(plan.bounding, copy.table))))
        assert [list(c) for c in read.columns] == [list(c) for c in scanned.columns] == [[0], [rows]]
    s.close()


def test_a_change_of_the_data_is_seen_by_a_text_of_a_shape_with_a_template(tmp_path):
    """Templates (sql/slots.py) are kept per data version, as plans are: after a change, a new
    filter value is planned afresh against the new data and its weighted copy."""
    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    shape = "SELECT g, COUNT(*) FROM t WHERE d >= DATE '{}' GROUP BY g"
    for day in ("2020-01-05", "2020-01-06", "2020-01-07"):
        s.execute(shape.format(day))
    stat = os.stat(tmp_path / "t.parquet")
    _write(tmp_path / "t.parquet", 500)
    os.utime(tmp_path / "t.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    text = shape.format("2020-01-08")
    s.execute(text)
    stmt = classify(text)
    plan, _ = s._plans.plan(s._plan_key(stmt.tree, stmt.options, text))
    fresh = _session(tmp_path, "bob")
    try:
        exact = sorted(zip(*s.bounded_result(plan).columns))
        assert exact == sorted(zip(*fresh.bounded_result(fresh._prepare(stmt.tree, stmt.options)[0]).columns))
        assert sum(row[-1] for row in exact) > 300 * 1024  # more rows than the old data held (counts in 1/1024)
    finally:
        fresh.close()
        s.close()


def test_a_statement_reads_the_data_version_once_and_the_next_sees_a_change(tmp_path):
    """Engine.one_version: every step of a statement that asks (plan key, reuse, the engine's
    prepared statements, the weighted copy) gets the version read once, at its first asking;
    the next statement reads it again, so a change of the files between two statements is
    seen by the second, with reuse on or off."""
    s = _session(tmp_path)
    s.execute("SET dpsql.cache = off")
    reads = []
    real = s.engine.read_data_version

    def counted() -> str:
        reads.append(real())
        return reads[-1]

    s.engine.read_data_version = counted
    for reuse in ("on", "off"):
        s.execute(f"SET dpsql.reuse = {reuse}")
        s.execute(QUERY)  # planned (and the weighted copy built) at this version
        reads.clear()
        s.execute(QUERY)
        assert len(reads) == 1
        stat = os.stat(tmp_path / "t.parquet")
        rows = 500 if reuse == "on" else 700
        _write(tmp_path / "t.parquet", rows)
        os.utime(tmp_path / "t.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        reads.clear()
        s.execute(QUERY)  # the change is seen: weighted copy rebuilt, plan and results anew
        assert reads[0] == real() and len(set(reads)) == 1  # the build's own reads agree with it
        exact = s.bounded_result(s._prepare(classify(QUERY).tree)[0])
        assert sorted(exact.columns[-1]) == [rows // 2 << 10, rows // 2 << 10]  # fixed-point counts of the new rows
    reads.clear()
    with s.engine.one_version():
        assert reads == []  # read when first asked, not before
        first = s.engine.data_version()
        with s.engine.one_version():  # nested: the outer block's version
            assert s.engine.data_version() == first
    assert reads == [first]
    s.engine.data_version()
    assert len(reads) == 2  # outside a block: read every time
    s.close()
