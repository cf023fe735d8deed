"""The privacy console (`dpsql serve --http`): logins with the wire's passwords and throttle,
CSRF, roles, EXPLAIN free and runs charged once, grants with reasons, the audit log as CSV;
through Starlette's test client, then in a real headless Chromium against a real server."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import re
import socket
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from dpsql.accounting.cost import Cost
from dpsql.config import BudgetPolicy, load_policy
from dpsql.console import create_app, timeline
from dpsql.console.audit import Record, csv_text
from dpsql.errors import PolicyError
from dpsql.server.listener import Server
from dpsql.server.throttle import LoginThrottle
from dpsql.server.wire.scram import Verifier, make_verifier, password_matches

from .browser import launch
from .conftest import ROOT, default_events, default_people, make_db, write_policy
from .server_fixture import PASSWORD, Serve, free_port, wait_listening

OFFICER = "\n[users.carol]\nofficer = true\n"
SYNOPSIS = """
[synopses.by_sex]
table = "people"
dimensions = ["sex"]
measures = ["count"]
epsilon = 0.5
charged_to = "bob"
"""
QUERY = "SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM people GROUP BY sex"


@pytest.fixture
def console_policy(tmp_path: Path) -> Path:
    make_db(
        tmp_path / "db.duckdb",
        default_people(),
        default_events(),
        rows=[((i % 21) - 10.0, 1 + i % 3) for i in range(300)],
    )
    return write_policy(tmp_path, epsilon=10.0, extra=OFFICER + SYNOPSIS)


@pytest.fixture
def server(console_policy: Path):
    s = Server(load_policy(console_policy), port=0)
    s.throttle = LoginThrottle(base_delay=0.0, lockout_after=3)
    for user in ("alice", "bob", "carol"):
        s.ledger.set_user(user, make_verifier(PASSWORD), "analyst")
    yield s
    s.executor.shutdown(wait=True)
    s.engine.close()
    s.ledger.close()


@pytest.fixture
def client(server):
    app = create_app(server)
    with TestClient(app, follow_redirects=False) as c:
        yield c
    for login in app.state.console.logins.drain():
        login.session.close()


def _token(client: TestClient, path: str = "/login") -> str:
    page = client.get(path, follow_redirects=True)
    return re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)


def _login(client: TestClient, user: str = "alice", password: str = PASSWORD):
    return client.post("/login", data={"user": user, "password": password, "csrf": _token(client)})


def _post(client: TestClient, path: str, data: dict, page: str = "/explain"):
    return client.post(path, data={**data, "csrf": _token(client, page)})


# Logins ----------------------------------------------------------------------------------------


def test_password_checked_against_the_scram_verifier():
    verifier = Verifier.parse(make_verifier("right horse"))
    assert password_matches(verifier, "right horse")
    assert not password_matches(verifier, "wrong horse")
    assert not password_matches(Verifier.mock("nobody", b"k" * 32), "right horse")


def test_login_ok_sets_a_signed_httponly_lax_cookie(client):
    r = _login(client)
    assert r.status_code == 303 and r.headers["location"] == "/budget"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "secure" not in cookie
    page = client.get("/budget")
    assert page.status_code == 200 and "alice" in page.text
    assert re.search(r'<svg class="chart"[^>]*data-points="[1-9]', page.text)  # the budget chart, with data
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"


def test_cookie_is_secure_when_served_over_tls(server):
    with TestClient(create_app(server, secure=True), base_url="https://testserver", follow_redirects=False) as c:
        r = _login(c)
        assert r.status_code == 303 and "; secure" in r.headers["set-cookie"].lower()
        assert c.get("/budget").status_code == 200


def test_bad_password_and_unknown_user_refused_alike_and_audited(client, server):
    wrong = _login(client, "alice", "nope")
    unknown = _login(client, "mallory", "nope")
    assert wrong.status_code == unknown.status_code == 401
    assert 'password authentication failed for user "alice"' in html.unescape(wrong.text)
    assert 'password authentication failed for user "mallory"' in html.unescape(unknown.text)
    assert client.get("/budget").status_code == 303  # not logged in
    events = server.ledger.events("alice")
    assert [(e["kind"], e["detail"]) for e in events] == [("login failed", "console")]


def test_logins_throttled_by_the_wire_servers_throttle(client, server):
    for _ in range(3):
        assert _login(client, "alice", "nope").status_code == 401
    locked = _login(client)  # even the right password, while locked out
    assert locked.status_code == 429 and "too many failed logins" in locked.text
    assert not server.throttle.admit("alice", time.monotonic()).ok  # the wire's instance
    assert [e["kind"] for e in server.ledger.events("alice")][-1] == "login locked out"


def test_a_user_missing_from_the_policy_cannot_log_in(client, server):
    server.ledger.set_user("dave", make_verifier(PASSWORD), "analyst")
    r = _login(client, "dave")
    assert r.status_code == 403 and "not declared" in r.text


def test_logout_ends_the_login_and_its_session(client):
    _login(client)
    cookie = client.cookies.get("dpsql_console")
    assert _post(client, "/logout", {}, "/budget").status_code == 303
    client.cookies.set("dpsql_console", cookie)  # the old cookie, replayed
    assert client.get("/budget").headers["location"] == "/login"


# CSRF and roles --------------------------------------------------------------------------------


def test_every_post_without_the_csrf_token_is_refused(client, server):
    _login(client)
    posts = {r.path for r in client.app.routes if "POST" in (getattr(r, "methods", None) or ())}
    assert posts == {
        "/login",
        "/logout",
        "/explain",
        "/run",
        "/run/confirm",
        "/officer/grants",
        "/officer/synopses/publish",
        "/officer/synopses/drop",
    }
    for path in posts:
        assert getattr(
            next(r.endpoint for r in client.app.routes if getattr(r, "path", "") == path and "POST" in r.methods),
            "csrf_protected",
        )
        assert client.post(path, data={"sql": QUERY}).status_code == 403, path
        assert client.post(path, data={"sql": QUERY, "csrf": "forged"}).status_code == 403, path
    r = client.post("/run/confirm", data={"sql": QUERY, "cost": json.dumps({"epsilon": 1.0, "delta": 0.0})})
    assert r.status_code == 403 and server.ledger.history("alice") == []  # nothing charged
    assert client.get("/budget").status_code == 200  # still logged in


def test_analysts_are_refused_officer_pages(client, server):
    _login(client)
    for path in (
        "/officer/budgets",
        "/officer/grants",
        "/officer/audit",
        "/officer/audit.csv",
        "/officer/policy",
        "/officer/ledger",
    ):
        r = client.get(path)
        assert r.status_code == 403 and "privacy officers" in r.text, path
    r = _post(client, "/officer/grants", {"user": "alice", "epsilon": "5", "reason": "me"}, "/budget")
    assert r.status_code == 403 and server.ledger.grants("alice") == []
    assert "/officer/" not in client.get("/budget").text  # no officer links either


def test_officer_flag_in_the_policy(tmp_path):
    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    policy = load_policy(write_policy(tmp_path, extra=OFFICER))
    assert policy.users["carol"].officer and not policy.users["alice"].officer
    with pytest.raises(PolicyError, match="officer"):
        load_policy(write_policy(tmp_path, extra='\n[users.carol]\nofficer = "yes"\n'))


# EXPLAIN and runs ------------------------------------------------------------------------------


def test_explain_shows_cost_and_error_and_charges_nothing(client, server):
    _login(client)
    r = _post(client, "/explain", {"sql": QUERY, "epsilon": "0.5"})
    assert r.status_code == 200 and "Expected error per aggregate" in r.text and "COUNT(*)" in r.text
    assert re.search(r"cost epsilon</dt><dd[^>]*>0.5<", r.text)
    assert re.search(r"epsilon left afterwards</dt><dd[^>]*>9.5<", r.text)
    assert server.ledger.history("alice") == []
    assert _post(client, "/run", {"sql": QUERY, "epsilon": "0.5"}).status_code == 200  # the confirmation step
    assert server.ledger.history("alice") == []


def test_run_charges_once_after_confirmation_and_appears_in_history(client, server):
    _login(client)
    confirm = _post(client, "/run", {"sql": QUERY, "epsilon": "0.25"})
    assert "Charge epsilon=0.25 and run" in confirm.text
    cost = html.unescape(re.search(r'name="cost" value="([^"]+)"', confirm.text).group(1))
    answer = _post(client, "/run/confirm", {"sql": QUERY, "epsilon": "0.25", "cost": cost})
    assert answer.status_code == 200 and "Charged epsilon=0.25" in answer.text
    assert "mean_age interval" in answer.text and 'class="chart bars"' in answer.text  # error bars
    charges = server.ledger.history("alice")
    assert len(charges) == 1 and charges[0]["cost"].epsilon == Fraction(1, 4)
    again = _post(client, "/run/confirm", {"sql": QUERY, "epsilon": "0.25", "cost": cost})
    assert "Answered from the cache, free" in again.text and len(server.ledger.history("alice")) == 1
    page = client.get("/history")
    assert html.escape(QUERY) in page.text and "release #1" in page.text and "cost epsilon=0.25" in page.text
    assert "from the cache, free" in page.text and "n interval" in page.text  # intervals from the cached answer
    server.ledger._con().execute("DELETE FROM cache")  # the intervals are the release record's own, cache or not
    assert "mean_age interval" in client.get("/history").text


def test_a_run_whose_cost_changed_since_confirmation_is_not_charged(client, server):
    _login(client)
    stale = json.dumps({"epsilon": 0.1, "delta": 0.0})
    r = _post(client, "/run/confirm", {"sql": QUERY, "epsilon": "0.3", "cost": stale})
    assert "The cost changed" in r.text and server.ledger.history("alice") == []


def test_refusals_shown_as_the_wire_shows_them_and_internal_errors_hidden(client, server, monkeypatch):
    _login(client)
    r = _post(client, "/explain", {"sql": "SELECT * FROM people"})
    assert "selecting rows of a private table is not allowed" in r.text and "SQLSTATE 42501" in r.text
    assert "epsilon must be a positive number" in _post(client, "/explain", {"sql": QUERY, "epsilon": "-1"}).text
    for path in ("/run", "/run/confirm"):  # the EXPLAIN page again, the SQL as typed
        r = _post(client, path, {"sql": "SELECT * FROM people", "cost": "{}"})
        assert r.status_code == 200 and "SQLSTATE 42501" in r.text and "SELECT * FROM people" in r.text
    login = next(iter(client.app.state.console.logins._logins.values()))
    monkeypatch.setattr(login.session, "explain_plan", lambda *a: 1 / 0)
    r = _post(client, "/explain", {"sql": QUERY})
    assert "internal error" in r.text and "ZeroDivisionError" in r.text and "Traceback" not in r.text
    assert server.ledger.history("alice") == []


# Officer pages ---------------------------------------------------------------------------------


def test_grant_recorded_with_reason_and_officer(client, server):
    _login(client, "carol")
    before = server.ledger.state("bob", server.policy.users["bob"].budget)[0].epsilon
    r = _post(
        client,
        "/officer/grants",
        {"user": "bob", "epsilon": "0.5", "reason": "pilot study, approved"},
        "/officer/grants",
    )
    assert r.status_code == 303
    assert [(g["epsilon"], g["delta"]) for g in server.ledger.grants("bob")] == [(Fraction(1, 2), Fraction(0))]
    assert server.ledger.state("bob", server.policy.users["bob"].budget)[0].epsilon == before + Fraction(1, 2)
    event = [e for e in server.ledger.events("bob") if e["kind"] == "grant"][0]
    assert json.loads(event["detail"]) == {
        "officer": "carol",
        "epsilon": "0.5",
        "delta": "0",
        "reason": "pilot study, approved",
    }
    page = client.get(r.headers["location"])
    assert "Granted to bob" in page.text and "pilot study, approved" in page.text and "carol" in page.text
    refused = _post(client, "/officer/grants", {"user": "bob", "epsilon": "1", "reason": ""}, "/officer/grants")
    assert refused.status_code == 400 and "needs a reason" in refused.text and len(server.ledger.grants("bob")) == 1


def test_officer_publishes_and_drops_a_synopsis(client, server):
    """Publish from the console: one charge to the synopsis's payer (bob, not the officer), then
    bob's query over it is answered free; drop: answers go the per-query way, the charge stays."""
    from dpsql.session import Session

    _login(client, "bob")
    assert client.get("/officer/synopses").status_code == 403
    client.post("/logout", data={"csrf": _token(client, "/budget")})
    _login(client, "carol")
    page = client.get("/officer/synopses")
    assert page.status_code == 200 and "by_sex" in page.text and "not published" in page.text
    r = _post(client, "/officer/synopses/publish", {"name": "by_sex"}, "/officer/synopses")
    assert r.status_code == 303
    history = server.ledger.history("bob")
    assert [h["sql"] for h in history] == ["SYNOPSIS PUBLISH by_sex"] and history[0]["cost"].epsilon == Fraction(1, 2)
    assert server.ledger.history("carol") == []
    page = client.get(r.headers["location"])
    assert "Published by_sex" in page.text and ">published, " in page.text
    bob = Session(server.policy, "bob")
    try:
        answered = bob.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
        assert answered.dp["synopsis"] == "by_sex" and len(server.ledger.history("bob")) == 1  # free
        refused = _post(client, "/officer/synopses/publish", {"name": "nope"}, "/officer/synopses")
        assert refused.status_code == 400 and 'synopsis "nope" is not declared' in html.unescape(refused.text)
        r = _post(client, "/officer/synopses/drop", {"name": "by_sex"}, "/officer/synopses")
        assert r.status_code == 303 and "Dropped by_sex" in client.get(r.headers["location"]).text
        time.sleep(1.1)  # a process trusts its list of published synopses for a second (store.FRESH_FOR)
        again = bob.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
        assert again.dp.get("synopsis") is None and len(server.ledger.history("bob")) == 2  # charged per query
    finally:
        bob.close()


