"""Exact budget arithmetic: 1000 queries of 0.001 fit in epsilon = 1, the 1001st does not."""

from __future__ import annotations

from fractions import Fraction

import pytest

import dpsql
from dpsql.accounting.cost import Cost
from dpsql.accounting.filters import BasicFilter, Totals
from dpsql.config import BudgetPolicy
from dpsql.errors import PolicyError
from dpsql.ledger import Ledger

from .conftest import write_policy


def test_float_sum_would_get_this_wrong():
    total = 0.0
    for _ in range(1000):
        total += 0.001
    assert total > 1.0  # why the ledger sums exact rationals


def test_exactly_1000_queries_of_a_thousandth(small_policy, tmp_path):
    policy = write_policy(small_policy.parent, epsilon=1.0, query_epsilon=0.001)
    conn = dpsql.connect(policy, user="alice", ledger=tmp_path / "exact.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    for i in range(1000):
        cur.execute("SELECT COUNT(*) FROM people")
        assert cur.dp["cost"] == {"epsilon": 0.001, "delta": 0.0}
    assert conn.session.budget()["epsilon"]["spent"] == Fraction(1)
    assert cur.dp["remaining"]["epsilon"] == 0.0
    with pytest.raises(dpsql.BudgetExceeded) as info:
        cur.execute("SELECT COUNT(*) FROM people")
    err = info.value
    assert err.sqlstate == "53000"
    assert "remaining epsilon=0" in str(err) and "spent epsilon=1 of 1" in str(err) and "basic filter" in str(err)
    assert conn.session.budget()["queries"] == 1000  # the refused query charged nothing
    conn.close()


def test_refusal_names_what_is_left(small_policy, tmp_path):
    policy = write_policy(small_policy.parent, epsilon=1.0, query_epsilon=0.4)
    conn = dpsql.connect(policy, user="alice", ledger=tmp_path / "left.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SELECT COUNT(*) FROM people")
    cur.execute("SELECT COUNT(*) FROM people")
    with pytest.raises(dpsql.BudgetExceeded) as info:
        cur.execute("SELECT COUNT(*) FROM people")
    assert "remaining epsilon=0.2" in str(info.value)
    assert "SET dpsql.epsilon = 0.2" in info.value.hint
    cur.execute("SET dpsql.epsilon = 0.2")
    cur.execute("SELECT COUNT(*) FROM people")  # the cheaper query still fits, exactly
    assert conn.session.budget()["epsilon"]["remaining"] == 0
    conn.close()


def test_a_delta_above_what_is_left_gets_the_smaller_delta_as_its_fix(conn):
    """The basic filter's whole delta serves releases: the refusal names what is left and says to
    SET a smaller delta (it said the budget provided no delta at all, and to edit the policy)."""
    cur = conn.cursor()
    cur.execute("SET dpsql.mechanism = gaussian")
    cur.execute("SET dpsql.delta = 0.5")
    with pytest.raises(dpsql.BudgetExceeded) as info:
        cur.execute("SELECT COUNT(*) FROM people")
    assert "delta=1e-06 left" in str(info.value) and "SET dpsql.delta to at most 1e-06" in info.value.hint
    cur.execute("SET dpsql.delta = 1e-7")
    cur.execute("SELECT COUNT(*) FROM people")
    assert conn.session.budget()["queries"] == 1


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM dpsql_budget b JOIN people p ON true",
        "WITH x AS (SELECT * FROM dpsql_budget) SELECT * FROM x",
        "SELECT COUNT(*) FROM people WHERE age < (SELECT epsilon_remaining FROM dpsql_budget)",
    ],
)
def test_dpsql_budget_is_read_on_its_own(conn, sql):
    cur = conn.cursor()
    with pytest.raises(dpsql.Error) as info:
        cur.execute(sql)
    assert info.value.sqlstate == "0A000" and "on its own" in str(info.value)
    cur.execute("SELECT epsilon_remaining FROM dpsql_budget")
    assert cur.fetchone()[0] > 0 and conn.session.budget()["queries"] == 0


def test_cache_answers_repeats_for_free(conn):
    cur = conn.cursor()
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    first = cur.fetchall()
    cur.execute("SELECT  sex, count(*)  FROM people GROUP BY sex")  # same query, other spelling
    assert cur.fetchall() == first
    assert cur.dp["cached"] is True and cur.dp["cost"]["epsilon"] == 0
    assert conn.session.budget()["queries"] == 1
    cur.execute("SET dpsql.cache = off")
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert cur.dp["cached"] is False
    assert conn.session.budget()["queries"] == 2


