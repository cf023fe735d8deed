"""The sample hospital on every backend: DuckDB (the sample policy as is), a throwaway
PostgreSQL server (tables copied in, read through a role that may only SELECT them), and a
local Spark session (reading the same Parquet files)."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
READER = "dpsql_reader"


def _policy_body() -> str:
    """The sample policy without its [engine] and sources, for backends that hold the tables."""
    text = (SAMPLE / "dpsql.toml").read_text()
    return re.sub(r'(?m)^source = .*\n', "", text)


def load_into_postgres(admin_url: str, reader_url: str, tables: dict[str, Path] | None = None) -> None:
    """Copy tables (default: the sample's) into PostgreSQL and let READER select them only."""
    import psycopg

    tables = tables or {"patients": SAMPLE / "patients.parquet", "visits": SAMPLE / "visits.parquet",
                        "wards": SAMPLE / "wards.csv"}
    con = duckdb.connect()
    with psycopg.connect(admin_url, autocommit=True) as pg:
        pg.execute(f"DO $$ BEGIN CREATE ROLE {READER} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        for name, path in tables.items():
            reader = "read_parquet" if path.suffix == ".parquet" else "read_csv"
            rel = con.sql(f"SELECT * FROM {reader}('{path}')")
            cols = ", ".join(f'"{c}" {_pg_type(str(t))}' for c, t in zip(rel.columns, rel.types))
            pg.execute(f'DROP TABLE IF EXISTS "{name}"')
            pg.execute(f'CREATE TABLE "{name}" ({cols})')
            with pg.cursor().copy(f'COPY "{name}" FROM STDIN') as copy:
                for row in rel.fetchall():
                    copy.write_row(row)
            pg.execute(f'GRANT SELECT ON "{name}" TO {READER}')
            pg.execute(f'ANALYZE "{name}"')
    con.close()


def _pg_type(duckdb_type: str) -> str:
    t = duckdb_type.upper()
    return {"VARCHAR": "text", "DOUBLE": "double precision", "FLOAT": "real", "HUGEINT": "numeric",
            "TIMESTAMP": "timestamp"}.get(t, t.lower())


def postgres_policy(directory: Path, reader_url: str, extra: str = "") -> Path:
    path = directory / "dpsql-postgres.toml"
    path.write_text(f'[engine]\nkind = "postgres"\nurl = "{reader_url}"\n\n' + _policy_body() + extra)
    return path


def spark_policy(directory: Path, extra: str = "") -> Path:
    """The sample policy on a local Spark session (sources resolve against sample_data)."""
    text = (SAMPLE / "dpsql.toml").read_text()
    text = re.sub(r'(?m)^source = "(.*)"', lambda m: f'source = "{SAMPLE / m.group(1)}"', text)
    path = directory / "dpsql-spark.toml"
    path.write_text('[engine]\nkind = "spark"\nmaster = "local[2]"\n'
                    'conf = { "spark.sql.shuffle.partitions" = "4", "spark.ui.enabled" = "false" }\n\n' + text + extra)
    return path
