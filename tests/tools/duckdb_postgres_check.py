"""DuckDB's postgres extension (the PyPI-packaged one, loaded from its wheel: no download) against
dpsql serve: ATTACH ... (TYPE postgres) and postgres_query, which read with COPY ... TO STDOUT
(FORMAT "binary"). Prints one JSON line."""

import json
import os
from pathlib import Path

import duckdb
import duckdb_extension_postgres_scanner as packaged

extension = next(Path(packaged.__file__).parent.glob("extensions/*/postgres_scanner.duckdb_extension"))
con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
con.execute(f"LOAD '{extension}'")
dsn = (
    f"host=127.0.0.1 port={os.environ['DPSQL_PORT']} dbname=dpsql user=alice "
    f"password={os.environ['DPSQL_PASSWORD']} sslmode=disable"
)
con.execute(f"ATTACH '{dsn}' AS dp (TYPE postgres, READ_ONLY)")
out = {}
grouped = con.execute(
    "SELECT * FROM postgres_query('dp', 'SELECT sex, COUNT(*) AS n FROM people GROUP BY sex') ORDER BY sex"
).fetchall()
out["grouped"] = [[s, int(n)] for s, n in grouped]
out["public"] = con.execute("SELECT COUNT(*) FROM dp.public.places").fetchone()[0]
try:
    con.execute("SELECT * FROM dp.public.people").fetchall()
    out["rows"] = "answered"
except duckdb.Error as e:
    out["rows"] = str(e)
out["tables"] = sorted(
    r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'dp'").fetchall()
)
print(json.dumps(out))