def test_the_cache_is_keyed_by_every_setting_that_changes_an_answer(conn):
    """A setting that changes an answer's accuracy (target_error, confidence, ...) runs the query anew;
    one that cannot change it (reuse) still finds the cached answer."""
    cur = conn.cursor()
    query = "SELECT sex, COUNT(*) FROM people GROUP BY sex"
    cur.execute(query)
    spent = conn.session.budget()["queries"]
    for setting in ("SET dpsql.target_error = 5", "SET dpsql.confidence = 0.9", "SET dpsql.planner = pld"):
        cur.execute(setting)
        cur.execute(query)
        assert cur.dp["cached"] is False, setting
        assert conn.session.budget()["queries"] == spent + 1, setting
        spent += 1
    cur.execute("SET dpsql.reuse = off")
    cur.execute(query)
    assert cur.dp["cached"] is True and conn.session.budget()["queries"] == spent


def test_the_cache_is_keyed_by_the_policy_that_shapes_an_answer(small_policy, tmp_path):
    """A cached answer outlives the process in the ledger: after the policy's bounds or limits
    change, the repeated query runs anew at the new ones; under the same policy it is cached."""
    query = "SELECT AVG(age) FROM people"
    ledger = tmp_path / "kept.sqlite"

    def run() -> bool:
        conn = dpsql.connect(small_policy, user="alice", ledger=ledger)
        try:
            cur = conn.cursor()
            cur.execute(query)
            return cur.dp["cached"]
        finally:
            conn.close()

    assert run() is False and run() is True
    text = small_policy.read_text()
    small_policy.write_text(
        text.replace("columns.age = { lower = 0, upper = 100 }", "columns.age = { lower = 0, upper = 90 }")
    )
    assert run() is False and run() is True
    small_policy.write_text(small_policy.read_text() + "\n[limits]\nmax_join_rows = 10000\n")
    assert run() is False


def test_budgets_are_per_analyst(small_policy):
    a = dpsql.connect(small_policy, user="alice")
    b = dpsql.connect(small_policy, user="bob")
    a.cursor().execute("SELECT COUNT(*) FROM people")
    assert a.session.budget()["queries"] == 1
    assert b.session.budget()["queries"] == 0
    assert b.session.budget()["epsilon"]["total"] == 2
    a.close()
    b.close()


def test_unknown_analyst_is_refused(small_policy):
    with pytest.raises(dpsql.Error) as info:
        dpsql.connect(small_policy, user="mallory")
    assert info.value.sqlstate == "28000"


def test_basic_filter_is_exact():
    f = BasicFilter(Fraction(1), Fraction(1, 10**6))
    totals = Totals()
    cost = Cost.pure(Fraction(1, 1000))
    for _ in range(1000):
        assert f.admits_cost(totals, cost)
        totals = totals.plus(f.usage(cost))
    assert not f.admits_cost(totals, cost)
    assert totals.epsilon == 1


def test_ledger_survives_reopen(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    budget = BudgetPolicy("basic", Fraction(1), Fraction(0))
    charge = led.charge("alice", budget, Cost.pure(Fraction(1, 3)), "SELECT 1", {})
    led.record_release(charge.id, [[1]])
    led.close()
    again = Ledger(tmp_path / "l.sqlite")
    assert again.spent("alice", budget).epsilon == Fraction(1, 3)
    assert again.history("alice")[0]["released"] == [[1]]


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request, tmp_path):
    if request.param == "postgres":
        from dpsql.ledger import PostgresLedger

        led = PostgresLedger(request.getfixturevalue("pg_ledger_url"))
    else:
        led = Ledger(tmp_path / "any.sqlite")
    yield led
    led.close()


def test_ledger_is_exact_on_every_backend(any_ledger):
    budget = BudgetPolicy("basic", Fraction(1), Fraction(0))
    cost = Cost.pure(Fraction(1, 1000))
    for _ in range(1000):
        any_ledger.charge("alice", budget, cost, "SELECT 1", {})
    with pytest.raises(dpsql.BudgetExceeded):
        any_ledger.charge("alice", budget, cost, "SELECT 1", {})
    totals = any_ledger.spent("alice", budget)
    assert totals.epsilon == 1 and totals.queries == 1000
    assert len(any_ledger.history("alice")) == 1000
    any_ledger.cache_put("alice", "k", {"rows": [[1]]})
    assert any_ledger.cache_get("alice", "k") == {"rows": [[1]]}


