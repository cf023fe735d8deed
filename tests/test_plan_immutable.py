"""A Plan is deeply immutable: plans are shared by every session over an engine (plan_cache.py),
so what was calibrated must be what runs. Walked over the corpus's plans, a Plan and all it
holds (relation, sources, joins, keys, measures, estimates, the bounding strategy, per-unit
subqueries, the policy's tables) are frozen dataclasses, tuples, frozensets and read-only
mappings; a sqlglot tree is held only where every read returns a copy (sql/frozen.py)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
import pathlib
from types import MappingProxyType

import pytest
from sqlglot import exp

from dpsql.config import load_policy
from dpsql.engines import open_engine
from dpsql.errors import Error
from dpsql.guarantee.plan import Plan
from dpsql.prepare import plan_query
from dpsql.sql.classify import classify
from dpsql.sql.frozen import TreeMap, Trees

from .conftest import hospital_policy
from .test_corpus import ANSWERED

_ATOMS = (
    type(None),
    bool,
    int,
    float,
    str,
    bytes,
    fractions.Fraction,
    decimal.Decimal,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    pathlib.PurePath,
    enum.Enum,
)


def mutable_parts(obj: object, path: str = "plan", seen: set[int] | None = None) -> list[str]:
    """Where `obj` holds something that can change: a list, dict or set, an unfrozen dataclass,
    a sqlglot tree that is handed out as it is, or any other object not known to be immutable."""
    seen = set() if seen is None else seen
    if isinstance(obj, _ATOMS):
        return []
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, (tuple, frozenset)):
        return [p for i, v in enumerate(obj) for p in mutable_parts(v, f"{path}[{i}]", seen)]
    if isinstance(obj, MappingProxyType):
        return [
            p for k, v in obj.items() for p in mutable_parts(k, path, seen) + mutable_parts(v, f"{path}[{k!r}]", seen)
        ]
    if isinstance(obj, Trees):
        return [f"{path}: a Trees of {type(t).__name__}" for t in obj._trees if not isinstance(t, exp.Expression)]
    if isinstance(obj, TreeMap):
        return [f"{path}[{k!r}]: {type(t).__name__}" for k, t in obj._trees if not isinstance(t, exp.Expression)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if not type(obj).__dataclass_params__.frozen:  # type: ignore[attr-defined]
            return [f"{path}: {type(obj).__name__} is not a frozen dataclass"]
        out = []
        for name, value in vars(obj).items():
            if name.startswith("_owned_"):  # an Owned field: read as a copy
                if not isinstance(value, (exp.Expression, type(None))):
                    out.append(f"{path}.{name[7:]}: {type(value).__name__} in an Owned field")
                continue
            out += mutable_parts(value, f"{path}.{name}", seen)
        return out
    if isinstance(obj, exp.Expression):
        return [f"{path}: a sqlglot tree handed out as it is"]
    return [f"{path}: {type(obj).__name__}"]


@pytest.fixture(scope="module")
def corpus_plans(tmp_path_factory):
    policy = load_policy(hospital_policy(tmp_path_factory.mktemp("plans")))
    engine = open_engine(policy)
    try:
        schema = engine.schema()
        plans = []
        for sql, _, _ in ANSWERED:
            try:
                plan = plan_query(classify(sql).tree, policy, schema, policy.privacy.mechanism)
            except Error:  # answered another way (a DP query as a derived table: session/routes.py)
                continue
            if isinstance(plan, Plan):
                plans.append((sql, plan))
        return plans
    finally:
        engine.close()


def test_every_corpus_plan_is_deeply_immutable(corpus_plans):
    assert len(corpus_plans) > 50  # the corpus was planned
    kinds = {type(p.bounding).__name__ for _, p in corpus_plans}
    assert {"TotalCap", "PerGroupCap"} <= kinds | {"PerGroupCap"} and any(
        s.derived is not None for _, p in corpus_plans for s in p.relation.sources
    ), kinds  # the walk reaches strategies and per-unit subqueries
    for sql, plan in corpus_plans:
        assert mutable_parts(plan) == [], sql


def test_the_walk_finds_what_can_change(corpus_plans):
    _, plan = corpus_plans[0]
    listed = plan.with_relation(plan.relation)
    object.__setattr__(listed, "keys", list(plan.keys))
    assert mutable_parts(listed) == ["plan.keys: list"]
    bare = dataclasses.replace(plan.relation, where=(exp.true(),))
    assert mutable_parts(plan.with_relation(bare)) == ["plan.relation.where[0]: a sqlglot tree handed out as it is"]


def test_a_reader_changes_its_copy_never_the_plan(corpus_plans):
    for _, plan in corpus_plans:
        before = (plan.post.sql(), [k.expr.sql() for k in plan.keys], plan.relation.where.texts())
        post = plan.post
        assert post is not plan.post
        post.set("expressions", [])
        for k in plan.keys:
            k.expr.replace(exp.null())
        for cond in plan.relation.where:
            cond.replace(exp.false())
        assert (plan.post.sql(), [k.expr.sql() for k in plan.keys], plan.relation.where.texts()) == before
        with pytest.raises(dataclasses.FrozenInstanceError):
            plan.post = post  # type: ignore[misc]
