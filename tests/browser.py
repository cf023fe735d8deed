"""Debian's Chromium, headless, for the tests that look at pages (driven by Playwright; never a
browser that Playwright downloads). tests/setup.sh installs it."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright):
    """A headless Chromium; missing, the test fails: the README's test command installs it."""
    if not Path(CHROMIUM).exists():
        pytest.fail("no system Chromium: tests/setup.sh installs Debian's chromium")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def local_only(context, url: str, also: tuple[str, ...] = ()) -> list[str]:
    """Let the browser context reach only `url` (and data:, blob:, `also`): every other request is
    aborted and listed in the returned list, for the test to assert it stays empty."""
    outside: list[str] = []

    def route(r):
        local = r.request.url.startswith((url, "data:", "blob:", *also))
        if not local:
            outside.append(r.request.url)
        return r.continue_() if local else r.abort()

    context.route("**/*", route)
    return outside
