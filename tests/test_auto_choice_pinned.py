"""Auto bounds' choice pinned: for a fixed set of plans (the sample's queries of every family auto
bounds chooses for) and seeded noisy profiles (negative bins, empty columns, skewed rows, with and
without the correction, several epsilons and group counts), `auto_choice.choose` returns exactly
the Choice recorded in tests/fixtures/auto_choice.txt: the same limits, and every number of the
model to the last bit (floats compared by repr). A change to the search's speed must leave it
as it is; a deliberate change of the model rewrites it:

    DPSQL_UPDATE_GOLDEN=1 pytest tests/test_auto_choice_pinned.py
"""

from __future__ import annotations

import os
import random
from fractions import Fraction
from pathlib import Path

from dpsql import auto_bounds, auto_choice
from dpsql.prepare import plan_query
from dpsql.sql.classify import classify

from .conftest import sample_session

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "auto_choice.txt"
QUERIES = (
    "SELECT ward, COUNT(*) FROM visits GROUP BY ward",
    "SELECT COUNT(*) FROM visits",
    "SELECT ward, SUM(cost) FROM visits GROUP BY ward",
    "SELECT SUM(cost) FROM visits WHERE cost > 2000",
    "SELECT diagnosis, AVG(cost) FROM visits GROUP BY diagnosis",
    "SELECT ward, COUNT(*), SUM(cost), AVG(length_of_stay) FROM visits GROUP BY ward",
    "SELECT ward, STDDEV(cost), VARIANCE(length_of_stay) FROM visits GROUP BY ward",
    "SELECT ward, MEDIAN(cost) FROM visits GROUP BY ward",
    "SELECT MIN(length_of_stay), MAX(cost), QUANTILE(cost, 0.9) FROM visits",
    "SELECT sex, SUM(income), AVG(age) FROM patients GROUP BY sex",
)


def _profile(rng: random.Random, top: int, cols: int, shape: str) -> auto_bounds.Profile:
    steps = auto_bounds.steps(top)
    if shape == "skewed":
        rows = [rng.uniform(0, 5000) / (i + 1) ** 2 for i in range(len(steps) + 1)]
    elif shape == "heavy":
        rows = [rng.uniform(0, 300) for _ in steps] + [rng.uniform(500, 3000)]
    else:  # noisy: negative bins included
        rows = [rng.uniform(-500, 5000) for _ in range(len(steps) + 1)]
    values = []
    for _ in range(cols):
        if shape == "skewed":
            peak = rng.randrange(auto_bounds.VALUE_BINS)
            values.append(tuple(rng.uniform(0, 4000) / (1 + abs(i - peak)) for i in range(auto_bounds.VALUE_BINS)))
        elif shape == "heavy" and rng.random() < 0.3:
            values.append((0.0,) * auto_bounds.VALUE_BINS)  # a column with no mass
        else:
            values.append(tuple(rng.uniform(-500, 5000) for _ in range(auto_bounds.VALUE_BINS)))
    groups = tuple(rng.uniform(-200, 3000) for _ in range(rng.randrange(0, 6)))
    return auto_bounds.Profile(steps, tuple(rows), tuple(values), groups)


def cases() -> list[tuple[str, str]]:
    """(label, repr of the Choice) for every case, in order."""
    out = []
    with sample_session() as session:
        rng = random.Random(37)
        for sql in QUERIES:
            plan = plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace", None)
            if not auto_bounds.eligible(plan, "laplace") or auto_bounds.counts_units(plan, "laplace"):
                raise AssertionError(f"not chosen for: {sql}")
            top, cols = auto_bounds.ceiling(plan), auto_bounds.columns(plan)
            for shape in ("noisy", "skewed", "heavy"):
                for epsilon in (Fraction(1, 100), Fraction(1, 10), Fraction(3, 2)):
                    groups = rng.choice((1, 3, 12))
                    profile = _profile(rng, top, len(cols), shape)
                    for corrected in (False, True):
                        correct = auto_bounds.corrected(plan, groups) if corrected else ()
                        if corrected and not correct:
                            continue
                        choice = auto_choice.choose(plan, profile, cols, top, epsilon, groups, correct)
                        label = f"{sql} | {shape} eps={epsilon} groups={groups} corrected={corrected}"
                        out.append((label, repr(choice)))
    return out


def _text(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"-- {label}\n{choice}\n" for label, choice in pairs)


def test_the_choice_is_what_was_recorded():
    got = cases()
    assert len(got) >= 100
    if os.environ.get("DPSQL_UPDATE_GOLDEN"):
        FIXTURE.write_text(_text(got))
    expected = FIXTURE.read_text()
    # One case at a time, so a failure names the query, profile and setting that moved.
    recorded = expected.split("-- ")[1:]
    assert len(recorded) == len(got)
    for (label, choice), text in zip(got, recorded):
        assert f"{label}\n{choice}\n" == text, label
