"""``/web`` shows the task's page: ``openenv serve`` of the browser environment in a subprocess,
its playground opened in Debian's Chromium through chromedriver (as python/tests/bridge's
playground tests do). A reset draws the observation's screenshot tensor as a picture; a step
typed into the page (the scripted policy's action) wins the task by MiniWoB++'s checker. Needs
chromium and chromium-driver (.ci/run installs them): skipped without them, failed in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.xdist_group("browser_env")  # beside test_browser_env: one Chromium-heavy module at a time

WAIT_S = 90.0


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        msg = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if _ci():
            pytest.fail(msg)
        pytest.skip(msg)
    return chromium, driver


def _wait_file(path: Path, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"openenv serve exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)
    raise TimeoutError(f"openenv serve did not write {path}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("browser-web")
    http_ready = tmp / "http"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openenv.cli",
            "serve",
            "browser_env.server:BrowserEnvironment",
            "--port",
            "0",
            "--http-port",
            "0",
            "--http-ready-file",
            str(http_ready),
        ],
        env={**os.environ, "GRPC_VERBOSITY": "ERROR", "BROWSER_ENV_BROWSERS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield _wait_file(http_ready, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    chromium, driver_path = _paths()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1100",
    ):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver_path), options=opts)
    drv.set_page_load_timeout(WAIT_S)
    try:
        yield drv
    finally:
        drv.quit()


def test_the_playground_shows_the_screenshot_and_plays_a_task(served: str, page: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from browser_env import TASKS, policy

    wait = WebDriverWait(page, WAIT_S)
    page.get(f"{served}/web/")
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
    seed = TASKS.index("click-test")  # without a task id, the seed chooses the task
    page.find_element(By.ID, "seed").send_keys(str(seed))
    page.find_element(By.ID, "reset").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#picture-body canvas"))
    assert page.find_element(By.ID, "picture-caption").text == "observation.screenshot"
    size, distinct = page.execute_script(
        "const c = document.querySelector('#picture-body canvas');"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "const seen = new Set();"
        "for (let i = 0; i < d.length; i += 4) seen.add(d[i] * 65536 + d[i + 1] * 256 + d[i + 2]);"
        "return [[c.width, c.height], seen.size];"
    )
    assert size == [498, 321]
    assert distinct > 10, "the screenshot is drawn, not blank"
    observation = page.find_element(By.ID, "observation").text
    assert "Click the button." in observation and "button 'Click Me!'" in observation
    # The action is a string: the page's form has one text field for it.
    bid = next(n.bid for n in policy.nodes(observation.replace("\\t", "\t").replace("\\n", "\n")) if n.role == "button")
    field = page.find_element(By.CSS_SELECTOR, "#action-fields input, #action-fields textarea")
    field.clear()
    field.send_keys(f"click('{bid}')")
    page.find_element(By.ID, "step").click()
    wait.until(lambda d: d.find_element(By.ID, "step-count").text == "1")
    assert float(page.find_element(By.ID, "reward").text) == 1.0
    assert page.find_element(By.ID, "terminated").text == "true"
