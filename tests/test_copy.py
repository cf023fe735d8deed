"""COPY (<DP query>) TO STDOUT over the CopyOut protocol, in text, CSV and binary: psql's \\copy
and psycopg's copy(), charged once like the query itself."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from dpsql.errors import Error
from dpsql.server.wire import copyout, types


def test_options_and_escaping():
    c = copyout.parse("COPY (SELECT 1) TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';')")
    assert (c.query, c.format, c.header, c.delimiter, c.null) == ("SELECT 1", "csv", True, ";", "")
    assert copyout.parse("copy (select 2) to stdout with csv header").header
    assert copyout.parse("COPY places TO STDOUT").query == "SELECT * FROM places"
    text = copyout.parse("COPY (SELECT 1) TO STDOUT")
    lines = copyout.encode(text, ["a", "b"], [types.TEXT, types.INT8], [("x\ty\\z", None), ("", 3)])
    assert lines == [b"x\\ty\\\\z\t\\N\n", b"\t3\n"]
    csv = copyout.parse("COPY (SELECT 1) TO STDOUT (FORMAT csv, HEADER)")
    assert copyout.encode(csv, ["a", "b"], [types.TEXT, types.INT8], [('say "hi", ok', None), ("", 3)]) == [
        b"a,b\n",
        b'"say ""hi"", ok",\n',
        b'"",3\n',
    ]
    with pytest.raises(Error, match="read-only"):
        copyout.parse("COPY people FROM STDIN")


# Every spelling PostgreSQL accepts, and what it asks: (format, header, delimiter, null, quote, escape, force_quote).
# DuckDB's postgres extension reads with the first; the pre-9.0 forms are still in PostgreSQL's grammar.
_SPELLINGS = [
    ('COPY (SELECT 1) TO STDOUT (FORMAT "binary")', ("binary", False, "\t", "\\N", '"', '"', False)),
    ("COPY (SELECT 1) TO STDOUT (FORMAT binary);", ("binary", False, "\t", "\\N", '"', '"', False)),
    ("COPY (SELECT 1) TO STDOUT (FORMAT 'binary')", ("binary", False, "\t", "\\N", '"', '"', False)),
    ("COPY (SELECT 1) TO STDOUT WITH (FORMAT BINARY)", ("binary", False, "\t", "\\N", '"', '"', False)),
    ("COPY (SELECT 1) TO STDOUT WITH BINARY", ("binary", False, "\t", "\\N", '"', '"', False)),
    ("COPY (SELECT 1) TO STDOUT BINARY", ("binary", False, "\t", "\\N", '"', '"', False)),
    ("COPY BINARY places TO STDOUT", ("binary", False, "\t", "\\N", '"', '"', False)),
    ("""COPY (SELECT 1) TO STDOUT (FORMAT "csv", HEADER on, NULL 'NA')""", ("csv", True, ",", "NA", '"', '"', False)),
    (
        "COPY (SELECT 1) TO STDOUT WITH CSV HEADER DELIMITER AS ';' QUOTE AS '''' FORCE QUOTE *",
        ("csv", True, ";", "", "'", "'", True),
    ),
    (
        r"COPY (SELECT 1) TO STDOUT (FORMAT csv, FORCE_QUOTE *, ESCAPE E'\\', ENCODING 'UTF8')",
        ("csv", False, ",", "", '"', "\\", True),
    ),
    ("COPY (SELECT 1) TO STDOUT USING DELIMITERS '|' WITH NULL AS ''", ("text", False, "|", "", '"', '"', False)),
    (r"COPY (SELECT 1) TO STDOUT (HEADER false, DELIMITER E'\t')", ("text", False, "\t", "\\N", '"', '"', False)),
]


@pytest.mark.parametrize("sql,expected", _SPELLINGS)
def test_copy_option_spellings(sql, expected):
    c = copyout.parse(sql)
    assert (c.format, c.header, c.delimiter, c.null, c.quote, c.escape, c.force_quote) == expected


@pytest.mark.parametrize(
    "sql,sqlstate",
    [
        ('COPY (SELECT 1) TO STDOUT (FORMAT "BINARY")', "22023"),  # a quoted name keeps its case, as in PostgreSQL
        ("COPY (SELECT 1) TO STDOUT (FORMAT parquet)", "22023"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT binary, HEADER)", "42601"),
        ("COPY (SELECT 1) TO STDOUT (QUOTE '''')", "0A000"),  # CSV only
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, FORCE_QUOTE (a))", "0A000"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, DELIMITER ';;')", "0A000"),
        ("COPY (SELECT 1) TO STDOUT (FREEZE)", "0A000"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv", "42601"),
        ("COPY (SELECT 1) TO STDOUT (ENCODING 'LATIN1')", "0A000"),
    ],
)
def test_copy_option_refusals(sql, sqlstate):
    with pytest.raises(Error) as info:
        copyout.parse(sql)
    assert info.value.sqlstate == sqlstate


def test_csv_quote_escape_and_force_quote():
    c = copyout.parse(r"COPY (SELECT 1) TO STDOUT (FORMAT csv, HEADER, QUOTE '''', ESCAPE E'\\', FORCE_QUOTE *)")
    assert copyout.encode(c, ["a", "b"], [types.TEXT, types.INT8], [("it's \\ here", None), ("x", 3)]) == [
        b"a,b\n",
        b"'it\\'s \\\\ here',\n",
        b"'x','3'\n",
    ]
    text = copyout.parse("COPY (SELECT 1) TO STDOUT (HEADER)")  # PostgreSQL 15 writes a header in text format too
    assert copyout.encode(text, ["a b", "c"], [types.TEXT, types.INT8], [("x", 1)]) == [b"a b\tc\n", b"x\t1\n"]


@pytest.mark.clients
@pytest.mark.slow
def test_psql_copy_and_psycopg_copy(serve, tmp_path):
    out = tmp_path / "counts.csv"
    done = subprocess.run(
        [
            "psql",
            serve.dsn(),
            "-X",
            "-c",
            f"\\copy (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) TO '{out}' WITH CSV HEADER",
        ],
        capture_output=True,
        text=True,
        env=serve.env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "sex,n" and [line.split(",")[0] for line in lines[1:]] == ["F", "M"]
    refused = subprocess.run(
        ["psql", serve.dsn(), "-X", "-c", f"\\copy people TO '{tmp_path / 'rows.txt'}'"],
        capture_output=True,
        text=True,
        env=serve.env(),
        timeout=60,
    )
    assert refused.returncode != 0 and "selecting rows of a private table" in refused.stderr
    with psycopg.connect(serve.dsn(), autocommit=True) as pg:
        with pg.cursor() as cur:
            # DuckDB's postgres extension's spelling
            with cur.copy('COPY (SELECT kind, COUNT(*) FROM events GROUP BY kind) TO STDOUT (FORMAT "binary")') as cp:
                cp.set_types(["text", "int8"])
                binary = sorted(cp.rows())
            with cur.copy("COPY (SELECT kind, COUNT(*) FROM events GROUP BY kind) TO STDOUT") as cp:
                text = sorted(cp.rows())
        assert [r[0] for r in binary] == ["a", "b", "c"] and isinstance(binary[0][1], int)
        assert [(k, str(n)) for k, n in binary] == text  # the second answer is the first, from the cache
        assert pg.execute("SELECT queries FROM dpsql_budget").fetchone() == (2,)  # the \\copy and the first COPY


@pytest.mark.slow
def test_declare_fetch_close_charges_once(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as pg:
        pg.execute("BEGIN")
        pg.execute("DECLARE c1 NO SCROLL CURSOR WITH HOLD FOR SELECT kind, COUNT(*) FROM events GROUP BY kind")
        first = pg.execute("FETCH 2 IN c1").fetchall()
        rest = pg.execute("FETCH FORWARD ALL FROM c1").fetchall()
        assert len(first) == 2 and len(rest) == 1 and pg.execute("FETCH NEXT FROM c1").fetchall() == []
        pg.execute("CLOSE c1")
        pg.execute("COMMIT")
        with pytest.raises(psycopg.errors.InvalidCursorName):
            pg.execute("FETCH 1 FROM c1")
        assert pg.execute("SELECT queries FROM dpsql_budget").fetchone() == (1,)
        # psqlODBC sends the cursor's statements in one simple query, then fetches through Describe/Execute
        pg.execute('BEGIN;DECLARE "SQL_CUR1" CURSOR FOR SELECT sex, COUNT(*) FROM people GROUP BY sex')
        with pg.cursor() as cur:
            cur.execute('FETCH 100 IN "SQL_CUR1"', prepare=True)
            assert [d.name for d in cur.description] == ["sex", "count"] and len(cur.fetchall()) == 2
        pg.execute('CLOSE "SQL_CUR1";COMMIT')


def test_duckdb_postgres_extension(serve):
    """DuckDB's postgres extension, from PyPI (its wheel holds the extension: nothing downloaded at
    run time), ATTACHes dpsql, reads the catalog, and reads with COPY ... (FORMAT "binary"): a DP
    query through postgres_query is answered and charged once, a public table is read, and a
    private table's rows are refused with the reason."""
    import json
    import os

    from .server_fixture import PASSWORD
    from .tool_envs import SCRIPTS, python_tool

    python = python_tool("duckdb-postgres")
    env = {**os.environ, "DPSQL_PORT": str(serve.port), "DPSQL_PASSWORD": PASSWORD}
    proc = subprocess.run(
        [str(python), str(SCRIPTS / "duckdb_postgres_check.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [s for s, _ in out["grouped"]] == ["F", "M"] and all(isinstance(n, int) for _, n in out["grouped"])
    assert out["public"] == 3 and out["tables"] == ["events", "people", "places", "rows"]
    assert "selecting rows of a private table is not allowed" in out["rows"]
    with psycopg.connect(serve.dsn(), autocommit=True) as pg:
        assert pg.execute("SELECT queries FROM dpsql_budget").fetchone() == (1,)
