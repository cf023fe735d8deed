"""Read-only forms of what a plan holds. A plan is shared by every session that reuses it
(plan_cache.py) and must stay what was calibrated; a sqlglot tree is mutable, so a plan never
hands its own out: an `Owned` field, a `Trees` sequence and a `TreeMap` return a copy on every
read, which the reader may change. Containers are tuples, frozensets and these."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar, overload

from sqlglot import exp

T = TypeVar("T", bound=exp.Expression | None)
E = TypeVar("E", bound=exp.Expression)


class Owned(Generic[T]):
    """A dataclass field holding a sqlglot tree (or None), read as a fresh copy each time. The
    field has no default; frozen dataclasses refuse to set it after __init__."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_owned_" + name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Owned[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Owned[T] | T:
        if obj is None:
            raise AttributeError(self.slot)  # no default (dataclasses asks the class)
        tree: T = obj.__dict__[self.slot]
        return tree if tree is None else tree.copy()

    def __set__(self, obj: object, value: T) -> None:
        obj.__dict__[self.slot] = value


class Trees(Sequence[E]):
    """An immutable sequence of sqlglot trees, each read as a fresh copy."""

    __slots__ = ("_trees",)

    def __init__(self, trees: Iterable[E] = ()) -> None:
        self._trees = tuple(trees)

    @overload
    def __getitem__(self, i: int) -> E: ...

    @overload
    def __getitem__(self, i: slice) -> Trees[E]: ...

    def __getitem__(self, i: int | slice) -> E | Trees[E]:
        if isinstance(i, slice):
            return Trees(self._trees[i])
        return self._trees[i].copy()

    def __len__(self) -> int:
        return len(self._trees)

    def __iter__(self) -> Iterator[E]:
        return (t.copy() for t in self._trees)

    def __add__(self, more: Iterable[E]) -> Trees[E]:
        return Trees((*self._trees, *(more._trees if isinstance(more, Trees) else more)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trees) and self._trees == other._trees

    def __hash__(self) -> int:
        return hash(self._trees)

    def __repr__(self) -> str:
        return f"Trees({list(self._trees)!r})"

    def texts(self) -> tuple[str, ...]:
        """Each tree's SQL (sqlglot's dialect), read without a copy."""
        return tuple(t.sql() for t in self._trees)


class TreeMap(Mapping[str, E]):
    """An immutable mapping of names to sqlglot trees, each read as a fresh copy."""

    __slots__ = ("_trees", "_index")

    def __init__(self, trees: Mapping[str, E] | Iterable[tuple[str, E]] = ()) -> None:
        if isinstance(trees, TreeMap):
            self._trees: tuple[tuple[str, E], ...] = trees._trees
        else:
            self._trees = tuple(trees.items() if isinstance(trees, Mapping) else trees)
        self._index = {k: i for i, (k, _) in enumerate(self._trees)}

    def __getitem__(self, key: str) -> E:
        return self._trees[self._index[key]][1].copy()

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._trees)

    def __len__(self) -> int:
        return len(self._trees)

    def __repr__(self) -> str:
        return f"TreeMap({dict(self._trees)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeMap) and self._trees == other._trees

    def __hash__(self) -> int:
        return hash(self._trees)


def stored(obj: object, name: str) -> object:
    """An Owned field's stored tree itself, as an identity only (a memo's key; never to read)."""
    stored_tree: object = obj.__dict__["_owned_" + name]
    return stored_tree
