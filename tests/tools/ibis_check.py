"""ibis against dpsql serve: expressions compile to aggregates dpsql answers; con.sql() learns its
schema from a temporary view; to_pyarrow reads through a psycopg 3 named cursor."""

import json
import os

import ibis

con = ibis.postgres.connect(
    host="127.0.0.1",
    port=int(os.environ["DPSQL_PORT"]),
    user="alice",
    password=os.environ["DPSQL_PASSWORD"],
    database="dpsql",
    sslmode="disable",
)
people = con.table("people")
older = people.filter(people.age > 30)
out = {
    "tables": sorted(con.list_tables()),
    "grouped": len(people.group_by("sex").aggregate(n=people.count()).execute()),
    "mean_age": float(people.age.mean().execute()),
    "filtered": len(older.group_by("sex").aggregate(n=older.count()).execute()),
    "sql": len(con.sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex").execute()),
    "arrow": people.group_by("sex").aggregate(n=people.count()).to_pyarrow().num_rows,
    "public": len(con.table("places").execute()),
}
try:
    people.head(3).execute()
    out["rows"] = "answered"
except Exception as e:  # reading a private table's rows is refused by design
    out["rows"] = str(e)
print(json.dumps(out))
