"""harlequin's PostgreSQL adapter against dpsql serve, through its adapter API (no terminal):
the catalog tree, completions, and a query."""

import json
import os

from harlequin_postgres import HarlequinPostgresAdapter

adapter = HarlequinPostgresAdapter(
    conn_str=(
        f"host=127.0.0.1 port={os.environ['DPSQL_PORT']} dbname=dpsql user=alice "
        f"password={os.environ['DPSQL_PASSWORD']} sslmode=disable",
    )
)
conn = adapter.connect()


def labels(items, depth=0):
    out = []
    for item in items:
        out.append(item.label)
        children = getattr(item, "children", None)
        if not children and hasattr(item, "fetch_children") and depth < 3:
            children = list(item.fetch_children())
        out.extend(labels(children or [], depth + 1))
    return out


catalog = labels(conn.get_catalog().items)
completions = {c.label for c in conn.get_completions()}
cursor = conn.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
rows = cursor.set_limit(500).fetchall()
print(json.dumps({"catalog": catalog, "completions": sorted(completions), "rows": len(rows)}))
conn.close()