def test_audit_log_search_and_csv_export(client, server):
    _login(client, "alice", "wrong")
    _login(client)
    confirm = _post(client, "/run", {"sql": QUERY})
    cost = html.unescape(re.search(r'name="cost" value="([^"]+)"', confirm.text).group(1))
    _post(client, "/run/confirm", {"sql": QUERY, "cost": cost})
    _post(client, "/logout", {}, "/budget")
    _login(client, "carol")
    page = client.get("/officer/audit", params={"user": "alice", "text": "people"})
    assert page.status_code == 200 and "1 record." in page.text
    export = client.get("/officer/audit.csv", params={"user": "alice"})
    assert export.headers["content-type"].startswith("text/csv")
    assert "attachment" in export.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert {r["kind"] for r in rows} == {"charge", "login failed"}
    charge = next(r for r in rows if r["kind"] == "charge")
    assert charge["sql"] == QUERY and charge["epsilon"] == "1" and charge["released"] == "yes"
    events = list(csv.DictReader(io.StringIO(client.get("/officer/audit.csv", params={"kind": "events"}).text)))
    assert events and all(r["kind"] != "charge" for r in events)
    assert client.get("/officer/audit", params={"since": "yesterday"}).status_code == 400


def test_csv_cells_never_start_a_formula():
    text = csv_text([Record(0.0, "charge", "=cmd|' /C calc'!A0", sql="-2+3", detail="@SUM(A1)")])
    row = list(csv.reader(io.StringIO(text)))[1]
    assert row[2] == "'=cmd|' /C calc'!A0" and row[7] == "'-2+3" and row[9] == "'@SUM(A1)"


