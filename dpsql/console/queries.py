"""The EXPLAIN playground and the charged run, as blocking steps on a login's Session.

A query form carries the SQL and the settings it is planned at (epsilon, delta, mechanism);
they are applied with SET before each step, so what EXPLAIN showed is what the confirmed run
is planned at. A run goes ahead only if its cost is still the one the analyst confirmed."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from starlette.datastructures import FormData

from ..config import MECHANISMS
from ..errors import Error, InternalError, invalid_parameter, unsupported
from ..session import Result, Session
from ..sql.classify import Explain, Query, classify
from .logins import Login


@dataclass(frozen=True)
class QueryForm:
    sql: str
    epsilon: str = ""  # "" keeps the policy's default
    delta: str = ""
    mechanism: str = ""

    @classmethod
    def read(cls, form: FormData) -> "QueryForm":
        """The form's fields, checked as values before any SQL is built from them."""
        fields = {k: str(form.get(k, "")).strip() for k in ("epsilon", "delta", "mechanism")}
        for key in ("epsilon", "delta"):
            if fields[key]:
                try:
                    value = float(fields[key])
                except ValueError:
                    raise invalid_parameter(f"{key} must be a number, not {fields[key]!r}") from None
                if not math.isfinite(value) or value < 0 or (key == "epsilon" and value == 0):
                    raise invalid_parameter(f"{key} must be a positive number")
                fields[key] = repr(value)
        if fields["mechanism"] and fields["mechanism"] not in MECHANISMS:
            raise invalid_parameter(f"mechanism must be one of {', '.join(MECHANISMS)}")
        return cls(sql=str(form.get("sql", "")), **fields)

    def settings(self) -> list[str]:
        """The SET and RESET statements that put a session at this form's settings."""
        out = []
        for name, value in (("epsilon", self.epsilon), ("delta", self.delta), ("mechanism", self.mechanism)):
            out.append(f"SET dpsql.{name} = {value}" if value else f"RESET dpsql.{name}")
        return out


def _query(session: Session, sql: str) -> Query:
    stmt = classify(sql, session.policy.limits)
    if isinstance(stmt, Explain):
        stmt = stmt.query
    if not isinstance(stmt, Query):
        raise unsupported(
            "the console answers one SELECT query at a time",
            hint="settings are the form's fields; SHOW dpsql.budget is the Budget page",
        )
    return stmt


def explain(login: Login, q: QueryForm) -> dict[str, Any]:
    """EXPLAIN: the plan, noise, expected errors, cost and the budget left after it; nothing is charged."""
    with login.lock:
        for statement in q.settings():
            login.session.execute(statement)
        stmt = _query(login.session, q.sql)
        return _guarded(lambda: login.session.explain_plan(stmt.tree, stmt.options))


@dataclass(frozen=True)
class Ran:
    """A confirmed run: its result, or (changed) the new plan when the cost moved since confirmation."""

    result: Result | None
    changed: dict[str, Any] | None = None


def run(login: Login, q: QueryForm, confirmed: dict[str, float]) -> Ran:
    """Answer the query, charged, if it still costs no more than the analyst confirmed (it may
    cost less: a profile of it released since is reused, `session/auto.Kept.reusable`)."""
    with login.lock:
        for statement in q.settings():
            login.session.execute(statement)
        stmt = _query(login.session, q.sql)
        info = _guarded(lambda: login.session.explain_plan(stmt.tree, stmt.options))
        if not info["public"] and any(v > confirmed.get(k, 0.0) for k, v in info["cost"].items()):
            return Ran(None, info)
        return Ran(login.session.execute(q.sql))


def confirmed_cost(form: FormData) -> dict[str, float]:
    """The cost the confirmation page showed, as the run's form sends it back."""
    try:
        return {k: float(v) for k, v in json.loads(str(form.get("cost", ""))).items()}
    except (ValueError, TypeError, AttributeError):
        raise invalid_parameter("the confirmation is missing its cost", hint="EXPLAIN the query again") from None


T = TypeVar("T")


def _guarded(fn: Callable[[], T]) -> T:
    """Errors from planning outside Session.execute, turned into dpsql errors as it does."""
    try:
        return fn()
    except Error:
        raise
    except Exception as e:  # a bug must not show a traceback or a value
        raise InternalError(
            "internal error while planning the query; nothing was charged",
            hint=f"please report it ({type(e).__name__})",
        ) from e
