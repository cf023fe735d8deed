"""Tools whose connect or introspection reads PostgreSQL's catalog in its own way, for real,
against a running `dpsql serve` of the sample hospital: ADBC (with polars and pyarrow), Django's
inspectdb and ORM, peewee's introspection and pwiz, psql's \\df and \\sf, pg_dump, Npgsql's (Power
BI's) type loader and pgAdmin 4's connect, tree and Query Tool statements (recorded from the tools
against PostgreSQL 15, tests/fixtures/tool_sql)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from .conftest import SAMPLE
from .server_fixture import PASSWORD, Serve

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tool_sql"


@pytest.fixture(scope="module")
def hospital_serve(tmp_path_factory):
    """`dpsql serve` of the sample hospital (patients and visits private, wards public)."""
    d = tmp_path_factory.mktemp("hospital")
    policy = d / "hospital.toml"
    policy.write_text((SAMPLE / "dpsql.toml").read_text().replace('source = "', f'source = "{SAMPLE}/'))
    s = Serve(policy, d / "ledger.sqlite", "--log-statements")
    yield s
    s.stop()


def _spent(serve) -> float:
    with psycopg.connect(serve.dsn()) as conn:
        cur = conn.execute("SHOW dpsql.budget")
        return dict(zip([d.name for d in cur.description], cur.fetchone()))["epsilon_spent"]


def _uri(serve) -> str:
    return f"postgresql://alice:{PASSWORD}@127.0.0.1:{serve.port}/dpsql?sslmode=disable"


def test_adbc_with_pyarrow_and_polars(hospital_serve):
    """ADBC loads its types from pg_type, describes the query and reads it as COPY ... (FORMAT
    binary): one charge per query, noisy counts, a public table's rows as they are."""
    import adbc_driver_postgresql.dbapi as dbapi
    import polars as pl

    before = _spent(hospital_serve)
    with dbapi.connect(_uri(hospital_serve)) as conn:
        cur = conn.cursor()
        cur.execute("SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM patients GROUP BY sex ORDER BY sex")
        table = cur.fetch_arrow_table()
        assert table.column_names == ["sex", "n", "mean_age"]
        assert table.column("sex").to_pylist() == ["F", "M", "X"]
        assert str(table.schema.field("n").type) == "int64" and str(table.schema.field("mean_age").type) == "double"
        assert 5000 < sum(table.column("n").to_pylist()) < 40000
        cur.execute("SELECT name, floor FROM wards ORDER BY name")
        wards = cur.fetch_arrow_table()
        assert wards.num_rows > 0 and str(wards.schema.field("floor").type) == "int64"
        frame = pl.read_database("SELECT region, COUNT(*) AS n FROM patients GROUP BY region", conn)
        assert frame.columns == ["region", "n"] and frame.height == 10
        # types ADBC reads by their receive functions' names (date_recv, timestamp_recv, boolrecv)
        cur.execute(
            "SELECT date_trunc('month', visit_date) AS month, smoker, COUNT(*) AS n FROM visits "
            "JOIN patients USING (patient_id) GROUP BY 1, 2 ORDER BY 1, 2"
        )
        months = cur.fetch_arrow_table()
        assert [str(t) for t in months.schema.types] == ["timestamp[us]", "bool", "int64"]
        assert months.num_rows == 48 and months.column("smoker").to_pylist()[:4] == [False, True, False, True]
        assert str(months.column("month")[0]) == "2023-01-01 00:00:00"
        cur.close()
    assert _spent(hospital_serve) == pytest.approx(before + 0.3)  # the three DP queries, each charged once
    frame = pl.read_database_uri(
        "SELECT diagnosis, AVG(cost) AS cost FROM visits GROUP BY diagnosis", _uri(hospital_serve), engine="adbc"
    )
    assert frame.height == 12 and frame.schema["cost"] == pl.Float64
    assert _spent(hospital_serve) == pytest.approx(before + 0.4)


def _django_project(folder: Path, port: int) -> dict[str, str]:
    """A Django project with one hand-written, unmanaged model over `patients`."""
    (folder / "hospital").mkdir()
    (folder / "hospital" / "__init__.py").write_text("")
    (folder / "hospital" / "models.py").write_text(
        textwrap.dedent("""
        from django.db import models


        class Patient(models.Model):
            patient_id = models.BigIntegerField(primary_key=True)
            age = models.BigIntegerField()
            sex = models.TextField()
            region = models.TextField()

            class Meta:
                managed = False
                db_table = "patients"
        """)
    )
    (folder / "settings.py").write_text(
        textwrap.dedent(f"""
        SECRET_KEY = "test"
        INSTALLED_APPS = ["hospital"]
        USE_TZ = True
        DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
        DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": "dpsql", "HOST": "127.0.0.1",
                                  "PORT": {port}, "USER": "alice", "PASSWORD": "{PASSWORD}",
                                  "OPTIONS": {{"sslmode": "disable"}}}}}}
        """)
    )
    (folder / "aggregate.py").write_text(
        textwrap.dedent("""
        import json

        import django

        django.setup()
        from django.db.models import Avg, Count

        from hospital.models import Patient

        by_region = list(Patient.objects.values("region").annotate(n=Count("*")).order_by("region"))
        by_sex = list(Patient.objects.values("sex").annotate(n=Count("*"), mean_age=Avg("age")).order_by("sex"))
        print(json.dumps({"by_region": by_region, "by_sex": by_sex, "count": Patient.objects.count()}))
        """)
    )
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(folder)}