def test_grants_open_segments_for_non_basic_filters(any_ledger):
    budget = BudgetPolicy("zcdp", Fraction(1), Fraction(1, 10**6))
    cost = Cost.pure(Fraction(1, 10))
    answered = 0
    while True:
        try:
            any_ledger.charge("bob", budget, cost, "q", {})
            answered += 1
        except dpsql.BudgetExceeded:
            break
    assert answered == 4
    any_ledger.grant("bob", Fraction(1), Fraction(1, 10**6))
    for _ in range(4):
        any_ledger.charge("bob", budget, cost, "q", {})
    with pytest.raises(dpsql.BudgetExceeded):
        any_ledger.charge("bob", budget, cost, "q", {})


def test_recorded_costs_re_account_as_dp_events(small_policy, tmp_path):
    from dp_accounting import pld

    conn = dpsql.connect(small_policy, user="alice", ledger=tmp_path / "e.sqlite")
    cur = conn.cursor()
    cur.execute("SELECT sex, COUNT(*), AVG(age) FROM people GROUP BY sex")
    cost = conn.session.ledger.history("alice")[0]["cost"]
    accountant = pld.PLDAccountant()
    accountant.compose(cost.dp_event())
    # The recorded mechanisms re-account to what was charged (up to PLD's pessimistic
    # discretization, 1e-4 per mechanism here).
    assert abs(accountant.get_epsilon(1e-9) - float(cost.epsilon)) < 1e-3
    conn.close()


def _capped(small_policy, cap: str = "2") -> dpsql.Connection:
    text = small_policy.read_text().replace(
        "query_epsilon = 1.0\n", f"query_epsilon = 1.0\nmax_query_epsilon = {cap}\n"
    )
    small_policy.write_text(text)
    return dpsql.connect(small_policy, user="alice")


@pytest.mark.parametrize(
    "how",
    [
        "SET dpsql.epsilon = 2.5",
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 3) COUNT(*) FROM people",
        "batch",
        "target",
    ],
)
def test_max_query_epsilon_refuses_a_larger_release_free(small_policy, how):
    """The policy's cap on one release: a SET, a query's own option, a batch or a target error
    that asks for more is refused, and nothing is charged; up to the cap is answered."""
    conn = _capped(small_policy)
    cur = conn.cursor()
    try:
        with pytest.raises(dpsql.ProgrammingError, match="at most epsilon=2") as info:
            if how == "batch":
                cur.execute_batch(["SELECT COUNT(*) FROM people", "SELECT AVG(age) FROM people"], epsilon=4)
            elif how == "target":
                cur.execute("SET dpsql.target_error = 0.001")
                cur.execute("SELECT COUNT(*) FROM people")
            else:
                cur.execute(how)
        assert info.value.sqlstate == "22023"
        assert conn.session.budget()["queries"] == 0
        cur.execute("RESET dpsql.target_error")
        cur.execute("SET dpsql.epsilon = 2")
        cur.execute("SELECT COUNT(*) FROM people")
        assert conn.session.budget()["queries"] == 1
    finally:
        conn.close()


def test_max_query_epsilon_below_the_default_query_epsilon_is_a_policy_error(small_policy):
    with pytest.raises(PolicyError, match="max_query_epsilon = 0.5 is below query_epsilon = 1"):
        _capped(small_policy, "0.5")


def test_a_grant_past_what_the_filter_can_compute_is_refused_and_not_recorded(any_ledger):
    """A gdp budget past ε 700 would fail every later answer with an internal error."""
    budget = BudgetPolicy("gdp", Fraction(600), Fraction(1, 10**6))
    any_ledger.grant("carol", Fraction(90), Fraction(0), budget)
    with pytest.raises(dpsql.OperationalError, match="past the gdp filter's 700") as info:
        any_ledger.grant("carol", Fraction(20), Fraction(0), budget)
    assert info.value.sqlstate == "22023" and "zcdp" in info.value.hint
    assert [g["epsilon"] for g in any_ledger.grants("carol")] == [90]
    any_ledger.charge("carol", budget, Cost.pure(Fraction(1)), "q", {})
