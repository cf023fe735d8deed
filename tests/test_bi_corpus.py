"""The SQL shapes BI tools emit (Tableau, Metabase, Power BI, Looker, Superset), as their
documentation and public threads show them, against the sample hospital: each is answered, or
refused with a message that names the construct and nothing charged."""

from __future__ import annotations

import pytest

import dpsql

ANSWERED = [
    # Tableau: quoted aliases of the table, COUNT(1), SUM(1) as a count, custom SQL as a subquery
    'SELECT "patients"."sex" AS "sex", COUNT(1) AS "cnt:patient_id:ok" FROM "public"."patients" "patients" GROUP BY 1',
    'SELECT SUM(1) AS "cnt:patients:ok" FROM "public"."patients" "patients" HAVING (COUNT(1) > 0)',
    'SELECT * FROM (SELECT sex, COUNT(*) AS n FROM patients GROUP BY sex) "Custom SQL Query" LIMIT 0',
    'SELECT "Custom SQL Query"."sex" AS "sex", SUM("Custom SQL Query"."n") AS "sum:n:ok" '
    'FROM (SELECT sex, COUNT(*) AS n FROM patients GROUP BY sex) "Custom SQL Query" GROUP BY 1',
    'SELECT CAST(EXTRACT(YEAR FROM "visits"."visit_date") AS BIGINT) AS "yr:visit_date:ok", '
    'AVG("visits"."cost") AS "avg:cost:ok" FROM "public"."visits" "visits" GROUP BY 1',
    'SELECT "patients"."region" AS "region" FROM "public"."patients" "patients" GROUP BY 1 ORDER BY 1 ASC',
    # Metabase: fully qualified columns, nested questions as "source", date buckets
    'SELECT "public"."patients"."sex" AS "sex", count(*) AS "count" FROM "public"."patients" '
    'GROUP BY "public"."patients"."sex" ORDER BY "public"."patients"."sex" ASC',
    'SELECT "source"."sex" AS "sex", "source"."count" AS "count" FROM (SELECT "public"."patients"."sex" AS "sex", '
    'count(*) AS "count" FROM "public"."patients" GROUP BY "public"."patients"."sex") AS "source" LIMIT 2000',
    'SELECT CAST(date_trunc(\'month\', "public"."visits"."visit_date") AS date) AS "visit_date", count(*) AS "count" '
    'FROM "public"."visits" GROUP BY CAST(date_trunc(\'month\', "public"."visits"."visit_date") AS date) '
    'ORDER BY CAST(date_trunc(\'month\', "public"."visits"."visit_date") AS date) ASC',
    'SELECT avg("public"."patients"."age") AS "avg", sum("public"."patients"."income") AS "sum" '
    'FROM "public"."patients" WHERE "public"."patients"."smoker" = TRUE',
    # Power BI DirectQuery: "_" wrappers, NOT x IS NULL, huge LIMITs, LIMIT 0 probes
    'select "_"."sex", "_"."a0" from (select "rows"."sex" as "sex", count(1) as "a0" from "public"."patients" "rows" '
    'group by "sex") "_" where not "_"."a0" is null limit 1000001',
    'select count(1) as "a0" from "public"."visits" "_"',
    'select "$Table"."region" as "region" from "public"."patients" "$Table" limit 0',
    # Looker: dotted aliases, FETCH NEXT, DATE(), COALESCE(SUM())
    'SELECT patients.sex AS "patients.sex", COUNT(*) AS "patients.count" FROM public.patients AS patients '
    "GROUP BY 1 ORDER BY 2 DESC FETCH NEXT 500 ROWS ONLY",
    'SELECT COALESCE(SUM(visits.cost), 0) AS "visits.total_cost" FROM public.visits AS visits LIMIT 500',
    'SELECT (DATE(visits.visit_date)) AS "visits.visit_date", COUNT(*) AS "visits.count" FROM public.visits AS visits '
    "GROUP BY 1 ORDER BY 1 DESC LIMIT 500",
    # Superset: charts, time series, virtual datasets, filter values
    "SELECT sex AS sex, COUNT(*) AS count FROM public.patients GROUP BY sex ORDER BY count DESC LIMIT 10000",
    "SELECT DATE_TRUNC('month', visit_date) AS __timestamp, COUNT(*) AS count FROM public.visits "
    "GROUP BY DATE_TRUNC('month', visit_date) LIMIT 50000",
    'SELECT region AS region, AVG(income) AS "AVG(income)" FROM (SELECT * FROM patients) AS virtual_table '
    'GROUP BY region ORDER BY "AVG(income)" DESC LIMIT 100',
    "SELECT DISTINCT diagnosis FROM visits LIMIT 1000",
]

REFUSED = [
    ('CREATE LOCAL TEMPORARY TABLE "#Tableau_1_Connect" ("COL" INTEGER) ON COMMIT PRESERVE ROWS', "temporary tables"),
    (
        'SELECT "public"."patients"."patient_id" AS "patient_id", "public"."patients"."age" AS "age" '
        'FROM "public"."patients" LIMIT 2000',
        "selecting rows of a private table",
    ),
    ("SELECT DISTINCT insurance FROM patients", "DISTINCT"),
]


@pytest.mark.parametrize("sql", ANSWERED)
def test_answered(hospital, sql):
    hospital.execute(sql)
    hospital.fetchall()
    assert hospital.description


@pytest.mark.parametrize("sql,fragment", REFUSED)
def test_refused_with_the_construct_named(hospital, sql, fragment):
    before = hospital.connection.session.budget()["epsilon"]["spent"]
    with pytest.raises(dpsql.Error) as e:
        hospital.execute(sql)
    assert fragment in str(e.value)
    assert hospital.connection.session.budget()["epsilon"]["spent"] == before
