"""A query's filter values as slots: the literals its WHERE clause compares columns with.

A dashboard sends the same query again and again with other filter values (`WHERE day >=
'2026-11-01'`, `WHERE region = 'north'`): each is a new text, planned, calibrated, rewritten
and generated afresh (most of a new text's 10 ms of Python), although neither the plan's
privacy analysis nor the bounded query's structure depends on those values. Here the literals
that are operands of a comparison in the query's own WHERE (not in a nested query, a function
or arithmetic) become slots: tagged on the tree that is planned (the analysis copies them into
the plan's relation with their tags), left out of the query's *shape* (its SQL with each slot
shown only as its kind), and put back into a plan and a bounded query built once for the shape
(`instantiate`, `splice`). The session builds such a template only once two texts of one shape
have been planned in full, and uses it only if both are reproduced by it exactly and were
calibrated alike (session.Session._template).

Markers stand for the slots in the template's SQL: literals of the slot's own kind (a string,
an integer, a decimal) whose text holds a secret drawn per process, so no query can contain one
and splicing can never touch anything but a slot.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from sqlglot import exp

from ..guarantee.plan import Plan
from .frozen import Trees
from .literals import check_literals

SLOT = "dpsql_slot"  # meta key: the slot's index
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)
_WRAPPERS = (exp.Cast, exp.TryCast, exp.Neg, exp.Paren)  # a slot's literal may sit inside these


def kind(literal: exp.Literal) -> str:
    """A slot's kind, part of the shape: a string, a BIGINT, or another number (1.5, 1e3, 2^70),
    as the analysis tells them apart (sql/nonfailing.py, sql/division.py)."""
    if literal.is_string:
        return "s"
    return "i" if literal.this.isdigit() and int(literal.this) < 2**63 else "n"


def tagged(tree: exp.Query) -> tuple[exp.Query, list[exp.Literal]]:
    """A copy of `tree` whose slot literals carry their index (meta SLOT), and those literals in
    order; no slots when the query is not a SELECT with a WHERE."""
    copy = tree.copy()
    where = copy.args.get("where") if isinstance(copy, exp.Select) else None
    found: list[exp.Literal] = []
    if where is not None:
        _collect(where.this, found)
    for i, literal in enumerate(found):
        literal.meta[SLOT] = i
    return copy, found


def _collect(node: exp.Expression, found: list[exp.Literal]) -> None:
    if isinstance(node, (exp.Select, exp.Subquery)):
        return
    operands: list[exp.Expression] = []
    if isinstance(node, _COMPARISONS):
        operands = [node.this, node.expression]
    elif isinstance(node, exp.In) and not node.args.get("query"):
        operands = list(node.expressions)
    elif isinstance(node, exp.Between):
        operands = [node.args.get("low"), node.args.get("high")]
    for operand in operands:
        literal = _literal(operand)
        if literal is not None:
            found.append(literal)
    for child in node.iter_expressions():
        _collect(child, found)  # only a comparison takes its operands: none is taken twice


def _literal(node: exp.Expression | None) -> exp.Literal | None:
    while isinstance(node, _WRAPPERS):
        if isinstance(node, (exp.Cast, exp.TryCast)) and not isinstance(node.this, (exp.Literal, exp.Neg)):
            return None
        node = node.this
    return node if isinstance(node, exp.Literal) else None


def shape(tree: exp.Query, literals: Sequence[exp.Literal]) -> str:
    """The tagged tree's SQL with each of its slots (`literals`) written as the marker of its
    kind: texts that differ only in their slots' values have one shape. The markers stand in
    the tree only while it is written (sqlglot's compiled build cannot be subclassed, so the
    generator takes no hook); the tree is the caller's own copy and is left as it was."""
    saved = [(lit.this, lit.is_string) for lit in literals]
    try:
        for lit in literals:
            marker = MARKERS.kind_marker(lit)
            lit.set("this", marker.this)
            lit.set("is_string", marker.is_string)
        return tree.sql(dialect="postgres")
    finally:
        for lit, (this, is_string) in zip(literals, saved):
            lit.set("this", this)
            lit.set("is_string", is_string)


def instantiate(plan: Plan, values: Sequence[exp.Expression], check: bool = True) -> Plan:
    """`plan` (of a tagged tree) with slot i's literal replaced by values[i] in its relation's
    conditions, where the analysis put the WHERE clause; conditions without slots are shared.
    With `check`, a value that is no input of the column it is compared with is refused as the
    analysis refuses it (literals.py); markers are not checked."""
    relation = plan.relation
    types = {s.alias: s.columns for s in [*relation.sources, *(j.source for j in relation.joins)]}
    where = []
    for cond in plan.relation.where:
        if not any(n.meta_get(SLOT) is not None for n in cond.find_all(exp.Literal)):
            where.append(cond)
            continue
        cond = cond.copy()
        for n in list(cond.find_all(exp.Literal)):
            slot = n.meta_get(SLOT)
            if slot is not None:
                value = values[slot].copy()
                value.meta[SLOT] = slot
                n.replace(value)  # never the condition itself: a slot is a comparison's operand
        if check:
            check_literals(cond, lambda c: types.get(c.table, {}).get(c.name))
        where.append(cond)
    return plan.with_relation(replace(plan.relation, where=Trees(where)))


def slots_in(plan: Plan) -> set[int]:
    """The slot indexes the plan's conditions hold."""
    return {n.meta_get(SLOT) for cond in plan.relation.where for n in cond.find_all(exp.Literal)} - {None}


@dataclass(frozen=True)
class Markers:
    """Per process: the secret that marks slots in a template's SQL."""

    digits: str
    letters: str

    @classmethod
    def new(cls) -> Markers:
        return cls("9" + "".join(secrets.choice("0123456789") for _ in range(24)), secrets.token_hex(16))

    def marker(self, i: int, literal: exp.Literal) -> exp.Literal:
        """A literal of `literal`'s kind standing for slot i."""
        k = kind(literal)
        if k == "s":
            return exp.Literal.string(f"{self.letters}s{i:04d}")
        return exp.Literal.number(f"{self.digits}{i:04d}" + (".5" if k == "n" else ""))

    def kind_marker(self, literal: exp.Literal) -> exp.Literal:
        """The one marker of `literal`'s kind (a query's shape writes each slot so)."""
        return self.marker(0, literal)

    def splicer(
        self, literals: Sequence[exp.Literal], sql_of: Callable[[exp.Literal], str]
    ) -> Callable[[str, Sequence[str]], str]:
        """A function putting slot values' SQL (`sql_of` each marker as the engine writes it)
        in place of the markers of a template's SQL, in one pass."""
        texts = [sql_of(self.marker(i, lit)) for i, lit in enumerate(literals)]
        index = {t: i for i, t in enumerate(texts)}
        pattern = re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))

        def splice(template: str, values: Sequence[str]) -> str:
            return pattern.sub(lambda m: values[index[m.group()]], template)

        return splice


MARKERS = Markers.new()
