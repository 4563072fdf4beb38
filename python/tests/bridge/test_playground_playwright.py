"""The ``/web`` playground driven by Playwright with Debian's Chromium, as docs/observability.md
tells a user to ("Driving the page from a script"): Playwright cannot download its own browser
here, so ``executable_path`` points at ``/usr/bin/chromium``. The page's strict Content Security
Policy (no inline script, no eval) must leave Playwright's own evaluation working: the waits
below are ``wait_for_function`` with a string expression, the form the issue saw refused, and
``evaluate`` with a string. Without Chromium the test is skipped, except in CI where it fails.

Budget (not asserted): about 5 s (one Chromium, one gridworld server)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from bridge_kit import openenv_serve

WAIT_MS = 60_000


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        msg = "needs Debian's chromium (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def test_playwright_plays_a_step_through_the_page_under_its_csp(tmp_path: Path) -> None:
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    with openenv_serve("gridworld.server:GridWorldEnvironment", tmp_path) as (_address, url, _proc):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                page = browser.new_page()  # no bypass_csp: the page's own policy applies
                violations: list[str] = []
                page.on("console", lambda m: violations.append(m.text) if "Content Security" in m.text else None)
                response = page.goto(f"{url}/web/")
                assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
                page.wait_for_function("document.body.dataset.ready === 'true'", timeout=WAIT_MS)
                assert page.evaluate("document.getElementById('env-name').textContent") == "gridworld"
                page.click("#reset")
                page.wait_for_function(
                    "document.getElementById('episode-id').textContent !== '\u2013'", timeout=WAIT_MS
                )
                page.select_option("select[name=move]", "MOVE_UP")
                page.click("#step")
                page.wait_for_function(
                    "document.getElementById('step-count').textContent === '1'", timeout=WAIT_MS, polling=100
                )
                assert page.text_content("#reward") not in ("", "\u2013")
                assert not violations, violations
            finally:
                browser.close()
