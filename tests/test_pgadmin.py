"""pgAdmin 4, for real, against `dpsql serve` of the sample hospital: installed from PyPI (pinned,
in an environment of its own), run in server mode, the server registered with pgAdmin's own
`setup.py load-servers`, then driven in headless Chromium as an analyst would: sign in, connect
(the password typed into pgAdmin's dialog), expand the tree down to each table's columns, open
the Query Tool on the database and run a DP query. Every statement pgAdmin sent is answered
(`dpsql serve --log-statements` shows none refused), and the query is charged once."""

from __future__ import annotations

import json
import re
import time

import pytest

from . import test_tool_catalogs as catalogs
from .browser import launch, local_only
from .conftest import ROOT
from .pgadmin import ANALYST, PgAdmin
from .server_fixture import PASSWORD

hospital_serve, _spent = catalogs.hospital_serve, catalogs._spent  # dpsql serve of the sample hospital
QUERY = "SELECT ward, COUNT(*) FROM visits GROUP BY ward"
REFUSED = re.compile(r"statement \S+ \[\d+\] ((?=[A-Z]*\d)[0-9A-Z]{5}): (.*)")  # a SQLSTATE, not a tag

STATE = """(name) => {
  const e = [...document.querySelectorAll('.file-entry')]
    .find(e => e.querySelector('.file-name')?.textContent === name);
  const t = e && e.querySelector('.directory-toggle');
  return !t ? 'none' : t.classList.contains('loading') ? 'loading' : t.classList.contains('open') ? 'open' : 'closed';
}"""
CHILDREN = """(name) => {
  const all = [...document.querySelectorAll('.file-entry')];
  const i = all.findIndex(e => e.querySelector('.file-name')?.textContent === name);
  if (i < 0) return [];
  const depth = +all[i].dataset.depth, out = [];
  for (const e of all.slice(i + 1)) {
    if (+e.dataset.depth <= depth) break;
    if (+e.dataset.depth === depth + 1) out.push(e.querySelector('.file-name').textContent);
  }
  return out;
}"""


def _node(page, name: str):
    return page.locator(".file-entry", has=page.locator(f".file-name:text-is('{name}')")).first


def _expand(page, name: str, attempts: int = 6) -> list[str]:
    """Open the tree node `name` (its label is unique while the test runs) and return its
    children's labels once they are drawn. A click made while pgAdmin is still loading the node
    can be lost, and a database node that connects as it opens can end open with no children
    drawn, so the node is opened again, a bounded number of times."""
    _node(page, name).wait_for(timeout=60_000)
    for attempt in range(attempts):
        state = page.evaluate(STATE, name)
        if state == "closed" or (state == "open" and attempt):  # open and empty: close, open again
            _node(page, name).locator(".directory-toggle").click()
            if state == "open":
                page.wait_for_timeout(500)
                _node(page, name).locator(".directory-toggle").click()
        try:
            found = page.wait_for_function(
                f"(name) => ({STATE})(name) === 'open' && ({CHILDREN})(name).length > 0 && ({CHILDREN})(name)",
                arg=name,
                timeout=15_000,
            )
            return found.json_value()
        except Exception:  # playwright's TimeoutError: try again
            continue
    raise AssertionError(f"pgAdmin's tree did not open {name!r}:\n{page.inner_text('body')[:2000]}")


def _open(page, path: list[str]) -> list[str]:
    """Open each node of `path` in turn (pgAdmin may close one as it connects to the database
    below it) and return the last one's children."""
    children = []
    for name in path:
        children = _expand(page, name)
    return children


