from dpsql.session import Session


def test_grouped_count_runs(session: Session):
    r = session.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert [row[0] for row in r.rows] == ["F", "M"]
    assert r.dp["cost"]["epsilon"] == 1.0
