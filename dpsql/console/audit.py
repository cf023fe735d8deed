"""The audit log as a privacy officer searches it: the ledger's charges (every release, its
SQL and cost) and events (failed and locked-out logins, grants with their reasons, answers
the console served from the cache), filtered, and exported as CSV."""

from __future__ import annotations

import calendar
import csv
import io
import json
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping
from urllib.parse import urlencode

from ..accounting.cost import show
from ..errors import invalid_parameter
from ..ledger import Ledger, failure_of

KINDS = ("all", "charges", "events")


@dataclass(frozen=True)
class Search:
    user: str = ""
    kind: str = "all"
    text: str = ""
    since: str = ""  # YYYY-MM-DD, UTC, inclusive
    until: str = ""

    @classmethod
    def read(cls, params: Mapping[str, str]) -> "Search":
        s = cls(**{f.name: str(params.get(f.name, f.default)).strip()[:200] for f in fields(cls)})
        if s.kind not in KINDS:
            raise invalid_parameter(f"kind must be one of {', '.join(KINDS)}")
        for day in (s.since, s.until):
            if day:
                _day(day)
        return s

    def query(self) -> str:
        """The search as URL parameters (the CSV export link repeats it)."""
        return urlencode({k: v for k, v in asdict(self).items() if v})


@dataclass(frozen=True)
class Record:
    at: float
    kind: str  # "charge", or the event's kind
    user: str
    charge_id: int | None = None
    epsilon: str = ""
    delta: str = ""
    released: str = ""
    sql: str = ""
    address: str = ""
    detail: str = ""

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.at))


def _day(text: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%d")))
    except ValueError:
        raise invalid_parameter(f"{text!r} is not a date", hint="write dates as YYYY-MM-DD") from None


def _released(released: Any) -> str:
    failure = failure_of(released)
    if failure is not None:
        return f"no: failed ({failure.get('sqlstate')}{', resource limit' if failure.get('resource_limit') else ''})"
    return "yes" if released is not None else "no"


def search(ledger: Ledger, s: Search) -> list[Record]:
    """Every record that matches, newest first."""
    records: list[Record] = []
    if s.kind in ("all", "charges"):
        for h in ledger.history(s.user or None):
            records.append(
                Record(
                    h["at"],
                    "charge",
                    h["user"],
                    h["id"],
                    show(h["cost"].epsilon),
                    show(h["cost"].delta),
                    _released(h["released"]),
                    h["sql"],
                    detail=json.dumps(h["detail"], default=str),
                )
            )
    if s.kind in ("all", "events"):
        for e in ledger.events(s.user or None):
            records.append(Record(e["at"], e["kind"], e["user"], address=e["address"], detail=e["detail"]))
    since = _day(s.since) if s.since else float("-inf")
    until = _day(s.until) + 86400 if s.until else float("inf")
    needle = s.text.lower()
    return sorted(
        (r for r in records if since <= r.at < until and (not needle or needle in _haystack(r))),
        key=lambda r: r.at,
        reverse=True,
    )


def _haystack(r: Record) -> str:
    return " ".join((r.kind, r.user, r.sql, r.address, r.detail)).lower()


COLUMNS = ("time_utc", "kind", "user", "charge_id", "epsilon", "delta", "released", "sql", "address", "detail")


def csv_text(records: Iterable[Record]) -> str:
    """The records as CSV, text cells guarded against spreadsheet formulas."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for r in records:
        writer.writerow(
            [
                r.when,
                _cell(r.kind),
                _cell(r.user),
                "" if r.charge_id is None else r.charge_id,
                r.epsilon,
                r.delta,
                r.released,
                _cell(r.sql),
                _cell(r.address),
                _cell(r.detail),
            ]
        )
    return out.getvalue()


def _cell(text: Any) -> str:
    """A text cell a spreadsheet will not run: one starting like a formula gets a quote first."""
    text = str(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