def _query_tool(page, seconds: float = 60):
    """The Query Tool's frame, once pgAdmin has opened it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        frames = [f for f in page.frames if "sqleditor" in f.url]
        if frames:
            return frames[-1]
        page.wait_for_timeout(250)
    raise AssertionError(f"no Query Tool frame: {[f.url for f in page.frames]}")


def _sign_in(page, url: str) -> None:
    page.goto(url + "/login")
    page.fill("input[name=email]", ANALYST[0])
    page.fill("input[name=password]", ANALYST[1])
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u, timeout=60_000)
    page.locator(".pg-sp-container").wait_for(state="hidden", timeout=90_000)  # "Loading pgAdmin 4 ..."


def _connect(page) -> None:
    """Open the server group: pgAdmin selects the server and asks for its password (or does once
    the server is clicked), in one dialog or, from several panes at once, more."""
    from playwright.sync_api import TimeoutError as PageTimeout

    _node(page, "Servers").locator(".directory-toggle").click()
    password = page.locator("input[type=password]:visible")
    try:
        password.first.wait_for(timeout=15_000)
    except PageTimeout:
        _node(page, "dpsql hospital").locator(".directory-toggle").click()
        password.first.wait_for(timeout=60_000)
    for _ in range(4):
        if not password.count():
            return
        password.last.fill(PASSWORD)
        page.locator("button[data-test=save]:visible").last.click()
        page.wait_for_timeout(2000)
    assert not password.count(), "pgAdmin kept asking for the password"


@pytest.mark.clients
@pytest.mark.slow
def test_pgadmin_tree_and_query_tool(hospital_serve, tmp_path):
    hospital = hospital_serve
    started = time.monotonic()
    before = _spent(hospital)
    with PgAdmin() as pga:
        pga.register(
            {
                "1": {
                    "Name": "dpsql hospital",
                    "Group": "Servers",
                    "Host": "127.0.0.1",
                    "Port": hospital.port,
                    "MaintenanceDB": "dpsql",
                    "Username": "alice",
                    "SSLMode": "disable",
                }
            }
        )
        pga.start()
        try:
            columns, rows, messages = _drive(pga.url, tmp_path / "pgadmin.png")
        except BaseException:
            print(pga.output())
            raise
    log = hospital.output()
    refused = [m.groups() for m in REFUSED.finditer(log)]
    assert not refused, json.dumps(refused, indent=1)
    assert columns["patients"] == ["patient_id", "age", "sex", "region", "insurance", "income", "smoker"]
    assert columns["visits"] == ["visit_id", "patient_id", "visit_date", "ward", "diagnosis", "cost", "length_of_stay"]
    assert columns["wards"] == ["name", "building", "floor", "specialty"]
    assert rows == 12, rows  # one noisy count per ward of the public wards table
    assert "dpsql: cost epsilon=0.1" in messages, messages
    assert _spent(hospital) == pytest.approx(before + 0.1)  # charged once, however pgAdmin fetched it
    assert (tmp_path / "pgadmin.png").stat().st_size > 20_000  # docs/pgadmin.png is one of these
    print(f"pgAdmin end to end in {time.monotonic() - started:.0f} s")


def _drive(url: str, shot) -> tuple[dict[str, list[str]], int, str]:
    """Sign in, connect, walk the tree, run the query; the table columns seen, the number of
    result rows and the Messages pane's text; a screenshot of the result at `shot` (on failure,
    of the failure). No request may leave the machine."""
    from playwright.sync_api import sync_playwright

    outside, errors, columns = [], [], {}
    with sync_playwright() as p:
        browser = launch(p)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            outside = local_only(context, url)
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            _sign_in(page, url)
            _connect(page)
            path = ["dpsql hospital", "Databases", "dpsql"]
            assert _open(page, path)
            assert "public" in _open(page, path + ["Schemas"])
            assert "Tables" in _open(page, path + ["Schemas", "public"])
            tables = path + ["Schemas", "public", "Tables"]
            assert _open(page, tables) == ["patients", "visits", "wards"]
            for table in ("patients", "visits", "wards"):
                columns[table] = _open(page, tables + [table, "Columns"])
                _node(page, table).locator(".directory-toggle").click()  # closed: one "Columns" at a time
            _node(page, "dpsql").locator(".file-name").click()
            page.locator('[data-label="Query Tool"]').click()
            tool = _query_tool(page)  # an iframe of its own
            editor = tool.locator(".cm-content").first
            editor.wait_for(timeout=60_000)
            editor.click()
            page.keyboard.type(QUERY)
            page.keyboard.press("F5")
            total = tool.get_by_text(re.compile(r"Total rows: [1-9]")).first
            total.wait_for(timeout=90_000)
            rows = tool.locator("[role=row][aria-rowindex]").count() - 1  # drawn, less the header
            assert total.text_content().strip() == f"Total rows: {rows}", total.text_content()
            page.wait_for_timeout(500)
            page.screenshot(path=str(shot))
            tool.get_by_text("Messages", exact=True).click()
            notice = tool.get_by_text(re.compile(r"dpsql: cost epsilon")).first
            notice.wait_for(timeout=30_000)
            messages = notice.text_content()
        except BaseException:
            page.screenshot(path=str(shot))
            raise
        finally:
            browser.close()
    assert not outside, outside
    assert not errors, errors
    return columns, rows, messages


def test_screenshot_for_the_readme_is_there():
    """docs/pgadmin.png, shown in the README, is a screenshot the test above took (copied by hand)."""
    shot = ROOT / "docs" / "pgadmin.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 20_000 < shot.stat().st_size < 400_000
    assert "docs/pgadmin.png" in (ROOT / "README.md").read_text()
