"""COPY (<DP query>) TO STDOUT over the CopyOut protocol, in text, CSV and binary: psql's \\copy
and psycopg's copy(), charged once like the query itself."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from dpsql.errors import Error
from dpsql.server import codec, copyout


def test_options_and_escaping():
    c = copyout.parse("COPY (SELECT 1) TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';')")
    assert (c.query, c.format, c.header, c.delimiter, c.null) == ("SELECT 1", "csv", True, ";", "")
    assert copyout.parse("copy (select 2) to stdout with csv header").header
    assert copyout.parse("COPY places TO STDOUT").query == "SELECT * FROM places"
    text = copyout.parse("COPY (SELECT 1) TO STDOUT")
    lines = copyout.encode(text, ["a", "b"], [codec.TEXT, codec.INT8], [("x\ty\\z", None), ("", 3)])
    assert lines == [b"x\\ty\\\\z\t\\N\n", b"\t3\n"]
    csv = copyout.parse("COPY (SELECT 1) TO STDOUT (FORMAT csv, HEADER)")
    assert copyout.encode(csv, ["a", "b"], [codec.TEXT, codec.INT8], [('say "hi", ok', None), ("", 3)]) == [
        b"a,b\n", b'"say ""hi"", ok",\n', b'"",3\n']
    with pytest.raises(Error, match="read-only"):
        copyout.parse("COPY people FROM STDIN")


@pytest.mark.clients
@pytest.mark.slow
def test_psql_copy_and_psycopg_copy(serve, tmp_path):
    out = tmp_path / "counts.csv"
    done = subprocess.run(["psql", serve.dsn(), "-X", "-c",
                           f"\\copy (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) TO '{out}' WITH CSV HEADER"],
                          capture_output=True, text=True, env=serve.env(), timeout=60)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "sex,n" and [line.split(",")[0] for line in lines[1:]] == ["F", "M"]
    refused = subprocess.run(["psql", serve.dsn(), "-X", "-c", f"\\copy people TO '{tmp_path / 'rows.txt'}'"],
                             capture_output=True, text=True, env=serve.env(), timeout=60)
    assert refused.returncode != 0 and "selecting rows of a private table" in refused.stderr
    with psycopg.connect(serve.dsn(), autocommit=True) as pg:
        with pg.cursor() as cur:
            with cur.copy("COPY (SELECT kind, COUNT(*) FROM events GROUP BY kind) TO STDOUT (FORMAT BINARY)") as cp:
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
        pg.execute("BEGIN;DECLARE \"SQL_CUR1\" CURSOR FOR SELECT sex, COUNT(*) FROM people GROUP BY sex")
        with pg.cursor() as cur:
            cur.execute('FETCH 100 IN "SQL_CUR1"', prepare=True)
            assert [d.name for d in cur.description] == ["sex", "count"] and len(cur.fetchall()) == 2
        pg.execute('CLOSE "SQL_CUR1";COMMIT')
