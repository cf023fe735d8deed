"""Apache Superset's REST API against dpsql serve, as an analyst's first dashboard goes: register
dpsql as a database, a SQL Lab query, a physical and a virtual dataset (their columns synced),
a bar chart and a table chart with their data, and a dashboard holding both. Run with the
Superset environment's Python; prints one JSON line.

    python superset_check.py SUPERSET_URL DPSQL_PORT DPSQL_PASSWORD
"""

import json
import sys

import requests

URL, PORT, PASSWORD = sys.argv[1].rstrip("/"), int(sys.argv[2]), sys.argv[3]
AGGREGATE = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
s = requests.Session()
out = {}


def call(method, path, **kw):
    r = s.request(method, URL + path, timeout=120, **kw)
    if r.status_code not in (200, 201):
        raise SystemExit(json.dumps({"failed": f"{method} {path}", "status": r.status_code, "body": r.text[:3000]}))
    return r.json()


token = call(
    "POST",
    "/api/v1/security/login",
    json={"username": "admin", "password": "admin-Pass-123", "provider": "db", "refresh": True},
)
s.headers["Authorization"] = f"Bearer {token['access_token']}"
s.headers.update({"X-CSRFToken": call("GET", "/api/v1/security/csrf_token/")["result"], "Referer": URL + "/"})

uri = f"postgresql+psycopg2://alice:{PASSWORD}@127.0.0.1:{PORT}/dpsql?sslmode=disable"
call("POST", "/api/v1/database/test_connection/", json={"database_name": "dpsql", "sqlalchemy_uri": uri})
db = call(
    "POST",
    "/api/v1/database/",
    json={
        "database_name": "dpsql",
        "sqlalchemy_uri": uri,
        "expose_in_sqllab": True,
        "allow_run_async": False,
        "allow_dml": False,
    },
)["id"]
out["tables"] = sorted(
    t["value"]
    for t in call("GET", f"/api/v1/database/{db}/tables/", params={"q": "(force:!t,schema_name:public)"})["result"]
)


def sql_lab(sql):
    r = s.post(
        URL + "/api/v1/sqllab/execute/",
        timeout=120,
        json={
            "database_id": db,
            "sql": sql,
            "runAsync": False,
            "schema": "public",
            "client_id": "dpsql" + str(len(out)),
            "queryLimit": 1000,
            "select_as_cta": False,
            "expand_data": True,
            "tmp_table_name": "",
            "templateParams": "{}",
        },
    )
    return r.status_code, r.json()


status, body = sql_lab(AGGREGATE)
out["sql_lab"] = sorted(row["sex"] for row in body.get("data", [])) if status == 200 else body
status, body = sql_lab("SELECT * FROM people")
out["sql_lab_rows"] = json.dumps(body)[:600]

people = call("POST", "/api/v1/dataset/", json={"database": db, "schema": "public", "table_name": "people"})["id"]
virtual = call(
    "POST", "/api/v1/dataset/", json={"database": db, "schema": "public", "table_name": "sex_counts", "sql": AGGREGATE}
)["id"]
call("PUT", f"/api/v1/dataset/{virtual}/refresh")
out["virtual_columns"] = sorted(
    c["column_name"] for c in call("GET", f"/api/v1/dataset/{virtual}")["result"]["columns"]
)


def chart(name, dataset, form, query):
    form = {**form, "datasource": f"{dataset}__table"}
    context = {
        "datasource": {"id": dataset, "type": "table"},
        "force": True,
        "queries": [query],
        "form_data": form,
        "result_format": "json",
        "result_type": "full",
    }
    chart_id = call(
        "POST",
        "/api/v1/chart/",
        json={
            "slice_name": name,
            "viz_type": form["viz_type"],
            "datasource_id": dataset,
            "datasource_type": "table",
            "params": json.dumps(form),
            "query_context": json.dumps(context),
        },
    )["id"]
    result = call("POST", "/api/v1/chart/data", json=context)["result"][0]
    return chart_id, result["data"]


bar, out["bar"] = chart(
    "sex (dpsql)",
    people,
    {"viz_type": "echarts_timeseries_bar", "x_axis": "sex", "metrics": ["count"], "groupby": [], "row_limit": 10000},
    {
        "columns": [{"columnType": "BASE_AXIS", "sqlExpression": "sex", "label": "sex", "expressionType": "SQL"}],
        "metrics": ["count"],
        "orderby": [["count", False]],
        "row_limit": 10000,
        "filters": [],
        "extras": {},
    },
)
table, out["table"] = chart(
    "sex counts (dpsql)",
    virtual,
    {"viz_type": "table", "query_mode": "raw", "all_columns": ["sex", "n"], "row_limit": 1000},
    {"columns": ["sex", "n"], "metrics": [], "orderby": [], "row_limit": 1000, "filters": [], "extras": {}},
)
position = {
    "DASHBOARD_VERSION_KEY": "v2",
    "ROOT_ID": {"type": "ROOT", "id": "ROOT_ID", "children": ["GRID_ID"]},
    "GRID_ID": {"type": "GRID", "id": "GRID_ID", "children": ["ROW-1"], "parents": ["ROOT_ID"]},
    "ROW-1": {
        "type": "ROW",
        "id": "ROW-1",
        "children": [f"CHART-{c}" for c in (bar, table)],
        "parents": ["ROOT_ID", "GRID_ID"],
        "meta": {"background": "BACKGROUND_TRANSPARENT"},
    },
}
for c in (bar, table):
    position[f"CHART-{c}"] = {
        "type": "CHART",
        "id": f"CHART-{c}",
        "children": [],
        "parents": ["ROOT_ID", "GRID_ID", "ROW-1"],
        "meta": {"chartId": c, "width": 6, "height": 50},
    }
dashboard = call(
    "POST",
    "/api/v1/dashboard/",
    json={"dashboard_title": "dpsql", "published": True, "position_json": json.dumps(position), "json_metadata": "{}"},
)["id"]
for c in (bar, table):
    call("PUT", f"/api/v1/chart/{c}", json={"dashboards": [dashboard]})
out.update(dashboard=dashboard, bar_id=bar, table_id=table)
print(json.dumps(out, default=str))
