"""Every policy mistake is reported with file, table, column and the fix."""

from __future__ import annotations

import textwrap

import pytest

from dpsql.config import exact, load_policy
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.errors import PolicyError

from .conftest import SAMPLE, default_events, default_people, make_db

BASE = """
[engine]
database = "db.duckdb"
[tables.people]
privacy_unit = "pid"
{people}
[tables.places]
public = true
"""


def _policy(tmp_path, people="", extra=""):
    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    p = tmp_path / "policy.toml"
    p.write_text(textwrap.dedent(BASE.format(people=people)) + extra)
    return p


@pytest.mark.parametrize(
    "people,fragments",
    [
        ("columns.age = { lower = 100, upper = 0 }", ["column 'age'", "greater than upper", "swap"]),
        ("columns.age = { lower = nan, upper = 10 }", ["column 'age'", "not a finite number"]),
        ("columns.age = { lower = 0, upper = inf }", ["column 'age'", "not a finite number"]),
        ("columns.age = { lower = 0 }", ["only one of lower and upper"]),
        ("columns.age = { lower = 0, upper = 1, keys = [1] }", []),
        ("max_groups = 0", ["max_groups", "at least 1"]),
        ("colour = 3", ["unknown key 'colour'"]),
        ("columns.sex = { keys = [] }", ["non-empty"]),
        ("columns.sex = { keys = ['F', 'F'] }", ["duplicates"]),
        ("columns.sex = { keys_from = 'nowhere.name' }", ["keys_from names table 'nowhere'"]),
        ("columns.sex = { keys_from = 'people.sex' }", ["which is private"]),
        ("columns.sex = { keys_from = 'places' }", ["TABLE.COLUMN"]),
    ],
)
def test_static_mistakes(tmp_path, people, fragments):
    p = _policy(tmp_path, people)
    if not fragments:
        load_policy(p)
        return
    with pytest.raises(PolicyError) as info:
        load_policy(p)
    text = str(info.value)
    assert str(p) in text and "[tables.people]" in text
    for f in fragments:
        assert f in text


def test_missing_privacy_unit(tmp_path):
    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    p = tmp_path / "policy.toml"
    p.write_text('[engine]\ndatabase = "db.duckdb"\n[tables.people]\nmax_rows = 2\n')
    with pytest.raises(PolicyError) as info:
        load_policy(p)
    assert "missing privacy_unit" in str(info.value) and 'privacy_unit = "row"' in info.value.hint


@pytest.mark.parametrize(
    "people,extra,fragment",
    [
        ("columns.height = { lower = 0, upper = 2 }", "", "column 'height': no such column"),
        ("", '[tables.ghosts]\nprivacy_unit = "pid"\n', "no table 'ghosts'"),
        ("columns.sex = { keys_from = 'places.title' }", "", "does not resolve"),
        ("columns.city = { lower = 0, upper = 2 }", "", "bounds on a VARCHAR column"),
    ],
)
def test_schema_mistakes(tmp_path, people, extra, fragment):
    p = _policy(tmp_path, people, extra)
    with pytest.raises(PolicyError) as info:
        DuckDBEngine(load_policy(p))
    assert fragment in str(info.value)


def test_wrong_privacy_unit_column(tmp_path):
    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    p = tmp_path / "policy.toml"
    p.write_text('[engine]\ndatabase = "db.duckdb"\n[tables.people]\nprivacy_unit = "person"\n')
    with pytest.raises(PolicyError) as info:
        DuckDBEngine(load_policy(p))
    assert "privacy_unit column 'person' does not exist" in str(info.value)


def test_missing_source_file(tmp_path):
    p = tmp_path / "policy.toml"
    p.write_text('[tables.t]\nsource = "gone.parquet"\nprivacy_unit = "id"\n')
    with pytest.raises(PolicyError) as info:
        load_policy(p)
    assert "gone.parquet" in str(info.value) and "does not exist" in str(info.value)


def test_bad_toml(tmp_path):
    p = tmp_path / "policy.toml"
    p.write_text("[privacy\nepsilon = 1")
    with pytest.raises(PolicyError) as info:
        load_policy(p)
    assert "not valid TOML" in str(info.value)


def test_sample_policy_loads():
    policy = load_policy(SAMPLE / "dpsql.toml")
    assert set(policy.users) == {"alice", "bob"}
    assert policy.users["alice"].epsilon == 10
    assert policy.table("visits").max_rows == 10
    engine = DuckDBEngine(policy)
    assert set(engine.schema()) == {"patients", "visits", "wards"}
    engine.close()


def test_exact_reads_decimals_as_people_mean_them():
    assert exact(0.001) * 1000 == 1
    assert exact(0.1) + exact(0.2) == exact(0.3)


def test_spark_scratch_dir_is_a_path_with_a_master(tmp_path):
    """[engine] scratch_dir (Spark on a cluster): resolved against the policy's directory; with
    remote (Spark Connect, whose executors dpsql's driver does not direct) or as a non-path, refused."""
    for engine, fragment in [
        ('remote = "sc://h:15002"\nscratch_dir = "s"', "scratch_dir must be a directory path"),
        ('master = "spark://h:7077"\nscratch_dir = 3', "scratch_dir must be a directory path"),
    ]:
        p = tmp_path / "bad.toml"
        p.write_text(f'[engine]\nkind = "spark"\n{engine}\n[tables.wards]\npublic = true\n')
        with pytest.raises(PolicyError) as info:
            load_policy(p)
        assert fragment in str(info.value) and "every executor" in (info.value.hint or "")
    p = tmp_path / "ok.toml"
    p.write_text(
        '[engine]\nkind = "spark"\nmaster = "spark://h:7077"\nscratch_dir = "shared"\n[tables.wards]\npublic = true\n'
    )
    assert load_policy(p).engine.scratch_dir == tmp_path.resolve() / "shared"


@pytest.mark.parametrize(
    "privacy,fragment",
    [
        ('filter = "gdp"\nepsilon = 800\ndelta = 1e-6', "gdp filter cannot account for epsilon = 800"),
        ('filter = "rdp"\nepsilon = 3e6\ndelta = 1e-6', "rdp filter cannot account for epsilon"),
        ('filter = "advanced"\nepsilon = 3e6\ndelta = 1e-6', "advanced filter cannot account for epsilon"),
        (
            'filter = "gdp"\nepsilon = 10\ndelta = 1e-6\nwindow = "30d"\nlifetime_epsilon = 1000',
            "cannot account for lifetime_epsilon = 1000",
        ),
    ],
)
def test_a_budget_past_what_its_filter_can_compute_is_refused(tmp_path, privacy, fragment):
    """Such a budget used to load and then fail every answer with an internal error."""
    p = _policy(tmp_path, extra="[privacy]\n" + privacy + "\n")
    with pytest.raises(PolicyError, match=fragment) as info:
        load_policy(p)
    assert "zcdp" in str(info.value)


@pytest.mark.parametrize("kind", ["gdp", "rdp", "advanced", "zcdp", "basic"])
def test_a_budget_within_its_filter_loads(tmp_path, kind):
    p = _policy(tmp_path, extra=f'[privacy]\nfilter = "{kind}"\nepsilon = 700\ndelta = 1e-6\n')
    privacy = load_policy(p).privacy
    assert (privacy.filter, privacy.epsilon) == (kind, 700)
