"""Catalog queries recorded from real clients against PostgreSQL 15, with what it answered."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CLIENTS = Path(__file__).resolve().parent / "clients"  # recorded traffic, copied from the project's shared folder


@dataclass
class Exchange:
    file: str
    sql: str
    params: list
    columns: list[tuple[str, int]] | None  # None: PostgreSQL answered without rows (or with an error)


def exchanges() -> list[Exchange]:
    """Every statement PostgreSQL answered with a RowDescription, paired with it. Statements
    queue up in the order they are sent (simple queries split, or Execute of a portal) and
    are settled by CommandComplete or ErrorResponse; a RowDescription belongs to the head."""
    from dpsql.sql.classify import split_statements

    out: list[Exchange] = []
    for path in sorted(CLIENTS.glob("*.jsonl")):
        queue: list[list] = []
        parsed: dict[str, str] = {}
        portals: dict[str, tuple[str, list]] = {}
        for line in path.read_text().splitlines():
            m = json.loads(line)
            kind = m["m"]
            if m["dir"] == "F":
                if kind == "Query":
                    queue += [[st, [], None] for st in split_statements(m["sql"])]
                elif kind == "Parse":
                    parsed[m.get("stmt", "")] = m["sql"]
                elif kind == "Bind":
                    portals[m.get("portal", "")] = (parsed.get(m.get("stmt", ""), ""), m.get("params", []))
                elif kind == "Execute":
                    sql, params = portals.get(m.get("portal", ""), ("", []))
                    queue.append([sql, params, None])
            elif kind == "RowDescription" and queue:
                queue[0][2] = [(c[0], c[1]) for c in m["cols"]]
            elif kind in ("CommandComplete", "ErrorResponse", "EmptyQueryResponse") and queue:
                sql, params, cols = queue.pop(0)
                if cols is not None and kind == "CommandComplete":
                    out.append(Exchange(path.stem, sql, params, cols))
                if kind == "ErrorResponse":
                    queue.clear()
    return out
