"""Many proxies, one ledger: two `dpsql serve` processes on one PostgreSQL ledger never
overspend, share the answer cache, and refuse (releasing nothing) when the ledger is gone."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from .conftest import write_policy
from .pgserver import PgServer
from .server_fixture import Serve

pytestmark = pytest.mark.slow  # 64 clients on two proxies: 947 s in the CI run


@pytest.fixture
def ledger_server():
    """A PostgreSQL server of this test's own: the last test stops it under the proxies."""
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture
def two_proxies(small_policy: Path, tmp_path: Path, ledger_server):
    url = ledger_server.create_database("ledger")
    policy = write_policy(
        small_policy.parent,
        epsilon=1.0,
        query_epsilon=0.1,  # 10 queries for alice
        extra=f'\n[ledger]\nurl = "{url}"\n',
    )
    proxies: list[Serve] = []
    try:  # a proxy that fails to start must not leave the other running
        for i in range(2):
            proxies.append(Serve(policy, tmp_path / f"unused-{i}.sqlite"))
        yield proxies
    finally:
        for p in proxies:
            print(p.stop()[-4000:])


def test_64_clients_on_two_proxies_get_exactly_10_answers(two_proxies):
    answered, refused, other = [], [], []
    start = threading.Barrier(64)

    def client(i: int) -> None:
        try:
            with psycopg.connect(two_proxies[i % 2].dsn("alice"), autocommit=True) as con:
                con.execute("SET dpsql.cache = off")
                start.wait(timeout=120)  # every client logged in, or the barrier breaks for all
                try:
                    answered.append(con.execute("SELECT COUNT(*) FROM people").fetchone()[0])
                except psycopg.Error as e:
                    (refused if e.sqlstate == "53000" else other).append(e)
        except (psycopg.Error, threading.BrokenBarrierError) as e:  # a login refused: the test fails
            other.append(e)
            start.abort()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not other, other[:3]
    assert len(answered) == 10 and len(refused) == 54
    for proxy in two_proxies:  # both proxies read the one ledger
        with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
            row = con.execute("SHOW dpsql.budget").fetchone()
            assert row[8] == 10 and row[4] == pytest.approx(0.0, abs=1e-12)


def test_the_answer_cache_is_shared(two_proxies):
    sql = "SELECT sex, COUNT(*) FROM people GROUP BY sex"
    with psycopg.connect(two_proxies[0].dsn("bob"), autocommit=True) as con:
        first = con.execute(sql).fetchall()
    with psycopg.connect(two_proxies[1].dsn("bob"), autocommit=True) as con:
        again = con.execute(sql).fetchall()
        assert again == first  # the same noisy answer, not a second draw
        assert con.execute("SHOW dpsql.budget").fetchone()[8] == 1  # charged once


def test_ledger_unreachable_means_refused(two_proxies, ledger_server):
    with psycopg.connect(two_proxies[0].dsn("bob"), autocommit=True) as con:
        con.execute("SET dpsql.cache = off")
        ledger_server.stop()
        with pytest.raises(psycopg.Error) as info:
            con.execute("SELECT COUNT(*) FROM people").fetchall()
        assert info.value.sqlstate == "58000" and "ledger could not record the charge" in str(info.value)
        assert "nothing was released" in info.value.diag.message_hint
