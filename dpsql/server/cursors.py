"""DECLARE ... CURSOR FOR <query>, FETCH and CLOSE (psqlODBC's UseDeclareFetch, as Power BI and
Excel use it): the query is answered, and charged, once when declared; FETCH hands out its rows."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import Error, ProgrammingError
from ..sql.classify import identifier

_DECLARE = re.compile(
    r"^\s*DECLARE\s+(?P<name>\"[^\"]+\"|\w+)\s+(?:BINARY\s+|INSENSITIVE\s+|ASENSITIVE\s+|NO\s+SCROLL\s+|"
    r"SCROLL\s+)*CURSOR\s+(?:(?:WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(?P<query>.*?)\s*;?\s*$",
    re.I | re.S,
)
_FETCH = re.compile(
    r"^\s*(?P<verb>FETCH|MOVE)\s+(?:(?P<how>NEXT|FORWARD\s+ALL|FORWARD\s+\d+|FORWARD|ALL|\d+)\s+)?"
    r"(?:FROM\s+|IN\s+)?(?P<name>\"[^\"]+\"|\w+)\s*;?\s*$",
    re.I,
)
_CLOSE = re.compile(r"^\s*CLOSE\s+(?P<name>\"[^\"]+\"|\w+)\s*;?\s*$", re.I)


@dataclass
class Cursor:
    fields: list
    rows: list[tuple]
    position: int = 0


@dataclass
class Cursors:
    """A connection's open cursors."""

    open: dict[str, Cursor] = field(default_factory=dict)

    @staticmethod
    def declared(sql: str) -> tuple[str, str]:
        """(cursor name, its query)."""
        m = _DECLARE.match(sql)
        if m is None:
            raise ProgrammingError(
                "syntax error in DECLARE", sqlstate="42601", hint="DECLARE name CURSOR FOR SELECT ..."
            )
        return identifier(m.group("name")), m.group("query")

    def add(self, name: str, fields: list, rows: list[tuple]) -> None:
        if name in self.open:
            raise Error(f'cursor "{name}" already exists', sqlstate="42P03")
        self.open[name] = Cursor(fields, rows)

    def fetch(self, sql: str) -> tuple[list, list[tuple], str]:
        """(fields, rows, command tag) of FETCH, or of MOVE (no rows)."""
        m = _FETCH.match(sql)
        if m is None:
            raise ProgrammingError("FETCH supports NEXT, FORWARD n, FORWARD ALL, ALL and a count", sqlstate="0A000")
        cursor = self.get(identifier(m.group("name")))
        how = (m.group("how") or "NEXT").upper().split()
        count = len(cursor.rows) if "ALL" in how else (1 if how[-1] in ("NEXT", "FORWARD") else int(how[-1]))
        rows = cursor.rows[cursor.position : cursor.position + count]
        cursor.position += len(rows)
        verb = m.group("verb").upper()
        return cursor.fields, rows if verb == "FETCH" else [], f"{verb} {len(rows)}"

    def fields_of(self, sql: str) -> list | None:
        m = _FETCH.match(sql)
        if m is None or m.group("verb").upper() != "FETCH":
            return None
        return self.get(identifier(m.group("name"))).fields

    def close(self, sql: str) -> None:
        m = _CLOSE.match(sql)
        if m is None:
            raise ProgrammingError("syntax error in CLOSE", sqlstate="42601")
        name = identifier(m.group("name"))
        if name.upper() == "ALL":
            self.open.clear()
            return
        self.get(name)
        del self.open[name]

    def get(self, name: str) -> Cursor:
        try:
            return self.open[name]
        except KeyError:
            raise Error(f'cursor "{name}" does not exist', sqlstate="34000") from None
