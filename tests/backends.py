"""The sample hospital on every backend: DuckDB (the sample policy as is), a throwaway
PostgreSQL server (tables copied in, read through a role that may only SELECT them), and a
local Spark session (reading the same Parquet files)."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
READER = "dpsql_reader"
SCRATCH = "dpsql_scratch"  # builds PostgreSQL weighted tables ([engine] scratch_url)


def _policy_body() -> str:
    """The sample policy without its [engine] and sources, for backends that hold the tables."""
    text = (SAMPLE / "dpsql.toml").read_text()
    return re.sub(r"(?m)^source = .*\n", "", text)


def load_into_postgres(admin_url: str, tables: dict[str, Path] | None = None) -> None:
    """Copy tables (default: the sample's) into PostgreSQL and let READER select them only."""
    tables = tables or {
        "patients": SAMPLE / "patients.parquet",
        "visits": SAMPLE / "visits.parquet",
        "wards": SAMPLE / "wards.csv",
    }
    con = duckdb.connect()
    try:
        _copy_into_postgres(
            con,
            {
                name: f"SELECT * FROM {'read_parquet' if path.suffix == '.parquet' else 'read_csv'}('{path}')"
                for name, path in tables.items()
            },
            admin_url,
            "public",
        )
    finally:
        con.close()


def _copy_into_postgres(con: duckdb.DuckDBPyConnection, queries: dict[str, str], admin_url: str, schema: str) -> None:
    """Each DuckDB query's rows into a new table of `schema`, which READER may only SELECT."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as pg:
        pg.execute(f"DO $$ BEGIN CREATE ROLE {READER} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        pg.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {READER}')
        for name, query in queries.items():
            rel = con.sql(query)
            cols = ", ".join(f'"{c}" {_pg_type(str(t))}' for c, t in zip(rel.columns, rel.types))
            pg.execute(f'DROP TABLE IF EXISTS "{schema}"."{name}"')
            pg.execute(f'CREATE TABLE "{schema}"."{name}" ({cols})')
            rows = rel.fetchall()
            if rows:
                with pg.cursor().copy(f'COPY "{schema}"."{name}" FROM STDIN') as copy:
                    for row in rows:
                        copy.write_row(row)
            pg.execute(f'GRANT SELECT ON "{schema}"."{name}" TO {READER}')
            pg.execute(f'ANALYZE "{schema}"."{name}"')


def allow_scratch(admin_url: str, schema: str = "public") -> str:
    """A second role, SCRATCH, that may read the tables of `schema` and create tables in the
    database (PostgreSQL weighted tables, [engine] scratch_url); its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as pg:
        pg.execute(f"DO $$ BEGIN CREATE ROLE {SCRATCH} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        pg.execute(f'GRANT CREATE ON DATABASE "{pg.info.dbname}" TO {SCRATCH}')
        pg.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {SCRATCH}')
        pg.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {SCRATCH}')
    return admin_url.replace("postgres@", f"{SCRATCH}@")


def _pg_type(duckdb_type: str) -> str:
    t = duckdb_type.upper()
    return {
        "VARCHAR": "text",
        "DOUBLE": "double precision",
        "FLOAT": "real",
        "HUGEINT": "numeric",
        "TIMESTAMP": "timestamp",
    }.get(t, t.lower())


def postgres_policy(directory: Path, reader_url: str, extra: str = "") -> Path:
    path = directory / "dpsql-postgres.toml"
    path.write_text(f'[engine]\nkind = "postgres"\nurl = "{reader_url}"\n\n' + _policy_body() + extra)
    return path


def spark_engine(master: str = "local[2]", conf: dict[str, str] | None = None, scratch_dir: Path | None = None) -> str:
    """An [engine] section for Spark: a local session by default, or a cluster's master (with
    its application's conf, tests/spark_cluster.py, and a scratch_dir for weighted copies)."""
    conf = conf or {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}
    text = f'[engine]\nkind = "spark"\nmaster = "{master}"\n'
    if scratch_dir is not None:
        text += f'scratch_dir = "{scratch_dir}"\n'
    return text + "conf = { " + ", ".join(f'"{k}" = "{v}"' for k, v in conf.items()) + " }\n"


def spark_policy(directory: Path, extra: str = "", engine: str | None = None, name: str = "dpsql-spark") -> Path:
    """The sample policy on Spark (sources resolve against sample_data): a local session, or `engine`."""
    text = (SAMPLE / "dpsql.toml").read_text()
    text = re.sub(r'(?m)^source = "(.*)"', lambda m: f'source = "{SAMPLE / m.group(1)}"', text)
    path = directory / f"{name}.toml"
    path.write_text((engine or spark_engine()) + "\n" + text + extra)
    return path


def duckdb_tables(db_path: Path) -> list[str]:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
    finally:
        con.close()


def duckdb_to_postgres(db_path: Path, admin_url: str, schema: str) -> None:
    """Every table of a DuckDB file into its own PostgreSQL schema, readable by READER only."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as pg:
        pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        pg.execute(f'CREATE SCHEMA "{schema}"')
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        _copy_into_postgres(
            con, {name: f'SELECT * FROM "{name}"' for name in duckdb_tables(db_path)}, admin_url, schema
        )
    finally:
        con.close()


def duckdb_to_parquet(db_path: Path, directory: Path) -> dict[str, Path]:
    con = duckdb.connect(str(db_path), read_only=True)
    out = {}
    try:
        for name in duckdb_tables(db_path):
            out[name] = directory / f"{name}.parquet"
            con.execute(f"COPY \"{name}\" TO '{out[name]}' (FORMAT parquet)")
    finally:
        con.close()
    return out


def move_policy(
    policy: Path,
    backend: str,
    *,
    reader_url: str | None = None,
    schema: str | None = None,
    scratch_url: str | None = None,
    engine: str | None = None,
) -> Path:
    """A policy over `[engine] database = "db.duckdb"` (tests/conftest.py) moved onto another
    backend holding the same tables: PostgreSQL (schema) or Spark (Parquet files beside it; a
    local session, or `engine`)."""
    text = policy.read_text()
    db = policy.parent / "db.duckdb"
    if backend == "postgres":
        engine = f'[engine]\nkind = "postgres"\nurl = "{reader_url}"\nschema = "{schema}"\n'
        if scratch_url is not None:
            engine += f'scratch_url = "{scratch_url}"\n'
    else:
        files = duckdb_to_parquet(db, policy.parent)
        engine = engine or spark_engine(conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
        for name, path in files.items():
            text = re.sub(rf"(?m)^\[tables\.{name}\]\n", f'[tables.{name}]\nsource = "{path}"\n', text)
    text = re.sub(r'(?m)^\[engine\]\ndatabase = "db.duckdb"\n', engine, text)
    out = policy.parent / f"policy-{backend}.toml"
    out.write_text(text)
    return out


def sample_on(backend: str, request, directory: Path, database: str) -> Path:
    """The sample policy on PostgreSQL (its tables loaded into a new `database`, read by the
    reader role) or on a local Spark session."""
    if backend == "postgres":
        admin = request.getfixturevalue("pg_server").create_database(database)
        load_into_postgres(admin)
        return postgres_policy(directory, admin.replace("postgres@", f"{READER}@"))
    return spark_policy(directory)