def test_officer_sees_every_budget_the_policy_and_the_ledger_status(client, server):
    _login(client, "carol")
    budgets = client.get("/officer/budgets").text
    assert all(f'id="budget-{u}"' in budgets for u in ("alice", "bob", "carol"))
    assert "no global budget" in budgets
    policy = html.unescape(client.get("/officer/policy").text)
    assert "people" in policy and "[0, 100]" in policy and "2 keys: 'F', 'M'" in policy
    assert "keys from the public column places.name" in policy and "max_groups 2, max_rows 3" in policy
    assert "db.duckdb" not in policy  # connection details are not policy
    assert "verified" in client.get("/officer/ledger").text


def test_serve_http_address_and_port_in_use_are_start_up_errors(console_policy):
    from click.testing import CliRunner

    from dpsql.cli import main

    bad = CliRunner().invoke(main, ["serve", "-p", str(console_policy), "--http", "localhost"])
    assert bad.exit_code == 1 and "is not HOST:PORT" in bad.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = CliRunner().invoke(
            main, ["serve", "-p", str(console_policy), "--port", "0", "--http", f"127.0.0.1:{port}"]
        )
    assert busy.exit_code == 1 and "cannot serve the console" in busy.output


def test_console_over_https_with_the_wires_certificate(console_policy, tmp_path):
    import ssl
    import urllib.request

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "server.pem", tmp_path / "server.key"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    port = free_port()
    serve = Serve(
        console_policy,
        tmp_path / "tls.sqlite",
        "--tls-cert",
        str(cert_file),
        "--tls-key",
        str(key_file),
        "--http",
        f"127.0.0.1:{port}",
    )
    try:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        deadline = time.monotonic() + 30
        while True:
            try:
                page = urllib.request.urlopen(f"https://127.0.0.1:{port}/login", context=context, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert page.status == 200 and "; secure" in page.headers["set-cookie"].lower()
    finally:
        serve.stop()


def test_budget_page_says_when_a_window_refreshes(tmp_path):
    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    path = write_policy(tmp_path, epsilon=10.0)
    path.write_text(path.read_text().replace('mechanism = "laplace"', 'mechanism = "laplace"\nwindow = "7d"'))
    server = Server(load_policy(path), port=0)
    server.ledger.set_user("alice", make_verifier(PASSWORD), "analyst")
    try:
        with TestClient(create_app(server), follow_redirects=False) as c:
            _login(c)
            assert "window refreshes" in c.get("/budget").text
            for login in c.app.state.console.logins.drain():
                login.session.close()
    finally:
        server.executor.shutdown(wait=True)
        server.engine.close()
        server.ledger.close()


# The budget over time --------------------------------------------------------------------------


def test_replay_follows_charges_and_grants_to_the_ledgers_state():
    basic = BudgetPolicy("basic", Fraction(1), Fraction(0))
    charges = [(100.0, Cost.pure(Fraction(1, 10))), (200.0, Cost.pure(Fraction(1, 5)))]
    points = timeline.replay(basic, charges, [{"at": 300.0, "epsilon": Fraction(1), "delta": Fraction(0)}], 400.0)
    assert [x for p in points[1:] for x in (p.remaining, p.spent)] == pytest.approx(
        [0.9, 0.1, 0.7, 0.3, 1.7, 0.3, 1.7, 0.3]
    )
    assert points[0].at < 100 and points[0].remaining == 1.0 and points[-1].at == 400.0
    zcdp = BudgetPolicy("zcdp", Fraction(1), Fraction(1, 10**6), Fraction(1, 10**7))
    after_grant = timeline.replay(
        zcdp, charges, [{"at": 300.0, "epsilon": Fraction(2), "delta": Fraction(1, 10**6)}], 400.0
    )
    assert after_grant[-1].total == 2.0 and after_grant[-1].spent == 0.0  # a new segment, as the ledger opens
    week = 7 * 86400
    windowed = BudgetPolicy("basic", Fraction(1), Fraction(0), window=week)
    start = 1577836800 + 10 * week  # a window's start (windows count from 2020-01-01)
    points = timeline.replay(windowed, [(start + 100.0, Cost.pure(Fraction(1, 2)))], [], start + week + 100.0)
    assert points[-2].at == start + week and points[-1].remaining == 1.0  # the next window starts afresh
    assert min(p.remaining for p in points) == 0.5
    fresh = timeline.replay(zcdp, [], [], 400.0)[-1]
    assert fresh.spent == 0 and 0 < fresh.remaining < fresh.total  # zCDP: one release may take only part of it


def test_the_budget_chart_ends_at_the_budget_show_reports(client, server):
    _login(client)
    confirm = _post(client, "/run", {"sql": QUERY, "epsilon": "1.5"})
    cost = html.unescape(re.search(r'name="cost" value="([^"]+)"', confirm.text).group(1))
    _post(client, "/run/confirm", {"sql": QUERY, "epsilon": "1.5", "cost": cost})
    page = client.get("/budget").text
    assert re.search(r"epsilon remaining</dt><dd[^>]*>8.5<", page)
    assert "remaining: 8.5" in page  # the chart's description: its last point


# In a real browser -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A real `dpsql serve --http` on free loopback ports, with logins for alice, bob and carol."""
    directory = tmp_path_factory.mktemp("live")
    make_db(directory / "db.duckdb", default_people(), default_events())
    policy = write_policy(directory, epsilon=10.0, extra=OFFICER)
    ledger = directory / "ledger.sqlite"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            "users",
            "add",
            "--policy",
            str(policy),
            "--ledger",
            str(ledger),
            "carol",
            "--password-stdin",
        ],
        input=PASSWORD + "\n",
        text=True,
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    port = free_port()
    serve = Serve(policy, ledger, "--http", f"127.0.0.1:{port}")
    if not wait_listening(port, lambda: serve.proc.poll() is None):  # the console's port
        raise RuntimeError(serve.stop())
    serve.base = f"http://127.0.0.1:{port}"
    yield serve
    serve.stop()


