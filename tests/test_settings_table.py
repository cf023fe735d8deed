"""Settings are declared once (session/setting_table.py): SET, RESET, SHOW, SHOW ALL and
current_setting, validation, the hints, the answer cache's key, the start-up ParameterStatus
messages and the README all read that table. Each test drives one consumer over every row, and
the first adds a row to show that a new setting needs nothing but its record."""

from __future__ import annotations

import pytest
import sqlglot

import dpsql
from dpsql.session import answer_cache, setting_table, settings
from dpsql.session.setting_table import BY_NAME, DP_SETTINGS, REPORTED, SETTINGS, TYPES, Setting
from dpsql.sql.options import QueryOptions

from .conftest import ROOT


def test_every_dpsql_setting_has_a_field_a_type_and_an_example():
    for s in SETTINGS:
        if s.dp:
            assert s.type in TYPES and s.field and s.example, s
            assert s.choices or s.type != "choice", s
        else:
            assert s.type == "text" and s.default is not None and not s.answer_neutral, s
    assert len(BY_NAME) == len(SETTINGS)  # one record per name


def test_a_setting_added_to_the_table_is_settable_shown_validated_and_reset(conn, monkeypatch):
    """A new row (here a second name for the cache switch) is SET, SHOWn, refused when invalid
    and RESET with no code of its own: SET/SHOW/RESET read the table, not a branch per name."""
    extra = Setting("dpsql.extra_switch", "boolean", "a test's setting", field="cache", example="off")
    monkeypatch.setattr(settings, "BY_NAME", {**BY_NAME, extra.name: extra})
    monkeypatch.setattr(settings, "DP_SETTINGS", (*DP_SETTINGS, extra.name))
    cur = conn.cursor()
    cur.execute("SET dpsql.extra_switch = off")
    cur.execute("SHOW dpsql.extra_switch")
    assert cur.fetchall() == [("off",)]
    with pytest.raises(dpsql.Error) as info:
        cur.execute("SET dpsql.extra_switch = maybe")
    assert info.value.sqlstate == "22023" and info.value.hint == "use on or off"
    cur.execute("RESET dpsql.extra_switch")
    assert conn.session.setting("dpsql.extra_switch") == "on"  # what current_setting() reads
    cur.execute("SHOW ALL")
    assert ("dpsql.extra_switch", "on") in cur.fetchall()
    with pytest.raises(dpsql.Error) as info:
        cur.execute("SHOW dpsql.nosuch")
    assert "dpsql.extra_switch" in info.value.hint


@pytest.mark.parametrize("name", DP_SETTINGS)
def test_each_dpsql_setting_is_set_shown_refused_and_reset_by_its_record(conn, name):
    s = BY_NAME[name]
    cur = conn.cursor()
    cur.execute(f"SHOW {name}")
    (before,) = cur.fetchone()
    cur.execute(f"SET {name} = '{s.example}'")
    cur.execute(f"SHOW {name}")
    shown = cur.fetchone()[0]
    assert shown == TYPES[s.type].show(TYPES[s.type].parse(s.example, s, conn.session.policy))
    with pytest.raises(dpsql.Error) as info:
        cur.execute(f"SET {name} = 'not-a-value'")
    assert info.value.sqlstate == "22023"
    cur.execute(f"RESET {name}")
    cur.execute(f"SHOW {name}")
    assert cur.fetchone() == (before,)


def test_show_all_lists_what_the_table_declares(conn):
    cur = conn.cursor()
    cur.execute("SHOW ALL")
    names = {row[0] for row in cur.fetchall()}
    assert names == {s.name for s in SETTINGS if s.shown}
    for s in SETTINGS:
        if s.read_only and s.shown:
            with pytest.raises(dpsql.Error) as info:
                cur.execute(f"SET {s.name} = 'x'")
            assert info.value.sqlstate == "42501"


def test_the_answer_cache_keys_every_setting_but_the_neutral_ones(conn):
    """Each setting the table does not call answer-neutral changes the answer cache's key; the
    neutral ones do not: a setting added to the table is keyed by default."""
    session = conn.session
    tree, options = sqlglot.parse_one("SELECT COUNT(*) FROM people"), QueryOptions()
    base = answer_cache.cache_key(session, tree, options)
    cur = conn.cursor()
    for name in DP_SETTINGS:
        s = BY_NAME[name]
        before = session.setting(name)
        cur.execute(f"SET {name} = '{s.example}'")
        assert session.setting(name) != before, f"{name}'s example is this policy's default: nothing to compare"
        changed = answer_cache.cache_key(session, tree, options)
        cur.execute(f"RESET {name}")
        assert (changed == base) == s.answer_neutral, name
    assert setting_table.ANSWER_NEUTRAL == {"dpsql.cache", "dpsql.reuse"}


def test_the_readme_names_every_dpsql_setting():
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in DP_SETTINGS if f"SET {name}" not in readme]
    assert not missing, f"README.md does not show how to SET {missing}"


def test_start_up_reports_the_table_s_settings(serve):
    """The ParameterStatus messages a client gets at start-up are the table's reported settings,
    each at its declared value but for the three a connection decides."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(serve.dsn(application_name="table-test"), autocommit=True) as c:
        for s in REPORTED:
            got = c.info.parameter_status(s.reported_as)
            if s.name == "application_name":
                assert got == "table-test"
            elif s.name == "session_authorization":
                assert got == "alice"
            elif s.name == "server_version":
                assert got.startswith(f"{s.default} (dpsql ")
            else:
                assert got == s.default, (s.reported_as, got)
