"""Limits on what one statement may cost to read and plan, checked before each expensive step.

A statement is refused (nothing charged, no worker held for long) when its text is too long
(before tokenizing), it has too many tokens (before parsing), or its tree has too many nodes,
too long an IN list, too deep a nesting of subqueries and CTEs, or too deep an expression (a
chain of 2,000 ORs is 2,000 deep, and planning walks trees recursively) (before analysis); planning
that outruns its time budget is refused before the charge. A join of private tables keeps a
public number of each unit's rows per table (max_join_rows), so the engine's work for one person
cannot multiply with their rows. Every refusal names the limit, its
value and the policy key that raises it. The limits depend on the policy only.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Iterator

from sqlglot import exp

from ..errors import ProgrammingError


@dataclass(frozen=True)
class QueryLimits:
    """[limits] in the policy; the defaults stop pathological statements in well under a second."""

    max_query_bytes: int = 100_000
    max_tokens: int = 10_000
    max_nodes: int = 20_000
    max_in_list: int = 1_000
    max_depth: int = 16  # nested subqueries and CTEs
    max_expression_depth: int = 256  # nodes from the statement's root to its deepest leaf
    planning_seconds: float = 5.0
    # One unit's rows in a join of private tables: each of k joined tables keeps at most the
    # k-th root of it per unit (1,000 of two, 100 of three), so the join cannot multiply one
    # person's rows past a public bound (rewrite._unit_rows)
    max_join_rows: int = 1_000_000

    def text(self, text: str) -> None:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self.max_query_bytes:
            raise _limit(
                "54000", f"the statement is {size} bytes long; the limit is {self.max_query_bytes}", "max_query_bytes"
            )

    def tokens(self, count: int) -> None:
        if count > self.max_tokens:
            raise _limit("54001", f"the statement has {count} tokens; the limit is {self.max_tokens}", "max_tokens")

    def tree(self, tree: exp.Expression) -> None:
        """Nodes, IN-list lengths, expression depth and (without CTEs) nesting depth of a parsed
        statement in one walk (its own stack: a recursive walk would fail on the very trees it must
        refuse); a statement with CTEs has its nesting measured through their chains after it."""
        nodes, selects, has_cte = 0, 0, False
        stack = [(tree, 1, 0)]
        while stack:
            node, depth, nested = stack.pop()
            nodes += 1
            if isinstance(node, exp.Select):
                nested += 1
                selects = max(selects, nested)
            elif isinstance(node, exp.CTE):
                has_cte = True
            if nodes > self.max_nodes:
                raise _limit("54001", f"the statement has more than {self.max_nodes} syntax nodes", "max_nodes")
            if depth > self.max_expression_depth:
                raise _limit(
                    "54001",
                    f"an expression is nested more than {self.max_expression_depth} deep (a long "
                    "chain of OR, AND or operators nests as deep as it is long; an IN list does not)",
                    "max_expression_depth",
                )
            if isinstance(node, exp.In) and len(node.expressions) > self.max_in_list:
                raise _limit(
                    "54000",
                    f"an IN list has {len(node.expressions)} items; the limit is {self.max_in_list}",
                    "max_in_list",
                )
            stack.extend((child, depth + 1, nested) for child in node.iter_expressions())
        depth = _depth(tree) if has_cte else selects  # without CTEs, nesting is how deep SELECTs nest
        if depth > self.max_depth:
            raise _limit(
                "54001", f"subqueries and CTEs are nested {depth} deep; the limit is {self.max_depth}", "max_depth"
            )

    def join_rows_each(self, tables: int) -> int:
        """Rows of one unit each of `tables` private tables joined on the unit keeps: the
        largest L with L ** tables <= max_join_rows."""
        keep = max(1, int(self.max_join_rows ** (1 / tables)))
        while keep > 1 and keep**tables > self.max_join_rows:
            keep -= 1
        while (keep + 1) ** tables <= self.max_join_rows:
            keep += 1
        return keep

    def join_too_wide(self, tables: int, keep: int, table: str, max_rows: int) -> ProgrammingError:
        return _limit(
            "54000",
            f"a join of {tables} private tables keeps at most {keep} rows of each privacy unit "
            f"per table (so that one unit's joined rows stay within max_join_rows = {self.max_join_rows}), "
            f"fewer than {table}'s max_rows = {max_rows}",
            "max_join_rows",
        )

    def deadline(self) -> "Deadline":
        return Deadline(self.planning_seconds)


class Deadline:
    """The planning time budget of one statement, checked between planning steps."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Engine work inside planning (building a table's weighted copy): not the statement's
        planning, and its time depends on the data, so it is not counted."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.end += time.monotonic() - start

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise _limit("54001", f"planning took longer than {self.seconds:g} s", "planning_seconds")


def _depth(tree: exp.Expression) -> int:
    """How deep SELECTs nest (subqueries, derived tables), a CTE counting as deep as the chain
    of CTEs it reads from: WITH c1 AS (... c0), c2 AS (... c1) ... is a nesting in disguise."""
    ctes: dict[str, int] = {}
    for cte in tree.find_all(exp.CTE):  # in order: a CTE reads only the ones before it
        reads = [ctes.get(t.name.lower(), 0) for t in cte.this.find_all(exp.Table) if not t.db]
        ctes[cte.alias.lower()] = _nesting(cte.this) + max(reads, default=0)
    reads = [ctes.get(t.name.lower(), 0) for t in tree.find_all(exp.Table) if not t.db]
    return max([_nesting(tree) + max(reads, default=0)] + list(ctes.values()))


def _nesting(tree: exp.Expression) -> int:
    deepest = 0
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, exp.Select):
            depth += 1
            deepest = max(deepest, depth)
        stack.extend((child, depth) for child in node.iter_expressions())
    return deepest


def _limit(sqlstate: str, message: str, key: str) -> ProgrammingError:
    return ProgrammingError(
        f"{message}: nothing was run or charged",
        sqlstate=sqlstate,
        hint=f"simplify the statement, or raise {key} in the policy's [limits] section",
    )
