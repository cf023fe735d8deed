"""Runs one peer system (SmartNoise SQL or Qrlew) on benchmark data, in the peers' own virtual
environment (their pinned dependencies must not meet dpsql's): reads a job as JSON, writes
timings, answers and what each system says it spent, as JSON.

    peers-venv/bin/python benchmarks/peers/worker.py job.json result.json

The job describes the tables as the dpsql policy does (`tables`: rows, privacy unit, columns with
their type, bounds and keys), so that each peer gets the same bounds from one description: a
table's `unit` is its privacy unit column, "row" (each row is a unit) or null (public: Qrlew
leaves it out of the privacy unit; SmartNoise, which has no public tables, makes it row-private).
The data are a DuckDB file (`db`) or the statements in `setup`, run on an in-memory DuckDB.

SmartNoise has no DuckDB reader: its PostgreSQL reader is given a DuckDB connection, and its
per-person row sampling, ROW_NUMBER() OVER (PARTITION BY id ORDER BY RANDOM()), is sent with
ORDER BY hash(COLUMNS(*)) instead, because DuckDB refuses a volatile window ordering (a per-row
pseudo-random order of the same cost). Qrlew gets its dataset description from an SQLite copy of
the schema with one placeholder row (an empty table has no statistics, and Qrlew then takes it
for empty), with the real table sizes, the value bounds and the key values set explicitly.
"""

from __future__ import annotations

import json
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


SQLITE_TYPES = {
    "int": ("INTEGER", "1"),
    "float": ("REAL", "1.0"),
    "string": ("TEXT", "'a'"),
    "datetime": ("DATE", "'2024-01-01'"),
    "boolean": ("BOOLEAN", "1"),
}


def _numeric(column: dict) -> bool:
    return column.get("lower") is not None and column.get("upper") is not None


def smartnoise_metadata(tables: dict) -> dict:
    """SmartNoise's metadata: max_ids rows per unit, rows sampled down to it, bounds on numbers."""
    out = {}
    for name, t in tables.items():
        private = t["unit"] not in (None, "row")
        meta = {"row_privacy": not private}
        if private:
            meta.update(max_ids=t["max_ids"], censor_dims=t.get("censor_dims", False), sample_max_ids=True)
        for column, c in t["columns"].items():
            meta[column] = {"type": c["type"]}
            if column == t["unit"]:
                meta[column]["private_id"] = True
            elif _numeric(c):
                meta[column].update(lower=c["lower"], upper=c["upper"])
        out[name] = meta
    return {"bench": {"main": out}}


def smartnoise(job, con):
    import snsql
    from snsql import Privacy

    meta = smartnoise_metadata(job["tables"])

    def reader(epsilon, delta):
        return snsql.from_connection(
            _Connection(con), engine="postgres", privacy=Privacy(epsilon=epsilon, delta=delta), metadata=meta
        )

    def prepare(query, epsilon, delta):
        # SmartNoise charges several epsilons for some aggregates (AVG: a sum and a count): ask
        # for epsilon / factor so that what it charges equals the target.
        sql = query["sql"]
        factor = reader(1.0, delta).get_privacy_cost(sql)[0]
        r = reader(epsilon / factor, delta)
        return (lambda: r.execute(sql)[1:]), {"charged": list(r.get_privacy_cost(sql)), "asked": epsilon / factor}

    def cost(query, epsilon, delta):
        return list(reader(epsilon, delta).get_privacy_cost(query["sql"]))

    return prepare, cost


