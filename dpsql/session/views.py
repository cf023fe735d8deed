"""Session-local views (CREATE TEMPORARY VIEW): definitions only, never materialised, put in
front of a query that reads them as CTEs, so they are run and charged only as part of it."""

from __future__ import annotations

from typing import Callable, Iterator

from sqlglot import exp

from ..config import Policy
from ..errors import Error, ProgrammingError
from ..sql.classify import ViewCommand
from ..sql.options import QueryOptions


class Views:
    """One session's views: name -> definition (views it reads already expanded)."""

    def __init__(self) -> None:
        self._defined: dict[str, exp.Query] = {}

    def clear(self) -> None:
        self._defined.clear()

    def __bool__(self) -> bool:
        """Whether the session has defined any view."""
        return bool(self._defined)

    def apply(self, cmd: ViewCommand, policy: Policy) -> str:
        """CREATE [OR REPLACE] TEMPORARY VIEW or DROP VIEW: its command tag."""
        if cmd.query is None:
            if cmd.name not in self._defined and not cmd.if_exists:
                raise ProgrammingError(f'view "{cmd.name}" does not exist', sqlstate="42P01")
            self._defined.pop(cmd.name, None)
            return "DROP VIEW"
        if policy.table(cmd.name) is not None:
            raise ProgrammingError(
                f'"{cmd.name}" is a table of the policy', sqlstate="42P07", hint="give the view another name"
            )
        if cmd.name in self._defined and not cmd.replace:
            raise ProgrammingError(
                f'relation "{cmd.name}" already exists',
                sqlstate="42P07",
                hint="CREATE OR REPLACE TEMPORARY VIEW, or DROP VIEW first",
            )
        definition = self.expand(cmd.query.tree)  # views it reads are expanded now
        own = {c.alias_or_name.lower() for c in definition.find_all(exp.CTE)}
        if any(t.name.lower() == cmd.name and t.name.lower() not in own for t in definition.find_all(exp.Table)):
            raise ProgrammingError(
                f'view "{cmd.name}" would read itself', sqlstate="42P17", hint="define it over tables or other views"
            )
        self._defined[cmd.name] = definition
        return "CREATE VIEW"

    def columns(
        self, describe: Callable[[exp.Query, QueryOptions], tuple[list[str], list[str]]]
    ) -> Iterator[tuple[str, dict[str, str]]]:
        """Each view's columns and engine types, described (by `describe`) from its definition:
        nothing runs, nothing is charged."""
        for name, definition in self._defined.items():
            try:
                names, types = describe(definition, QueryOptions())
            except Error:
                continue  # a view that no longer binds is listed by nothing
            yield name, dict(zip(names, types))

    def expand(self, tree: exp.Query) -> exp.Query:
        """The query with the views it reads put in front as CTEs (a CTE of its own with the
        same name still wins), or the query itself when it reads none."""
        if not self._defined:
            return tree
        own = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        used = [
            t.name.lower()
            for t in tree.find_all(exp.Table)
            if t.name.lower() in self._defined
            and t.name.lower() not in own
            and t.db.lower() in ("", "pg_temp", "public")
        ]
        if not used:
            return tree
        out = tree.copy()
        for t in out.find_all(exp.Table):
            if t.name.lower() in used and t.db:
                t.set("db", None)
        ctes = [
            exp.CTE(this=self._defined[name].copy(), alias=exp.TableAlias(this=exp.to_identifier(name)))
            for name in dict.fromkeys(used)
        ]
        existing = out.args.get("with_")
        out.set("with_", exp.With(expressions=ctes + (list(existing.expressions) if existing else [])))
        return out
