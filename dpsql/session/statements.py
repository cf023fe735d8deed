"""A session's parsed statements, kept by text: parsing is pure, and a dashboard resends the
same texts."""

from __future__ import annotations

from collections import OrderedDict

from ..sql.classify import Query, Statement, classify
from ..sql.limits import QueryLimits

STATEMENT_CACHE_SIZE = 256  # query texts whose parse a session keeps


class Statements:
    """classify(), memoised for SELECTs. The tree is shared: whatever would change it works on a
    copy (bind_parameters, and planning before analysis)."""

    def __init__(self, limits: QueryLimits, size: int = STATEMENT_CACHE_SIZE):
        self.limits, self.size = limits, size
        self._kept: OrderedDict[str, Query] = OrderedDict()

    def classify(self, sql: str) -> Statement:
        hit = self._kept.get(sql)
        if hit is not None:
            self._kept.move_to_end(sql)
            return hit
        stmt = classify(sql, self.limits)
        if isinstance(stmt, Query):
            self._kept[sql] = stmt
            if len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return stmt
