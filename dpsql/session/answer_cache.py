"""The answer cache: a DP answer served again free, keyed by the query, every setting that can
change an answer, the data version and the policy's part of an answer; an entry goes out only
with the receipt of its recorded charge (guard.check_cached)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from ..answer_record import Amount, AnswerRecord
from ..config import Policy
from ..guarantee import guard
from ..sql.options import QueryOptions
from . import settings
from .result import Result
from .setting_table import ANSWER_NEUTRAL

if TYPE_CHECKING:
    from .pipeline import Session

log = logging.getLogger("dpsql")


def cache_key(session: Session, tree: exp.Query, options: QueryOptions) -> str:
    dp = {k: v for k, v in settings.values(session.settings).items() if k not in ANSWER_NEUTRAL}
    text = json.dumps(
        [
            tree.sql(dialect="postgres", normalize=True),
            dp,
            session.engine.data_version(),
            repr(options),
            session._shaping,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def receipted(session: Session, cached: dict[str, Any]) -> bool:
    """A cached answer goes out again only with the receipt of its recorded charge; one
    without (or with a forged one) is not an answer: the query runs and is charged anew."""
    try:
        guard.check_cached(cached, lambda charge_id: session.ledger.release_recorded(session.user.name, charge_id))
    except guard.ReleaseRefused:
        log.warning("a cached answer without a valid receipt was ignored")
        return False
    return True


def cached_answer(session: Session, cached: dict[str, Any]) -> Result:
    rows = [tuple(r) for r in cached["rows"]]
    f, totals = session.ledger.state(session.user.name, session.budget_policy)
    dp = replace(
        AnswerRecord.of(cached["dp"]),
        cost=Amount(0.0, 0.0),
        remaining=Amount.of(f.remaining(totals)),
        cached=True,
    )
    return Result(cached["names"], cached["types"], rows, f"SELECT {len(rows)}", dp)


def answer_shaping(policy: Policy) -> str:
    """What of the policy shapes an answer (each table's unit, limits, bounds, keys and types,
    the join limit), as text the same in every process: a cached answer computed under other
    bounds or limits is not served after the policy changes. Where a table's files live is not
    part of it (the data version is)."""
    tables = [
        (
            t.name,
            t.public,
            t.privacy_unit,
            t.max_groups,
            t.max_rows,
            t.max_contributions,
            [repr(c) for c in t.columns.values()],
        )
        for t in policy.tables.values()
    ]
    return hashlib.sha256(repr((tables, policy.limits.max_join_rows)).encode()).hexdigest()


def entry(result: Result) -> dict[str, Any]:
    dp = None if result.dp is None else result.dp.as_dict()
    return {"names": result.names, "types": result.types, "rows": [list(r) for r in result.rows], "dp": dp}
