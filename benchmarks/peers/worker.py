"""Runs one peer system (SmartNoise SQL or Qrlew) on the benchmark data, in the peers' own
virtual environment (their pinned dependencies must not meet dpsql's): reads a job as JSON,
writes timings, answers and what each system says it spent, as JSON.

    peers-venv/bin/python benchmarks/peers/worker.py job.json result.json

Both peers run on the same DuckDB file the other systems read. SmartNoise has no DuckDB reader:
its PostgreSQL reader is given a DuckDB connection, and its per-person row sampling,
ROW_NUMBER() OVER (PARTITION BY id ORDER BY RANDOM()), is sent with ORDER BY hash(COLUMNS(*))
instead, because DuckDB refuses a volatile window ordering (a per-row pseudo-random order of
the same cost). Qrlew gets its dataset description from an empty SQLite copy of the schema,
with the real table sizes, the value bounds and the key values set explicitly.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

import duckdb


class _Cursor:
    def __init__(self, con):
        self.con, self.description, self.result = con, None, None

    def execute(self, sql):
        self.result = self.con.execute(sql.replace("ORDER BY RANDOM ( )", "ORDER BY hash(COLUMNS(*))"))
        self.description = self.result.description

    def __iter__(self):
        return iter(self.result.fetchall())


class _Connection:
    def __init__(self, con):
        self.con = con

    def cursor(self):
        return _Cursor(self.con)

    def commit(self):
        pass

    def rollback(self):
        pass


def smartnoise(job, con):
    import snsql
    from snsql import Privacy

    lo, hi = job["bounds"]
    meta = {"bench": {"main": {
        "events": {"row_privacy": False, "max_ids": job["max_ids"], "censor_dims": False, "sample_max_ids": True,
                   "uid": {"name": "uid", "type": "int", "private_id": True}, "grp": {"type": "string"},
                   "value": {"type": "float", "lower": lo, "upper": hi}, "day": {"type": "datetime"}},
        "groups": {"row_privacy": True, "grp": {"type": "string"}, "region": {"type": "string"}}}}}

    def reader(epsilon, delta):
        return snsql.from_connection(_Connection(con), engine="postgres", privacy=Privacy(epsilon=epsilon, delta=delta),
                                     metadata=meta)

    def prepare(sql, epsilon, delta):
        # SmartNoise charges several epsilons for some aggregates (AVG: a sum and a count): ask
        # for epsilon / factor so that what it charges equals the target.
        factor = reader(1.0, delta).get_privacy_cost(sql)[0]
        r = reader(epsilon / factor, delta)
        return (lambda: r.execute(sql)[1:]), {"charged": list(r.get_privacy_cost(sql)), "asked": epsilon / factor}

    def cost(sql, epsilon, delta):
        return list(reader(epsilon, delta).get_privacy_cost(sql))

    return prepare, cost


def qrlew(job, con):
    import pyqrlew as qrl
    import sqlalchemy as sa

    directory = Path(tempfile.mkdtemp())
    engine = sa.create_engine(f"sqlite:///{directory / 'schema.sqlite'}")
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE events (uid INTEGER, grp TEXT, value REAL, day DATE)")
        c.exec_driver_sql("CREATE TABLE groups (grp TEXT, region TEXT)")
        c.exec_driver_sql("INSERT INTO events VALUES (1, 'g0', 1.0, '2024-01-01')")
        c.exec_driver_sql("INSERT INTO groups VALUES ('g0', 'r0')")
    base = qrl.Dataset.from_database("bench", engine)
    schema = json.loads(base._dataset.schema)
    size = re.sub(r'"size": "1"', f'"size": "{job["rows"]}"', base._dataset.size)
    dataset = {"@type": "sarus_data_spec/sarus_data_spec.Dataset", "uuid": schema["dataset"], "name": "bench",
               "spec": {"transformed": {"transform": "0" * 32, "arguments": [], "named_arguments": {}}},
               "properties": {}, "doc": ""}
    ds = qrl.Dataset.from_str(json.dumps(dataset), json.dumps(schema), size)
    lo, hi = job["bounds"]
    ds = ds.with_range(None, "events", "value", lo, hi)
    ds = ds.with_possible_values(None, "events", "grp", job["keys"])
    ds = ds.with_possible_values(None, "groups", "grp", job["keys"])
    ds = ds.with_possible_values(None, "groups", "region", job["regions"])
    unit = [("events", [], "uid"), ("groups", [], "_PRIVACY_UNIT_ROW_")]

    def rewrite(sql, epsilon, delta):
        return ds.relation(sql).rewrite_with_differential_privacy(
            ds, unit, {"epsilon": epsilon, "delta": delta}, max_multiplicity=float(job["max_ids"]),
            max_privacy_unit_groups=job["max_groups"])

    def prepare(sql, epsilon, delta):
        event = rewrite(sql, epsilon, delta).dp_event().to_dict()

        def run():
            return con.execute(rewrite(sql, epsilon, delta).relation().to_query()).fetchall()

        return run, {"event": event, "asked": epsilon}

    def cost(sql, epsilon, delta):
        return rewrite(sql, epsilon, delta).dp_event().to_dict()

    return prepare, cost


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    con = duckdb.connect(job["db"], read_only=True)
    prepare, cost = {"smartnoise": smartnoise, "qrlew": qrlew}[job["system"]](job, con)
    out = {}
    for q in job["queries"]:
        entry = {"ms": [], "answers": [], "error": None}
        try:
            run, entry["spend"] = prepare(q["sql"], job["epsilon"], job["delta"])
            for _ in range(job["latency_runs"]):
                t = time.perf_counter()
                run()
                entry["ms"].append((time.perf_counter() - t) * 1000)
            for _ in range(job["accuracy_runs"]):
                entry["answers"].append([[_plain(v) for v in row] for row in run()])
            if job.get("budget_epsilon"):
                entry["budget_cost"] = cost(q["sql"], job["budget_epsilon"], job["budget_delta"])
        except BaseException as e:  # a peer's refusal (or its Rust panic) is a result to record
            if isinstance(e, KeyboardInterrupt):
                raise
            entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            entry["trace"] = traceback.format_exc(limit=2)[-400:]
        out[q["name"]] = entry
    Path(sys.argv[2]).write_text(json.dumps(out))


def _plain(v):
    if isinstance(v, (int, float, str)) or v is None:
        return v
    return float(v) if hasattr(v, "__float__") else str(v)


if __name__ == "__main__":
    main()