def test_wire_and_console_served_by_one_process_on_one_ledger(live):
    """A query over the wire appears in the console's history at once; the console's login is
    the wire's password."""
    import http.cookiejar
    import urllib.request
    from urllib.parse import urlencode

    import psycopg

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    token = re.search(r'name="csrf" value="([^"]+)"', opener.open(live.base + "/login").read().decode()).group(1)
    sql = "SELECT COUNT(*) AS adults FROM people WHERE age >= 18"
    with psycopg.connect(live.dsn("bob"), autocommit=True) as conn:
        assert conn.execute(sql).fetchone()[0] > 0
    budget = opener.open(
        live.base + "/login", data=urlencode({"user": "bob", "password": PASSWORD, "csrf": token}).encode()
    )
    assert budget.url.endswith("/budget")
    assert html.escape(sql) in opener.open(live.base + "/history").read().decode()


@pytest.fixture(scope="module")
def browser(live):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


class Tab:
    """A browser tab logged in as one user, collecting console errors and page errors."""

    def __init__(self, browser, live, user: str):
        self.context = browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.base = live.base
        self.goto("/login")
        self.page.fill("#user", user)
        self.page.fill("#password", PASSWORD)
        self.page.click("form[action='/login'] button[type=submit]")
        self.page.wait_for_url(self.base + "/budget")

    def goto(self, path: str):
        return self.page.goto(self.base + path)

    def shot(self, path: Path) -> bytes:
        self.page.screenshot(path=str(path), full_page=True)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        return data

    def close(self):
        self.context.close()


