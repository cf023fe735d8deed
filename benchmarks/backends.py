"""dpsql on each backend against the plain query on that same backend, measured side by side.

    python -m benchmarks.backends [--sizes 1000000,10000000] [--runs 5] [--backends duckdb,postgres,spark]
                                  [--out benchmarks/BACKENDS.md]

The benchmark data (benchmarks/data.py) at each size goes to DuckDB (a file), PostgreSQL (a
throwaway server started here, as tests/pgserver.py does, tables copied in and read through a
SELECT-only role; "postgres" builds weighted tables through a second role, "postgres-per-unit"
bounds per person in every query) and Spark (a local[2] session over the Parquet files). For the grouped
COUNT/SUM/AVG, each backend runs the plain query and dpsql's (DB-API, answer cache off) in
turn; the figure is the ratio of medians.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import duckdb

import dpsql

from .data import generate, policy_text
from .shared import absolute
from .timing import interleaved_ms
from .workload import QUERIES, SCALE

HERE = Path(__file__).resolve().parent
READER = "dpsql_bench_reader"
SCRATCH = "dpsql_bench_scratch"  # builds the weighted tables ([engine] scratch_url)
PG_WORK_MEM = "256MB"  # PostgreSQL's default 4MB spills the per-person aggregation to disk


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def to_postgres(db: Path, admin_url: str, work: Path) -> None:
    """Copy events and groups from the DuckDB file, streaming CSV through COPY."""
    import psycopg

    con = duckdb.connect(str(db), read_only=True)
    with psycopg.connect(admin_url, autocommit=True) as pg:
        for role in (READER, SCRATCH):
            pg.execute(f"DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        pg.execute(f"GRANT CREATE ON DATABASE {pg.info.dbname} TO {SCRATCH}")
        pg.execute("CREATE TABLE events (uid bigint, grp text, value double precision, day date)")
        pg.execute("CREATE TABLE groups (grp text, region text)")
        for table in ("events", "groups"):
            csv = work / f"{table}.csv"
            con.execute(f"COPY {table} TO '{csv}' (FORMAT csv, HEADER false)")
            with pg.cursor().copy(f"COPY {table} FROM STDIN (FORMAT csv)") as copy, open(csv, "rb") as f:
                while chunk := f.read(1 << 20):
                    copy.write(chunk)
            csv.unlink()
            pg.execute(f"GRANT SELECT ON {table} TO {READER}, {SCRATCH}")
            pg.execute(f"ANALYZE {table}")
    con.close()


def policies(db: Path, rows: int, pg_reader: str | None, work: Path) -> dict[str, Path]:
    base = policy_text(db)
    out = {}
    duck = work / f"duckdb_{rows}.toml"
    duck.write_text(base)
    out["duckdb"] = duck
    body = re.sub(r'(?s)^\s*\[engine\]\ndatabase = "[^"]*"\n', "", base)
    if pg_reader:
        engine = f'[engine]\nkind = "postgres"\nurl = "{pg_reader}"\nsettings = {{ work_mem = "{PG_WORK_MEM}" }}\n'
        scratch = pg_reader.replace(f"{READER}@", f"{SCRATCH}@")
        p = work / f"postgres_{rows}.toml"
        p.write_text(engine + f'scratch_url = "{scratch}"\n' + body)
        out["postgres"] = p
        p = work / f"postgres-per-unit_{rows}.toml"
        p.write_text(engine + body)
        out["postgres-per-unit"] = p
    groups = work / "groups.parquet"
    con = duckdb.connect(str(db), read_only=True)
    con.execute(f"COPY groups TO '{groups}' (FORMAT parquet)")
    con.close()
    events = db.parent / f"events_{rows}.parquet"
    spark_body = body.replace("[tables.events]\n", f'[tables.events]\nsource = "{events}"\n')
    spark_body = spark_body.replace("[tables.groups]\n", f'[tables.groups]\nsource = "{groups}"\n')
    s = work / f"spark_{rows}.toml"
    s.write_text(
        '[engine]\nkind = "spark"\nmaster = "local[2]"\n'
        'conf = { "spark.driver.memory" = "4g", "spark.sql.shuffle.partitions" = "4" }\n' + spark_body
    )
    out["spark"] = s
    return out


def measure(backend: str, policy: Path, db: Path, admin_url: str | None, runs: int, work: Path) -> list[dict]:
    conn = dpsql.connect(policy, user="alice", ledger=work / f"ledger_{backend}_{policy.stem}.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SET dpsql.reuse = off")  # engine work every time, as the plain query does
    engine = conn.session.engine
    if backend == "duckdb":
        plain_con = duckdb.connect(str(db), read_only=True)
        plain = lambda sql: plain_con.execute(sql).fetchall()  # noqa: E731
    elif backend.startswith("postgres"):
        import psycopg

        plain_con = psycopg.connect(admin_url, autocommit=True)
        plain_con.execute(f"SET work_mem = '{PG_WORK_MEM}'")  # what dpsql's connections get
        plain = lambda sql: plain_con.execute(sql).fetchall()  # noqa: E731
    else:
        plain_con = None
        plain = lambda sql: engine._spark.sql(sql).toArrow()  # noqa: E731  (the same session, the same views)
    out = []
    for q in (q for q in QUERIES if q.name in SCALE):
        for _ in range(2):  # warm-up: caches, JIT, the weighted copy
            plain(q.sql)
            cur.execute(q.sql)
            cur.fetchall()
        p, d = interleaved_ms([lambda: plain(q.sql), lambda: (cur.execute(q.sql), cur.fetchall())], runs)
        out.append({"backend": backend, "query": q.label, "plain_ms": p, "dpsql_ms": d, "ratio": d / p})
        log(f"  {backend:<8} {q.label:<26} plain {p:9.1f} ms   dpsql {d:9.1f} ms   {d / p:6.1f}x")
    if plain_con is not None:
        plain_con.close()
    conn.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", type=absolute, default=absolute(".bench"))
    ap.add_argument("--out", type=Path, default=HERE / "BACKENDS.md")
    ap.add_argument("--backends", default="duckdb,postgres,postgres-per-unit,spark", help="a comma-separated subset")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.time()
    results: dict[int, list[dict]] = {}
    wanted = args.backends.split(",")
    server = None
    if any(b.startswith("postgres") for b in wanted):
        sys.path.insert(0, str(HERE.parent))
        from tests.pgserver import PgServer

        server = PgServer().start()
    try:
        for rows in sizes:
            log(f"{rows:,} rows")
            db = generate(args.work, rows).resolve()
            with tempfile.TemporaryDirectory(prefix="dpsql-backends-") as scratch:  # ledgers, policies, CSV
                work = Path(scratch)
                admin = reader = None
                if server is not None:
                    admin = server.create_database(f"bench_{rows}")
                    log("  copying into PostgreSQL ...")
                    to_postgres(db, admin, work)
                    reader = admin.replace("postgres@", f"{READER}@")
                results[rows] = []
                for backend, policy in policies(db, rows, reader, work).items():
                    if backend in wanted:
                        results[rows] += measure(backend, policy, db, admin, args.runs, work)
    finally:
        if server is not None:
            server.stop()
    args.out.write_text(report(results, args, time.time() - started))
    log(f"wrote {args.out}")


def report(results: dict[int, list[dict]], args, seconds: float) -> str:
    import psycopg
    import pyspark

    lines = [
        "# dpsql on each backend vs the plain query on that backend",
        "",
        f"`python -m benchmarks.backends --sizes {args.sizes} --runs {args.runs}` ({seconds:.0f} s), "
        f"{platform.machine()}, Python {platform.python_version()}, DuckDB {duckdb.__version__}, "
        f"PostgreSQL 15 (throwaway server, work_mem {PG_WORK_MEM} for both), psycopg {psycopg.__version__}, "
        f"Spark {pyspark.__version__} local[2]. Median of {args.runs} rounds running the plain query and "
        "dpsql's in turn, after two warm-ups, ms; "
        "dpsql through DB-API with the answer cache off (parse, plan, charge in the SQLite ledger, "
        "bounded query, noise, release).",
        "",
        "| backend | query | " + " | ".join(f"{rows:,} rows: plain / dpsql (ratio)" for rows in results) + " |",
        "|---|---|" + "---|" * len(results),
    ]
    first = next(iter(results.values()))
    for i, r in enumerate(first):
        cells = []
        for rows, rs in results.items():
            x = rs[i]
            cells.append(f"{x['plain_ms']:.1f} / {x['dpsql_ms']:.1f} ({x['ratio']:.1f}x)")
        lines.append(f"| {r['backend']} | {r['query']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "DuckDB bounds one-table queries with its weighted copies, `postgres` with weighted tables that a "
        "second role builds once per data version (`[engine] scratch_url`), and a local Spark with Parquet "
        "weighted copies in its private scratch directory; `postgres-per-unit` bounds with a per-person "
        'aggregation in every query (see README, "Where the data lives").',
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