def qrlew_dataset(tables: dict):
    """Qrlew's dataset: the schema from SQLite, then each table's size, bounds and keys."""
    import pyqrlew as qrl
    import sqlalchemy as sa

    with tempfile.TemporaryDirectory() as directory:  # the schema's one row a table: removed after
        engine = sa.create_engine(f"sqlite:///{Path(directory) / 'schema.sqlite'}")
        with engine.begin() as c:
            for name, t in tables.items():
                types = [SQLITE_TYPES[col["type"]] for col in t["columns"].values()]
                c.exec_driver_sql(
                    f"CREATE TABLE {name} ("
                    + ", ".join(f"{column} {sql_type}" for column, (sql_type, _) in zip(t["columns"], types))
                    + ")"
                )
                c.exec_driver_sql(f"INSERT INTO {name} VALUES (" + ", ".join(value for _, value in types) + ")")
        base = qrl.Dataset.from_database("bench", engine)
        schema = json.loads(base._dataset.schema)
        size = json.loads(base._dataset.size)
        engine.dispose()
    for table in size["statistics"]["union"]["fields"]:
        _set_sizes(table, tables[table["name"]]["rows"])
    dataset = {
        "@type": "sarus_data_spec/sarus_data_spec.Dataset",
        "uuid": schema["dataset"],
        "name": "bench",
        "spec": {"transformed": {"transform": "0" * 32, "arguments": [], "named_arguments": {}}},
        "properties": {},
        "doc": "",
    }
    ds = qrl.Dataset.from_str(json.dumps(dataset), json.dumps(schema), json.dumps(size))
    for name, t in tables.items():
        for column, c in t["columns"].items():
            if _numeric(c):
                ds = ds.with_range(None, name, column, c["lower"], c["upper"])
            if c.get("keys") and c["type"] == "string":
                ds = ds.with_possible_values(None, name, column, c["keys"])
    return ds


def _set_sizes(node, rows: int) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "size":
                node[key] = str(rows)
            else:
                _set_sizes(value, rows)
    elif isinstance(node, list):
        for value in node:
            _set_sizes(value, rows)


def qrlew(job, con):
    ds = qrlew_dataset(job["tables"])
    unit = [
        (name, [], "_PRIVACY_UNIT_ROW_" if t["unit"] == "row" else t["unit"])
        for name, t in job["tables"].items()
        if t["unit"] is not None
    ]

    def rewrite(query, epsilon, delta):
        limits = {"max_ids": job.get("max_ids"), "max_groups": job.get("max_groups"), **query}  # a query's own first
        return ds.relation(query["sql"]).rewrite_with_differential_privacy(
            ds,
            unit,
            {"epsilon": epsilon, "delta": delta},
            max_multiplicity=float(limits["max_ids"]),
            max_privacy_unit_groups=limits["max_groups"],
        )

    def prepare(query, epsilon, delta):
        event = rewrite(query, epsilon, delta).dp_event().to_dict()

        def run():
            return con.execute(rewrite(query, epsilon, delta).relation().to_query()).fetchall()

        return run, {"event": event, "asked": epsilon}

    def cost(query, epsilon, delta):
        return rewrite(query, epsilon, delta).dp_event().to_dict()

    return prepare, cost


def connect(job):
    """The data: the job's DuckDB file, read-only, or an in-memory DuckDB built by its `setup`."""
    con = duckdb.connect(job["db"], read_only=True) if job.get("db") else duckdb.connect()
    for statement in job.get("setup", []):
        con.execute(statement)
    return con


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    con = connect(job)
    prepare, cost = {"smartnoise": smartnoise, "qrlew": qrlew}[job["system"]](job, con)
    out = {}
    for q in job["queries"]:
        entry = {"ms": [], "answers": [], "error": None}
        try:
            run, entry["spend"] = prepare(q, job["epsilon"], job["delta"])
            for _ in range(job["latency_runs"]):
                t = time.perf_counter()
                run()
                entry["ms"].append((time.perf_counter() - t) * 1000)
            for _ in range(job["accuracy_runs"]):
                entry["answers"].append([[_plain(v) for v in row] for row in run()])
            if job.get("budget_epsilon"):
                entry["budget_cost"] = cost(q, job["budget_epsilon"], job["budget_delta"])
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