def _colours(browser, png: bytes) -> dict[str, int]:
    """Pixels of the chart's colours in a PNG, decoded by the browser itself (a canvas on a blank page)."""
    context = browser.new_context()
    page = context.new_page()
    try:
        return page.evaluate(
            """async (data) => {
            const img = new Image();
            img.src = "data:image/png;base64," + data;
            await img.decode();
            const canvas = document.createElement("canvas");
            canvas.width = img.width; canvas.height = img.height;
            const ctx = canvas.getContext("2d");
            ctx.drawImage(img, 0, 0);
            const px = ctx.getImageData(0, 0, img.width, img.height).data;
            const near = (i, r, g, b) => Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) < 40;
            const out = {spent: 0, remaining: 0, distinct: 0};
            const seen = new Set();
            for (let i = 0; i < px.length; i += 4) {
                if (near(i, 0xc0, 0x39, 0x2b)) out.spent++;
                if (near(i, 0x1e, 0x84, 0x49)) out.remaining++;
                if (seen.size < 1000) seen.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
            }
            out.distinct = seen.size;
            return out;
        }""",
            base64.b64encode(png).decode(),
        )
    finally:
        context.close()


@pytest.mark.clients
@pytest.mark.slow
def test_browser_analyst_budget_explain_run_history(browser, live, tmp_path):
    tab = Tab(browser, live, "alice")
    try:
        chart = tab.page.locator("#budget-chart svg.chart")
        assert chart.is_visible() and int(chart.get_attribute("data-points")) >= 2
        assert tab.page.locator("#budget-chart svg path.series.remaining").count() == 1
        tab.shot(tmp_path / "budget.png")
        colours = _colours(browser, chart.screenshot(path=str(tmp_path / "budget-chart.png")))
        assert colours["distinct"] > 10 and colours["remaining"] > 100 and colours["spent"] > 100

        tab.goto("/explain")
        tab.page.fill("#sql", QUERY)
        tab.page.click("text=EXPLAIN (free)")
        assert tab.page.locator("#explain-result").is_visible()
        assert "Expected error per aggregate" in tab.page.inner_text("#explain-result")
        tab.shot(tmp_path / "explain.png")
        tab.goto("/history")
        assert QUERY not in tab.page.content()  # EXPLAIN charged nothing

        sql = "SELECT kind, COUNT(*) AS n FROM events GROUP BY kind"
        tab.goto("/explain")
        tab.page.fill("#sql", sql)
        tab.page.fill("input[name=epsilon]", "0.75")
        tab.page.click("text=Run…")
        assert "Charge epsilon=0.75 and run" in tab.page.inner_text("#confirm-run")
        tab.page.click("#confirm-run")
        assert "Charged epsilon=0.75" in tab.page.inner_text("#run-cost")
        assert tab.page.locator("svg.chart.bars").count() == 1  # error bars for n
        tab.shot(tmp_path / "result.png")

        tab.goto("/history")
        entry = tab.page.locator("article.entry", has_text=sql).first
        assert "cost epsilon=0.75" in entry.inner_text()
        tab.shot(tmp_path / "history.png")
        for epsilon, other in (
            ("1.5", "SELECT place, AVG(amount) AS mean FROM events GROUP BY place"),
            ("0.5", "SELECT COUNT(*) AS people FROM people WHERE age >= 50"),
        ):
            tab.goto("/explain")
            tab.page.fill("#sql", other)
            tab.page.fill("input[name=epsilon]", epsilon)
            tab.page.click("text=Run…")
            tab.page.click("#confirm-run")
            assert f"Charged epsilon={epsilon}" in tab.page.inner_text("#run-cost")
        tab.goto("/budget")
        assert "7.25" in tab.page.inner_text(".facts")  # 10 - 0.75 - 1.5 - 0.5
        tab.shot(tmp_path / "budget-after.png")  # docs/console.png is one of these
        assert tab.errors == []
    finally:
        tab.close()


