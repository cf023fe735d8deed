"""PostgreSQL weighted tables ([engine] scratch_url): built by a second role, read by the
read-only one, matching DuckDB's weighted copies, rebuilt when the data changes, and gone
when their engine closes or dies."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from dpsql.config import load_policy
from dpsql.errors import PolicyError
from dpsql.guarantee.bounding import SplitCopy, WeightedCopy
from dpsql.session import Session
from dpsql.sql.classify import classify

from .backends import READER, SAMPLE, SCRATCH, allow_scratch, load_into_postgres, postgres_policy

pytestmark = pytest.mark.backends  # a throwaway PostgreSQL server


@pytest.fixture(scope="module")
def clinic(pg_server):
    admin = pg_server.create_database("weights")
    load_into_postgres(admin)
    return admin, admin.replace("postgres@", f"{READER}@"), allow_scratch(admin)


def _policy(directory: Path, reader: str, scratch: str | None) -> Path:
    path = postgres_policy(directory, reader)
    if scratch is not None:
        path.write_text(path.read_text().replace('url = "', f'scratch_url = "{scratch}"\nurl = "', 1))
    return path


def _scratch_tables(admin: str) -> list[tuple[str, str]]:
    with psycopg.connect(admin) as pg:
        return pg.execute(
            "SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'dpsql_scratch' ORDER BY 1"
        ).fetchall()


def _values(session: Session, text: str) -> tuple[object, list[tuple]]:
    plan, _ = session._prepare(classify(text).tree)
    n = len(plan.keys)
    rows = sorted(r[:n] + r[n + 1 :] for r in zip(*session.bounded_result(plan).columns))  # without unit counts
    return session._weighting(plan), rows


def test_weighted_tables_count_as_duckdbs_copies_do(clinic, tmp_path):
    """A COUNT over the weighted table sums the same weights as DuckDB's copy; a filtered
    query reads it split, with the per-unit bounding's values."""
    admin, reader, scratch = clinic
    pg = Session(load_policy(_policy(tmp_path, reader, scratch), ledger_path=tmp_path / "a.sqlite"), "alice")
    (tmp_path / "per_unit").mkdir()
    per_unit = Session(
        load_policy(_policy(tmp_path / "per_unit", reader, None), ledger_path=tmp_path / "b.sqlite"), "alice"
    )
    duck = Session(load_policy(SAMPLE / "dpsql.toml", ledger_path=tmp_path / "c.sqlite"), "alice")
    try:
        for text in ("SELECT ward, COUNT(*) FROM visits GROUP BY ward", "SELECT COUNT(*) FROM visits"):
            weighting, rows = _values(pg, text)
            assert isinstance(weighting, (WeightedCopy, SplitCopy)) and weighting.table.startswith('"dpsql_scratch"')
            assert rows == _values(duck, text)[1], text
        text = "SELECT ward, COUNT(*) FROM visits WHERE cost > 100 GROUP BY ward"
        weighting, rows = _values(pg, text)
        assert isinstance(weighting, SplitCopy)
        assert rows == _values(per_unit, text)[1]
    finally:
        for s in (pg, per_unit, duck):
            s.close()


def test_the_reader_only_reads_them_and_they_go_with_their_engine(clinic, tmp_path):
    admin, reader, scratch = clinic
    s = Session(load_policy(_policy(tmp_path, reader, scratch), ledger_path=tmp_path / "l.sqlite"), "alice")
    try:
        s.execute("SET dpsql.bounds = policy")  # the policy's limits read a weighted table
        assert s.execute("SELECT ward, COUNT(*) FROM visits GROUP BY ward").rows
        tables = _scratch_tables(admin)
        assert tables and all(owner == SCRATCH and name.endswith(s.engine._weights.id) for name, owner in tables)
        with psycopg.connect(admin) as pg:
            for name, _ in tables:
                may = pg.execute(
                    "SELECT has_table_privilege(%s, %s, 'SELECT'), "
                    "has_table_privilege(%s, %s, 'INSERT, UPDATE, DELETE, TRUNCATE')",
                    (READER, f'dpsql_scratch."{name}"', READER, f'dpsql_scratch."{name}"'),
                ).fetchone()
                assert may == (True, False)
            assert not pg.execute(
                "SELECT has_database_privilege(%s, current_database(), 'CREATE')", (READER,)
            ).fetchone()[0]
    finally:
        s.close()
    assert _scratch_tables(admin) == []


