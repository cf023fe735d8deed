"""Planning results shared by every session over one engine (a server's connections).

A plan and its calibration are pure functions of the query, the settings that shape them, the
policy, the schema and the data version; a bounded query's SQL is a function of its plan and
the engine's weighted copies (which follow the data version too). Kept per session, every new
connection planned its queries afresh: a BI tool that opens a connection per chart paid about
25 ms of planning per chart (and a Describe of a new connection's first prepared statement,
psycopg's sixth execution, about 20 ms, planned again). Kept per engine, a plan made once serves every connection of the
same analyst with the same settings (sessions key plans by analyst, so that timing cannot tell
one analyst another's queries). Plans are frozen and SQL is text, so sharing them across
threads is safe; two sessions that plan the same query at once both plan it, and either result
is the same.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable

SIZE = 256  # query shapes (with their settings) whose plan and calibration are kept


@dataclass(frozen=True)
class Bounded:
    """A plan's bounded query without salt; `timeless`: the data alone determines its result
    (no clock); `domain`: over declared keys, the domain's key tuples as the engine lists them."""

    sql: str
    timeless: bool
    domain: tuple[tuple, ...] | None = None


@dataclass(frozen=True)
class Seen:
    """The first text of a query shape (sql/slots.py), planned in full: its calibration, its
    bounded query and its slots' values as the engine writes them."""

    cal: Any
    sql: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    """A query shape's plan and calibration, and its bounded query with a marker for each slot
    (`splice` puts a text's values in their place); `timeless` as in Bounded."""

    plan: Any
    cal: Any
    sql: str
    timeless: bool
    splice: Callable[[str, Any], str]


UNUSABLE = "unusable"  # a shape whose texts are planned in full (its template did not reproduce them)


class PlanCache:
    def __init__(self, size: int = SIZE):
        self._size = size
        self._lock = threading.Lock()
        self._plans: OrderedDict[Hashable, Any] = OrderedDict()
        self._derived: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(obj), kind) -> (obj, value)
        # a query's text (with its settings) -> the names and types a Describe answers
        self._shapes: OrderedDict[Hashable, Any] = OrderedDict()
        # per table and row limit: what its weighted copy stores (column -> SQL), which measure each serves
        self.stored: dict[tuple[str, int], tuple[dict[str, str], dict[tuple, str], dict[str, str]]] = {}
        # (public table, column) -> (data version, whether it holds each value once): one entry a column
        self.unique: dict[tuple[str, str], tuple[str, bool]] = {}
        # (data version, keys' declarations) -> the declared domain's key tuples as the engine lists them
        self.domains: dict[Hashable, Any] = {}
        # query shape (with its settings) -> Seen, Template or UNUSABLE
        self._templates: OrderedDict[Hashable, Any] = OrderedDict()
        # (analyst, data version, profile SQL) -> the noisy profile (auto_bounds.Profile) last released
        # to that analyst for it, already charged: EXPLAIN reads the model's bias from it, free
        self._profiles: OrderedDict[Hashable, Any] = OrderedDict()

    def plan(self, key: Hashable) -> Any | None:
        return self._get(self._plans, key)

    def put_plan(self, key: Hashable, prepared: Any) -> None:
        self._put(self._plans, key, prepared)

    def template(self, key: Hashable) -> Any | None:
        return self._get(self._templates, key)

    def put_template(self, key: Hashable, entry: Seen | Template | str) -> None:
        self._put(self._templates, key, entry)

    def profile(self, key: Hashable) -> Any | None:
        return self._get(self._profiles, key)

    def put_profile(self, key: Hashable, profile: Any) -> None:
        self._put(self._profiles, key, profile)

    def forget_profiles(self) -> None:
        """Drop every kept profile (the audit's runs each start from none)."""
        with self._lock:
            self._profiles.clear()

    def _get(self, store: OrderedDict[Hashable, Any], key: Hashable) -> Any | None:
        """An entry of a store kept in order of use (the least recently used goes first)."""
        with self._lock:
            hit = store.get(key)
            if hit is not None:
                store.move_to_end(key)
            return hit

    def _put(self, store: OrderedDict[Hashable, Any], key: Hashable, value: Any) -> None:
        with self._lock:
            store[key] = value
            while len(store) > self._size:
                store.popitem(last=False)

    def put_domain(self, key: Hashable, domain: Any) -> None:
        with self._lock:
            if len(self.domains) >= self._size:
                self.domains.clear()
            self.domains[key] = domain

    def shape(self, key: Hashable) -> Any | None:
        return self._get(self._shapes, key)

    def put_shape(self, key: Hashable, shape: Any) -> None:
        self._put(self._shapes, key, shape)

    def derived(self, obj: Any, kind: str, make: Callable[[], Any]) -> Any:
        """`make()`, kept for as long as `obj` (a cached plan or calibration, frozen) is: what a
        repeated query would otherwise rebuild on every execution (its bounded query, its audit
        detail). Not kept if `make()` raises."""
        entry = self._derived.get((id(obj), kind))
        if entry is not None and entry[0] is obj:
            return entry[1]
        value = make()
        with self._lock:
            if len(self._derived) >= 2 * self._size:
                self._derived.clear()
            self._derived[(id(obj), kind)] = (obj, value)
        return value


_caches: "weakref.WeakKeyDictionary[Any, PlanCache]" = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def for_engine(engine: Any) -> PlanCache:
    """The cache of every session over `engine` (one per engine: its schema and data)."""
    with _caches_lock:
        cache = _caches.get(engine)
        if cache is None:
            cache = _caches[engine] = PlanCache()
        return cache