@pytest.mark.clients
@pytest.mark.slow
def test_browser_officer_grant_and_pages(browser, live, tmp_path):
    tab = Tab(browser, live, "carol")
    try:
        tab.goto("/officer/grants")
        tab.page.select_option("select[name=user]", "bob")
        tab.page.fill("input[name=epsilon]", "0.5")
        tab.page.fill("#reason", "second-quarter report")
        tab.page.click("form[action='/officer/grants'] button[type=submit]")
        assert "Granted to bob" in tab.page.inner_text("main")
        assert tab.page.locator("table.data tr", has_text="second-quarter report").count() == 1
        tab.shot(tmp_path / "grants.png")
        for path in ("/officer/budgets", "/officer/audit", "/officer/policy", "/officer/ledger"):
            assert tab.goto(path).status == 200
            tab.shot(tmp_path / (path.rsplit("/", 1)[1] + ".png"))
        assert tab.page.locator("#ledger-ok").is_visible()
        assert tab.errors == []
    finally:
        tab.close()


@pytest.mark.clients
@pytest.mark.slow
def test_browser_analyst_refused_officer_pages_and_csrf_less_posts(browser, live):
    tab = Tab(browser, live, "bob")
    try:
        response = tab.goto("/officer/audit")
        assert response.status == 403 and "for privacy officers" in tab.page.inner_text("main")
        assert tab.page.locator("nav a[href='/officer/audit']").count() == 0
        refused = tab.page.request.post(live.base + "/run/confirm", form={"sql": QUERY, "cost": '{"epsilon": 0.1}'})
        assert refused.status == 403  # the browser's own cookie, but no CSRF token
        tab.goto("/history")
        assert "No queries yet" in tab.page.inner_text("main") or "release #" in tab.page.inner_text("main")
        assert [e for e in tab.errors if "403" not in e] == []  # only the refusals themselves
    finally:
        tab.close()


def test_screenshot_for_the_readme_is_a_real_one():
    shot = ROOT / "docs" / "console.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000
    assert "docs/console.png" in (ROOT / "README.md").read_text()


def test_a_loopback_console_answers_only_to_loopback_host_names(server):
    """DNS rebinding: a page on another site that resolves its own name to 127.0.0.1 sends its
    own Host header, which a console bound to loopback refuses."""
    from dpsql.console.app import LOOPBACK_NAMES

    with TestClient(
        create_app(server, hosts=LOOPBACK_NAMES), base_url="http://127.0.0.1:8080", follow_redirects=False
    ) as c:
        assert c.get("/login").status_code == 200
        assert c.get("/login", headers={"host": "localhost:8080"}).status_code == 200
        assert c.get("/login", headers={"host": "attacker.example"}).status_code == 400
