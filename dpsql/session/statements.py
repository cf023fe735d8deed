"""A session's routed statements, kept by text: routing and parsing are pure, and a dashboard
resends the same texts."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence

from ..sql.classify import classify_one
from ..sql.limits import QueryLimits
from ..sql.route import Entry, Kind, Routed, route, route_one

STATEMENT_CACHE_SIZE = 256  # query texts whose parse a session keeps


class Statements:
    """sql/route.py's route, memoised for queries (by text and the front end's own routes). The
    tree is shared: whatever would change it works on a copy (bind_parameters, and planning
    before analysis)."""

    def __init__(self, limits: QueryLimits, size: int = STATEMENT_CACHE_SIZE):
        self.limits, self.size = limits, size
        self._kept: OrderedDict[tuple[str, Sequence[Entry], bool], Routed] = OrderedDict()
        self._lock = threading.Lock()  # the wire routes outside the session's lock

    def route(self, text: str, entries: Sequence[Entry] = ()) -> Routed:
        """A statement's way (a text of several statements is refused)."""
        return self._routed(text, entries, True)

    def route_one(self, part: str, entries: Sequence[Entry] = ()) -> Routed:
        """The way of one statement of a script, split from it already."""
        return self._routed(part, entries, False)

    def _routed(self, text: str, entries: Sequence[Entry], whole: bool) -> Routed:
        key = (text, entries, whole)
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None:
                self._kept.move_to_end(key)
                return hit
        read = self._classify
        routed = route(text, self.limits, entries, read) if whole else route_one(text, self.limits, entries, read)
        if routed.kind == Kind.QUERY and routed.error is None:
            with self._lock:
                self._kept[key] = routed
                if len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        return routed

    def _classify(self, text: str):
        return classify_one(text, self.limits)
