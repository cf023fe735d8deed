"""The queries every system is asked, in each system's spelling (None: it has no spelling)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Query:
    name: str
    sql: str  # dpsql, and the plain query on DuckDB (the floor and the truth)
    smartnoise: str | None
    qrlew: str | None
    label: str


def _q(name: str, label: str, sql: str, smartnoise: str | None = "same", qrlew: str | None = "same") -> Query:
    sn = (
        sql.replace("FROM events", "FROM main.events").replace("JOIN groups", "JOIN main.groups")
        if smartnoise == "same"
        else smartnoise
    )
    return Query(name, sql, sn, sql if qrlew == "same" else qrlew, label)


QUERIES = [
    _q("count", "COUNT(*)", "SELECT COUNT(*) AS v FROM events"),
    _q("avg", "AVG(value)", "SELECT AVG(value) AS v FROM events"),
    _q("count_by_grp", "COUNT(*) GROUP BY grp", "SELECT grp, COUNT(*) AS v FROM events GROUP BY grp"),
    _q("sum_by_grp", "SUM(value) GROUP BY grp", "SELECT grp, SUM(value) AS v FROM events GROUP BY grp"),
    _q("avg_by_grp", "AVG(value) GROUP BY grp", "SELECT grp, AVG(value) AS v FROM events GROUP BY grp"),
    _q("stddev_by_grp", "STDDEV(value) GROUP BY grp", "SELECT grp, STDDEV(value) AS v FROM events GROUP BY grp"),
    _q("median_by_grp", "MEDIAN(value) GROUP BY grp", "SELECT grp, MEDIAN(value) AS v FROM events GROUP BY grp"),
    _q(
        "where_by_grp",
        "COUNT(*) WHERE value > 50 GROUP BY grp",
        "SELECT grp, COUNT(*) AS v FROM events WHERE value > 50 GROUP BY grp",
    ),
    _q(
        "join_public",
        "COUNT(*) JOIN groups GROUP BY region",
        "SELECT g.region, COUNT(*) AS v FROM events AS e JOIN groups AS g ON e.grp = g.grp GROUP BY g.region",
    ),
    _q(
        "per_unit",
        "AVG(per-person SUM(value))",
        "SELECT AVG(total) AS v FROM (SELECT uid, SUM(value) AS total FROM events GROUP BY uid) AS t",
    ),
]

SCALE = ["count_by_grp", "sum_by_grp", "avg_by_grp"]  # the grouped queries timed at every size
THROUGHPUT = "SELECT grp, COUNT(*) AS v FROM events GROUP BY grp"
