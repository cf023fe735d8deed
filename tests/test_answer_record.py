"""Result.dp is a frozen record (dpsql/answer_record.py) read by attribute inside dpsql; its JSON
form, which leaves the process (the CLI's --json, the answer cache, the release record), is
pinned here byte for byte as dpsql wrote it when Result.dp was a dict, and `cursor.dp` still
reads as the mapping the README shows."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import MappingProxyType

import pytest

from dpsql.answer_record import (
    Amount,
    AnswerRecord,
    ChosenBounds,
    ChosenLimits,
    CountCorrection,
    ExpectedError,
    MeasureNoise,
    frozen_ci,
)

_CI = {"sex": None, "n": [(1.5, 2.5), None]}
_ANSWER = AnswerRecord(
    cost=Amount(0.5, 0.0),
    remaining=Amount.of({"epsilon": 9.5, "delta": 1e-06}),
    ci=frozen_ci(_CI),
    confidence=0.95,
    mechanism="laplace",
    cached=False,
    noise=(MeasureNoise("COUNT(*)", "laplace", 2.0),),
    receipt=7,
)
_LIMITS = ChosenLimits(
    None,
    MappingProxyType({"amount": (-2.0, 3.5)}),
    0.1,
    False,
    ExpectedError(0.04, 0.28, 0.42, (("SUM(amount)", 0.04, 0.28, None),)),
)
_FIX = CountCorrection(3, 1.25, (1.0, 1.5))

# The JSON each kind of answer carried before Result.dp was a record (the dicts' key order as
# session/answer.py, explain.py, routes.py, auto.py, batch.py and synopses/route.py built them).
_BEFORE = [
    (
        _ANSWER,
        '{"cost": {"epsilon": 0.5, "delta": 0.0}, "remaining": {"epsilon": 9.5, "delta": 1e-06}, '
        '"ci": {"sex": null, "n": [[1.5, 2.5], null]}, "confidence": 0.95, "mechanism": "laplace", '
        '"cached": false, "noise": [{"measure": "COUNT(*)", "kind": "laplace", "scale": 2.0}], "receipt": 7}',
    ),
    (
        dataclasses.replace(_ANSWER, notice="rows where x is NULL are in no group"),
        '{"cost": {"epsilon": 0.5, "delta": 0.0}, "remaining": {"epsilon": 9.5, "delta": 1e-06}, '
        '"ci": {"sex": null, "n": [[1.5, 2.5], null]}, "confidence": 0.95, "mechanism": "laplace", '
        '"cached": false, "noise": [{"measure": "COUNT(*)", "kind": "laplace", "scale": 2.0}], "receipt": 7, '
        '"notice": "rows where x is NULL are in no group"}',
    ),
    (
        dataclasses.replace(_ANSWER, batch=2, ci=None),  # a batch member; a derived table drops ci
        '{"cost": {"epsilon": 0.5, "delta": 0.0}, "remaining": {"epsilon": 9.5, "delta": 1e-06}, '
        '"confidence": 0.95, "mechanism": "laplace", "cached": false, '
        '"noise": [{"measure": "COUNT(*)", "kind": "laplace", "scale": 2.0}], "receipt": 7, "batch": 2}',
    ),
    (
        dataclasses.replace(_ANSWER, noise=(), bounds=ChosenBounds(limits=_LIMITS, correction=_FIX)),
        '{"cost": {"epsilon": 0.5, "delta": 0.0}, "remaining": {"epsilon": 9.5, "delta": 1e-06}, '
        '"ci": {"sex": null, "n": [[1.5, 2.5], null]}, "confidence": 0.95, "mechanism": "laplace", '
        '"cached": false, "noise": [], "receipt": 7, "bounds": {"max_contributions": null, '
        '"clamps": {"amount": [-2.0, 3.5]}, "profile_epsilon": 0.1, "profile_reused": false, '
        '"expected": {"bias": 0.04, "noise": 0.28, "at_policy_limits": 0.42, '
        '"by_aggregate": {"SUM(amount)": {"bias": 0.04, "noise": 0.28, "value": null}}}, '
        '"correction": {"reach": 3, "factor": 1.25, "factor_interval": [1.0, 1.5]}}}',
    ),
    (
        dataclasses.replace(_ANSWER, bounds=ChosenBounds(max_groups=2, correction=_FIX)),
        '{"cost": {"epsilon": 0.5, "delta": 0.0}, "remaining": {"epsilon": 9.5, "delta": 1e-06}, '
        '"ci": {"sex": null, "n": [[1.5, 2.5], null]}, "confidence": 0.95, "mechanism": "laplace", '
        '"cached": false, "noise": [{"measure": "COUNT(*)", "kind": "laplace", "scale": 2.0}], "receipt": 7, '
        '"bounds": {"max_groups": 2, "correction": {"reach": 3, "factor": 1.25, "factor_interval": [1.0, 1.5]}}}',
    ),
    (
        AnswerRecord(
            cost=Amount(0.0, 0.0),
            remaining=Amount(9.5, 0.0),
            ci=frozen_ci(_CI),
            confidence=0.9,
            mechanism="synopsis",
            cached=False,
            synopsis="by_sex",
            receipt=3,
            notice="answered from synopsis by_sex, free",
        ),
        '{"cost": {"epsilon": 0.0, "delta": 0.0}, "remaining": {"epsilon": 9.5, "delta": 0.0}, '
        '"ci": {"sex": null, "n": [[1.5, 2.5], null]}, "confidence": 0.9, "mechanism": "synopsis", '
        '"cached": false, "synopsis": "by_sex", "receipt": 3, "notice": "answered from synopsis by_sex, free"}',
    ),
    (
        AnswerRecord(
            cost=Amount(1.0, 0.0),
            remaining=Amount(8.0, 0.0),
            explain=True,
            admits_more=8,
            admitted=True,
            remaining_now=Amount(9.0, 0.0),
        ),
        '{"cost": {"epsilon": 1.0, "delta": 0.0}, "remaining": {"epsilon": 8.0, "delta": 0.0}, "explain": true, '
        '"admits_more": 8, "admitted": true, "remaining_now": {"epsilon": 9.0, "delta": 0.0}}',
    ),
    (AnswerRecord(notice="free"), '{"notice": "free"}'),
]


@pytest.mark.parametrize("record, before", _BEFORE)
def test_the_json_form_is_byte_identical_to_the_dict_it_replaces(record, before):
    assert json.dumps(record.as_dict(), default=str) == before
    assert json.dumps(dict(record), default=str) == before  # the mapping view is the same form
    again = AnswerRecord.of(json.loads(before))  # as the answer cache reads it back
    assert again == record and json.dumps(again.as_dict(), default=str) == before


def test_the_record_is_frozen_and_reads_as_the_readme_shows():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _ANSWER.cost = None
    assert isinstance(_ANSWER, Mapping) and isinstance(_ANSWER.ci, MappingProxyType)
    assert _ANSWER["cost"] == {"epsilon": 0.5, "delta": 0.0} and _ANSWER.cost.epsilon == 0.5
    assert _ANSWER["ci"]["n"] == [(1.5, 2.5), None] and _ANSWER.ci["n"] == ((1.5, 2.5), None)
    assert "notice" not in _ANSWER and _ANSWER.get("notice") is None and "receipt" in _ANSWER
    with pytest.raises(KeyError):
        _ANSWER["notice"]
    with pytest.raises(KeyError):
        _ANSWER["as_dict"]  # a method is no key


def test_what_leaves_a_real_answer_is_the_json_form(session):
    """An answer from DuckDB: its cache entry, its release record and the cached answer served
    again carry the JSON form with the keys in the order they always had."""
    session.execute("SET dpsql.cache = on")
    session.execute("SET dpsql.bounds = policy")
    sql = "SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY sex"
    first = session.execute(sql)
    assert isinstance(first.dp, AnswerRecord) and first.dp.cost is not None and first.dp.cost.epsilon > 0
    order = ["cost", "remaining", "ci", "confidence", "mechanism", "cached", "noise", "receipt"]
    (released,) = [h["released"] for h in session.ledger.history("alice") if h["id"] == first.dp.receipt]
    assert list(released) == ["names", "rows", "ci", "confidence"]
    assert json.dumps(released["ci"]) == json.dumps(first.dp["ci"]) and first.dp["ci"]["sex"] is None
    assert all(len(iv) == 2 for iv in released["ci"]["n"])
    again = session.execute(sql)
    assert again.dp is not None and again.dp.cached and again.dp.receipt == first.dp.receipt
    assert list(again.dp) == order and again.dp.cost == Amount(0.0, 0.0)
    assert again.dp.ci == first.dp.ci and again.rows == first.rows and again.dp.noise == first.dp.noise


def test_cursor_dp_reads_both_ways_as_the_readme_shows(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.bounds = policy")
    cur.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")
    assert cur.dp["cost"] == {"epsilon": cur.dp.cost.epsilon, "delta": cur.dp.cost.delta} and cur.dp.cost.epsilon > 0
    assert cur.dp["ci"]["n"] == [tuple(iv) for iv in cur.dp.ci["n"]] and cur.dp["ci"]["sex"] is None


def test_the_wire_notices_read_the_record_as_they_read_the_dict():
    """The texts a client is told beside an answer (server/app.py), as they were."""
    from dpsql.server.app import _notices

    assert _notices(_ANSWER) == ["dpsql: cost epsilon=0.5 delta=0; remaining epsilon=9.5 delta=1e-06"]
    cached = dataclasses.replace(_ANSWER, cached=True, cost=Amount(0.0, 0.0), batch=3, notice="n")
    assert _notices(cached) == [
        "dpsql: one charge for this batch of 3 queries, answered from the cache, free; "
        "remaining epsilon=9.5 delta=1e-06",
        "dpsql: n",
    ]
    units = dataclasses.replace(_ANSWER, bounds=ChosenBounds(max_groups=2, correction=_FIX))
    assert _notices(units)[1] == (
        "dpsql: limits chosen for this query (dpsql.bounds = auto): at most 2 group(s) per unit; "
        "counts scaled by 1.25 (1 to 1.5) for what these limits cut"
    )
    chosen = dataclasses.replace(_ANSWER, bounds=ChosenBounds(limits=_LIMITS))
    assert _notices(chosen)[1] == (
        "dpsql: limits chosen for this query (dpsql.bounds = auto): amount clamped to [-2, 3.5]; the profile's "
        "model expects a relative error of about 4.0% cut by these limits and 28.0% of noise (summed over the "
        "aggregates; 42.0% at the policy's limits)"
    )
    explained = AnswerRecord(
        cost=Amount(1.0, 0.0),
        remaining=Amount(8.0, 0.0),
        explain=True,
        admits_more=8,
        admitted=False,
        remaining_now=Amount(0.5, 0.0),
    )
    assert _notices(explained) == [
        "dpsql: EXPLAIN only, nothing was charged; running the query would be refused: it costs "
        "epsilon=1 delta=0 and epsilon=0.5 delta=0 is left"
    ]
    assert _notices(dataclasses.replace(explained, admitted=True)) == [
        "dpsql: EXPLAIN only, nothing was charged; running the query would cost epsilon=1 delta=0 and leave "
        "epsilon=8 delta=0; the budget admits 8 more like it"
    ]
    assert _notices(AnswerRecord(notice="free")) == ["dpsql: free"]