def test_a_dead_engines_tables_are_swept_by_the_next(clinic, tmp_path):
    """An engine whose connection is gone (a crash, a kill) no longer holds its lock: the next
    engine to start drops its tables."""
    admin, reader, scratch = clinic
    policy = load_policy(_policy(tmp_path, reader, scratch), ledger_path=tmp_path / "l.sqlite")
    dead = Session(policy, "alice")
    dead.execute("SELECT sex, COUNT(*) FROM patients GROUP BY sex")
    left = _scratch_tables(admin)
    assert left
    dead.engine._weights._con.close()  # as a crash would: no DROP, the session lock released
    live = Session(policy, "alice")
    try:
        assert _scratch_tables(admin) == []
        assert live.execute("SELECT sex, COUNT(*) FROM patients GROUP BY sex").rows
        assert all(name.endswith(live.engine._weights.id) for name, _ in _scratch_tables(admin))
    finally:
        live.close()
        dead.close()


def test_a_change_of_the_data_rebuilds_the_table(clinic, tmp_path, pg_server):
    admin = pg_server.create_database("weights_change")
    load_into_postgres(admin)
    reader, scratch = admin.replace("postgres@", f"{READER}@"), allow_scratch(admin)
    s = Session(load_policy(_policy(tmp_path, reader, scratch), ledger_path=tmp_path / "l.sqlite"), "alice")
    try:
        text = "SELECT COUNT(*) FROM patients"
        weighting, before = _values(s, text)
        assert weighting is not None
        version = s.engine.data_version()
        with psycopg.connect(admin, autocommit=True) as pg:
            pg.execute(
                "INSERT INTO patients (patient_id, age, sex) SELECT 900000 + g, 40, 'F' FROM generate_series(1, 50) g"
            )
        deadline = time.monotonic() + 30
        while s.engine.data_version() == version:  # PostgreSQL's statistics follow a commit within a second or so
            assert time.monotonic() < deadline
            time.sleep(0.2)
        after = _values(s, text)[1]
        assert after[0][0] - before[0][0] == 50  # 50 more people, one row each, at full weight
    finally:
        s.close()


def test_the_scratch_role_is_not_the_reader(clinic, tmp_path):
    admin, reader, _ = clinic
    with pytest.raises(PolicyError) as err:
        Session(load_policy(_policy(tmp_path, reader, reader), ledger_path=tmp_path / "l.sqlite"), "alice")
    assert "the role that runs queries" in err.value.message and "CREATE ROLE dpsql_scratch" in err.value.hint


def test_the_row_weight_is_exact_integer_floor_on_duckdb_and_postgres(clinic):
    """guarantee/bounding.py's row_weight, as each engine generates it, is floor(C 2^b / max(N, C))
    exactly, up to the largest limit whose C 2^b fits a BIGINT (no float rounding upward, no
    overflow); a larger limit is refused before any SQL is built."""
    import duckdb
    from sqlglot import exp

    from dpsql.engines.pg_nonfailing import lower_for_postgres
    from dpsql.errors import OperationalError
    from dpsql.guarantee.bounding import BIGINT_MAX, row_weight
    from dpsql.sql import build as b

    bits = 10
    largest = BIGINT_MAX >> bits
    cases = [
        (limit, n)
        for limit in (1, 6, 1000, largest - 1, largest)
        for n in (1, 2, 5, 6, 7, 999, 1000, 1001, 3 * 2**40 + 1, largest, largest + 1, 2**62, BIGINT_MAX)
    ]
    duck = duckdb.connect()
    with psycopg.connect(clinic[0]) as pg:
        for limit, n in cases:
            units = b.subquery(exp.Select(expressions=[b.named(b.cast(n, "BIGINT"), "__dpsql_n")]), "u")
            query = b.select([b.named(row_weight(b.col("__dpsql_n", "u"), limit, bits), "w")], units)
            want = (limit << bits) // max(n, limit)
            duck_sql, pg_sql = query.sql(dialect="duckdb"), lower_for_postgres(query, {}).sql(dialect="postgres")
            assert duck.execute(duck_sql).fetchone()[0] == want, (limit, n, duck_sql)
            assert pg.execute(pg_sql).fetchone()[0] == want, (limit, n, pg_sql)
    with pytest.raises(OperationalError) as refused:
        row_weight(exp.column("__dpsql_n"), largest + 1, bits)
    assert refused.value.sqlstate == "54000"
