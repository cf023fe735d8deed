"""A grouped query over declared keys releases every group of the domain, whether or not the
data has rows for it: which groups appear must not depend on the data. The engine returns the
groups that have rows (from a weighted copy, whose rows are not filtered by key, groups outside
the domain too); this keeps those inside the domain and adds the others, with zero units and
zero totals, which is what their bounded aggregates are.

The domain is the engine's own list of its keys (declared_domain, kept per data version), so
each key is compared in the engine's representation of it, as a join in the engine would."""

from __future__ import annotations

from typing import Sequence

from ..engines.base import ResultSet
from .guard import ReleaseRefused


def with_empty_groups(rs: ResultSet, n_keys: int, domain: Sequence[tuple]) -> ResultSet:
    """`rs` (keys, then units and measure totals) with one row per key tuple of `domain`, in
    the domain's order: a tuple without a row gets zeros, a row outside the domain is dropped."""
    found: dict[tuple, tuple] = {}
    for row in zip(*rs.columns):
        values = row[n_keys:]
        if found.setdefault(row[:n_keys], values) is not values:
            raise ReleaseRefused("a group key tuple appears more than once")
    zeros = (0,) * (len(rs.names) - n_keys)
    rows = [key + found.get(key, zeros) for key in domain]
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in rs.names]
    return ResultSet(rs.names, rs.types, columns)