def test_django_inspectdb_and_orm_aggregates(hospital_serve, tmp_path):
    env = _django_project(tmp_path, hospital_serve.port)
    inspect = subprocess.run(
        [sys.executable, "-m", "django", "inspectdb"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert inspect.returncode == 0, inspect.stderr[-3000:]
    models = inspect.stdout
    assert "Unable to inspect" not in models, models
    for model, table in (("Patients", "patients"), ("Visits", "visits"), ("Wards", "wards")):
        assert f"class {model}(models.Model):" in models and f"db_table = '{table}'" in models
    assert "age = models.BigIntegerField(blank=True, null=True, db_comment='dpsql: bounds [0, 110]')" in models
    assert "visit_date = models.DateField(" in models and "cost = models.FloatField(" in models
    assert "privacy unit patient_id" in models  # the policy, as the table's comment
    orm = subprocess.run(
        [sys.executable, "aggregate.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert orm.returncode == 0, orm.stderr[-3000:]
    out = json.loads(orm.stdout.strip().splitlines()[-1])
    assert [r["region"] for r in out["by_region"]] == sorted(
        ["North", "South", "East", "West", "Central", "Coast", "Valley", "Highlands", "Lakes", "Islands"]
    )
    # Each group's mean comes back as a number through the ORM. Its value is noisy: the small "X"
    # group's noised sum over noised count can fall outside [0, 110], so no range is asserted.
    assert [r["sex"] for r in out["by_sex"]] == ["F", "M", "X"]
    assert all(isinstance(r["mean_age"], float) for r in out["by_sex"]), out["by_sex"]
    assert 15000 < out["count"] < 25000  # 20,000 patients, noised


def test_peewee_introspection_and_pwiz(hospital_serve):
    from peewee import PostgresqlDatabase
    from playhouse.reflection import Introspector

    db = PostgresqlDatabase(
        "dpsql", host="127.0.0.1", port=hospital_serve.port, user="alice", password=PASSWORD, sslmode="disable"
    )
    database = Introspector.from_database(db).introspect()
    assert set(database.columns) == {"patients", "visits", "wards"}
    fields = {name: col.field_class.__name__ for name, col in database.columns["visits"].items()}
    assert (
        fields["visit_date"] == "DateField"
        and fields["cost"] == "DoubleField"
        and fields["visit_id"] == "BigIntegerField"
    )
    assert database.indexes["patients"] == [] and database.foreign_keys["visits"] == []
    db.close()
    pwiz = subprocess.run(
        [
            sys.executable,
            "-m",
            "pwiz",
            "-e",
            "postgresql",
            "-H",
            "127.0.0.1",
            "-p",
            str(hospital_serve.port),
            "-u",
            "alice",
            "dpsql",
        ],
        env=hospital_serve.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pwiz.returncode == 0, pwiz.stderr[-3000:]
    for model in ("class Patients(BaseModel):", "class Visits(BaseModel):", "class Wards(BaseModel):"):
        assert model in pwiz.stdout
    assert "length_of_stay = BigIntegerField(null=True)" in pwiz.stdout


def _psql(serve, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["psql", serve.dsn(), "-X", *args], env=serve.env(), capture_output=True, text=True, timeout=60
    )


def test_psql_df_sf_and_pg_dump(hospital_serve):
    df = _psql(hospital_serve, "-c", r"\df")
    assert df.returncode == 0 and "List of functions" in df.stdout, df.stderr
    avg = _psql(hospital_serve, "-c", r"\df avg")
    assert avg.returncode == 0 and "avg" in avg.stdout and "agg" in avg.stdout, avg.stderr
    detail = _psql(hospital_serve, "-c", r"\df+ avg")
    assert detail.returncode == 0 and "avg" in detail.stdout, detail.stderr
    config = _psql(hospital_serve, "-A", "-c", r"\dconfig bytea_output")
    assert "bytea_output|hex" in config.stdout, config.stderr
    sf = _psql(hospital_serve, "-c", r"\sf avg")
    assert sf.returncode != 0 and "functions have no source here: dpsql is a proxy" in sf.stderr
    missing = _psql(hospital_serve, "-c", r"\sf no_such_function")
    assert 'function "no_such_function" does not exist' in missing.stderr
    dump = subprocess.run(
        ["pg_dump", "--schema-only", hospital_serve.dsn()],
        env=hospital_serve.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dump.returncode != 0 and dump.stdout == ""
    for alternative in (r"\d+", "SQLAlchemy reflection", "sqlacodegen"):
        assert alternative in dump.stderr
    assert _psql(hospital_serve, "-c", "SELECT 1").returncode == 0  # the server goes on


def _statements(name: str) -> list[str]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_npgsql_type_loader_as_power_bi_sends_it(hospital_serve):
    """Npgsql (Power BI's PostgreSQL connector) sends its type loader as one simple query of
    several statements: psql -c sends it the same way. Arrays are told by their receive
    function (array_recv), joined from pg_proc on the regproc."""
    for batch in _statements("npgsql"):  # Npgsql 4.0 (Power BI's), 4.1-7, and today's
        proc = _psql(hospital_serve, "-A", "-F", "|", "-c", batch)
        assert proc.returncode == 0, proc.stderr
        rows = [line.split("|") for line in proc.stdout.splitlines()]
        assert any({"int4", "23", "b"} <= set(row) for row in rows)
        assert any({"_int4", "1007", "a", "23"} <= set(row) for row in rows)  # an array, of int4
        assert any({"record", "2249"} <= set(row) for row in rows)


def _replay(serve, entries: list[dict]) -> list[tuple[str, list[list[tuple]]]]:
    """Each statement on one connection as the tool sent it (simple protocol unless it has
    parameters), with the rows of each of its result sets."""
    out = []
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        for entry in entries:
            cur = (psycopg.Cursor if entry["params"] else psycopg.ClientCursor)(conn)
            cur.execute(entry["sql"], entry["params"] or None)
            results = []
            while True:
                results.append(cur.fetchall() if cur.description else [])
                if not cur.nextset():
                    break
            out.append((entry["sql"], results))
    return out


def _answer(answers, marker: str, nth: int = 0) -> list[tuple]:
    """The rows of the `nth` statement whose text (whitespace aside) holds `marker`."""
    found = [results[-1] for sql, results in answers if " ".join(marker.split()) in " ".join(sql.split())]
    assert len(found) > nth, marker
    return found[nth]


def test_pgadmin_connect_tree_dashboard_and_query_tool(hospital_serve):
    """Every statement pgAdmin 4 (9.18) sent to PostgreSQL 15 to connect, show the dashboard,
    expand the tree down to each table's columns, show a table's and a column's properties,
    SQL, statistics and dependencies, and run queries in the Query Tool with its completions,
    replayed in order: each answers, from the schema and the policy (statistics unknown)."""
    answers = _replay(hospital_serve, _statements("pgadmin"))
    connect = next(results for sql, results in answers if "pg_show_all_settings()" in sql)
    assert [("hex",)] in connect  # bytea_output, through set_config over pg_show_all_settings()
    assert ("dpsql",) == _answer(answers, "pg_catalog.pg_database db", 0)[0][1:2]
    schemas = [row[1] for row in _answer(answers, "nsp.nspname as name, pg_catalog.has_schema_privilege")]
    assert "public" in schemas and "pg_catalog" not in schemas
    tables = _answer(answers, "SELECT rel.oid, rel.relname AS name, (SELECT count(*) FROM pg_catalog.pg_trigger")
    assert sorted(row[1] for row in tables) == ["patients", "visits", "wards"]
    columns = {row[0]: row for row in _answer(answers, "SELECT DISTINCT att.attname as name, att.attnum as OID")}
    assert list(columns) == ["patient_id", "age", "sex", "region", "insurance", "income", "smoker"]
    assert columns["age"][2] == "bigint" and "dpsql: bounds [0, 110]" in columns["age"]
    properties = _answer(answers, "rel.reltablespace AS spcoid")[0]
    assert properties[1] == "patients" and any("privacy unit patient_id" in str(v) for v in properties)
    assert _answer(answers, "/*pga4dash*/ SELECT pid, datname") == []  # other sessions are nobody's business
    query_tool = _answer(answers, "SELECT sex, COUNT(*) AS n FROM patients GROUP BY sex")
    assert [row[0] for row in query_tool] == ["F", "M", "X"] and all(row[1] > 0 for row in query_tool)
    assert len(_answer(answers, "SELECT * FROM wards")) > 0  # a public table's rows
    stats = _answer(answers, 'seq_scan AS "Sequential scans"')
    assert stats and all(value is None for value in stats[0][:-1])  # no statistic is known (no index: size 0)


def test_pg_cancel_backend_reaches_only_the_analysts_own_connections(hospital_serve):
    """pgAdmin's Query Tool cancels a running query with pg_cancel_backend(pid) on another
    connection: an analyst's own connection is signalled, another analyst's is refused."""
    with (
        psycopg.connect(hospital_serve.dsn(), autocommit=True) as mine,
        psycopg.connect(hospital_serve.dsn(), autocommit=True) as other,
        psycopg.connect(hospital_serve.dsn("bob"), autocommit=True) as bobs,
    ):
        pid = mine.info.backend_pid
        assert other.execute(f"SELECT pg_catalog.pg_cancel_backend({pid});").fetchall() == [(True,)]
        assert other.execute("SELECT pg_cancel_backend(2147483000)").fetchall() == [(False,)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bobs.execute(f"SELECT pg_cancel_backend({pid})")
        assert mine.execute("SELECT 1").fetchall() == [(1,)]  # nothing was under way: the session goes on
