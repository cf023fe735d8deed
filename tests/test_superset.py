"""Apache Superset, for real, against `dpsql serve`: installed (pinned, in an environment of its
own: tests/tool_envs.py) and initialised with a SQLite metadata database, then driven as a
dashboard author would: through its REST API (tests/tools/superset_check.py) and, for the
dashboard itself, in headless Chromium, whose screenshot must show the charts drawn."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.request

import pytest

from .browser import launch, local_only
from .server_fixture import PASSWORD, free_port
from .tool_envs import SCRIPTS, python_tool

pytestmark = [pytest.mark.clients, pytest.mark.slow]  # Superset in its own environment: 485 s in the CI run

ADMIN = [
    "--username",
    "admin",
    "--firstname",
    "Ada",
    "--lastname",
    "Admin",
    "--email",
    "admin@localhost",
    "--password",
    "admin-Pass-123",
]

DRAWN = """() => {
  let painted = 0;
  for (const c of document.querySelectorAll('canvas')) {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, seen = new Set();
    for (let i = 0; i < d.length && seen.size < 5; i += 4 * 97) seen.add(d.slice(i, i + 4).join());
    if (seen.size >= 5) painted++;
  }
  const rows = Array.from(document.querySelectorAll('table tbody tr')).length;
  return {painted, rows};
}"""


def _environment(home) -> dict[str, str]:
    return {
        **os.environ,
        "SUPERSET_CONFIG_PATH": str(SCRIPTS / "superset" / "superset_config.py"),
        "SUPERSET_TEST_HOME": str(home),
        "FLASK_APP": "superset.app:create_app()",
        "SCARF_ANALYTICS": "false",
        "SUPERSET_LOAD_EXAMPLES": "no",
        "PYTHONUNBUFFERED": "1",
    }


def _wait(url: str, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "superset exited while starting"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("superset did not answer /health")


def test_superset_sql_lab_datasets_charts_and_a_dashboard(serve, tmp_path):
    python = python_tool("superset")
    superset = python.parent / "superset"
    home = tmp_path / "superset"
    home.mkdir()
    env = _environment(home)
    for step in (["db", "upgrade"], ["fab", "create-admin", *ADMIN], ["init"]):
        done = subprocess.run([str(superset), *step], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (step, done.stdout[-2000:], done.stderr[-2000:])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(home / "server.log", "w") as log:
        process = subprocess.Popen(
            [str(superset), "run", "-h", "127.0.0.1", "-p", str(port), "--with-threads"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait(url, process)
        done = subprocess.run(
            [str(python), str(SCRIPTS / "superset_check.py"), url, str(serve.port), PASSWORD],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert {"people", "events", "places"} <= set(out["tables"])
        assert out["sql_lab"] == ["F", "M"]  # SQL Lab's LIMIT-wrapped aggregate, answered with noise
        assert "selecting rows of a private table is not allowed" in out["sql_lab_rows"]
        assert out["virtual_columns"] == ["n", "sex"]  # learned from the virtual dataset's query
        assert sorted(r["sex"] for r in out["bar"]) == ["F", "M"] and len(out["table"]) == 2
        _dashboard_in_a_browser(url, out["dashboard"], tmp_path / "superset-dashboard.png")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def _log_in(page, url: str, attempts: int = 3) -> None:
    """Sign in through the React form. Under load the app can mount again after the fields were
    filled (its theme and bootstrap data arrive late), which empties them, so the form is filled
    once the page is idle, checked, and tried again a bounded number of times."""
    from playwright.sync_api import TimeoutError as PageTimeout

    for _ in range(attempts):
        page.goto(url + "/login/", wait_until="networkidle", timeout=90_000)
        user = page.locator('[data-test="username-input"], #username').first
        password = page.locator('[data-test="password-input"], #password').first
        user.fill("admin")
        password.fill("admin-Pass-123")
        if user.input_value() != "admin" or password.input_value() != "admin-Pass-123":
            continue
        page.locator('[data-test="login-button"], button[type="submit"]').first.click()
        try:
            page.wait_for_url(lambda u: "/login" not in u, timeout=30_000)
            return
        except PageTimeout:
            continue
    raise AssertionError(f"could not sign in to Superset: {page.url}\n{page.inner_text('body')[:2000]}")


def _dashboard_in_a_browser(url: str, dashboard: int, shot) -> None:
    """Log in through Superset's form, open the dashboard, wait until the bar chart's canvas is
    painted and the table chart has its rows, and keep a screenshot that is not blank. No
    request may leave the machine."""
    from playwright.sync_api import sync_playwright

    outside, errors = [], []
    with sync_playwright() as p:
        browser = launch(p)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            outside = local_only(context, url)
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            _log_in(page, url)
            page.goto(f"{url}/superset/dashboard/{dashboard}/")
            drawn, deadline = {}, time.monotonic() + 90
            while time.monotonic() < deadline:
                drawn = page.evaluate(DRAWN)
                if drawn["painted"] >= 1 and drawn["rows"] >= 2:
                    break
                page.wait_for_timeout(500)
            assert drawn.get("painted", 0) >= 1 and drawn.get("rows", 0) >= 2, drawn
            page.wait_for_timeout(1500)  # the bars' entry animation
            page.screenshot(path=str(shot))
            colours = page.evaluate(
                """async (png) => {
                const img = new Image(); img.src = 'data:image/png;base64,' + png; await img.decode();
                const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
                const x = c.getContext('2d'); x.drawImage(img, 0, 0);
                const d = x.getImageData(0, 0, c.width, c.height).data, seen = new Set();
                for (let i = 0; i < d.length; i += 4 * 13) seen.add(d.slice(i, i + 3).join());
                return seen.size;
            }""",
                base64.b64encode(shot.read_bytes()).decode(),
            )
        finally:
            browser.close()
    assert shot.stat().st_size > 20_000 and colours > 50, (shot.stat().st_size, colours)
    assert not errors, errors
    assert not [u for u in outside if "scarf" not in u], outside  # only the telemetry pixel, which was blocked
