"""The ``/web`` playground in a real browser: Debian's Chromium, headless, driven through
chromedriver (Selenium's WebDriver), against an ``openenv serve`` subprocess.

The test plays a gridworld episode to the goal through the page (seed field, Reset, the
``move`` select generated from the action's JSON Schema, Step), checks that the reward and
return the page shows are the protocol's (the same seeded episode played over gRPC), that
the maze is drawn (the render hook's SVG: the agent's blue and the goal's green pixels in a
screenshot of the picture), and saves a screenshot of the page mid-episode that it checks is
not blank. Chromium and chromedriver come from apt (``.ci/run`` installs them); without them
the test is skipped, except in CI where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bridge_kit import openenv_serve
from pngread import read_png

import openenv
from gridworld import Action, Move
from gridworld.maze import shortest_path

WAIT_S = 60.0
NO_VALUE = "\u2013"  # what the page shows before a value exists (an en dash)
SEED = 7
AGENT_RGB = (0x25, 0x63, 0xEB)  # gridworld's render: the agent's disc
GOAL_RGB = (0x16, 0xA3, 0x4A)  # and the goal's square
SCREENSHOT_DIR = os.environ.get("OPENENV_SCREENSHOT_DIR")  # keep the screenshots (docs, CI artifacts)


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        msg = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return chromium, driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver_path = _browser_paths()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-background-networking",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1100",
        "--force-color-profile=srgb",
        "--force-device-scale-factor=1",
    ):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver_path), options=opts)
    drv.set_page_load_timeout(WAIT_S)
    try:
        yield drv
    finally:
        drv.quit()


def _protocol_episode(address: str) -> tuple[list[int], list[float]]:
    """The moves to the goal of seed SEED and the rewards the protocol gives them (over gRPC)."""
    with openenv.EnvClient(address).sync() as env:
        first = env.reset(seed=SEED)
        obs = first.observation
        moves = shortest_path(list(obs.grid), (obs.agent.row, obs.agent.col), (obs.goal.row, obs.goal.col))
        rewards = []
        for m in moves:
            r = env.step(Action(move=m))
            rewards.append(r.reward)
        assert r.terminated, "the shortest path must reach the goal"
    return moves, rewards


def _has_colour(px: np.ndarray, rgb: tuple[int, int, int]) -> bool:
    return bool(np.all(np.abs(px[..., :3].astype(int) - rgb) <= 8, axis=-1).sum() >= 20)


def _save(name: str, png: bytes, tmp_path: Path) -> Path:
    out = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_bytes(png)
    return path


def test_a_gridworld_episode_is_played_to_the_goal_through_the_page(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    with openenv_serve("gridworld.server:GridWorldEnvironment", tmp_path) as (address, url, _proc):
        moves, rewards = _protocol_episode(address)
        browser.get(f"{url}/web/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        assert browser.find_element(By.ID, "env-name").text == "gridworld"
        assert "connected: session" in browser.find_element(By.ID, "conn").text
        # The form comes from the schema: the proto enum is a select of its names.
        move = Select(browser.find_element(By.CSS_SELECTOR, "select[name=move]"))
        assert {o.text for o in move.options} >= {"MOVE_UP", "MOVE_DOWN", "MOVE_LEFT", "MOVE_RIGHT"}

        seed = browser.find_element(By.ID, "seed")
        seed.clear()
        seed.send_keys(str(SEED))
        browser.find_element(By.ID, "reset").click()
        wait.until(
            lambda d: (
                d.find_element(By.ID, "step-count").text == "0" and d.find_element(By.ID, "episode-id").text != NO_VALUE
            )
        )
        wait.until(lambda d: d.find_element(By.ID, "picture").is_displayed())

        rows = lambda d: len(d.find_elements(By.CSS_SELECTOR, "#history tbody tr"))  # noqa: E731
        for i, m in enumerate(moves):
            move.select_by_visible_text(Move.Name(m))
            browser.find_element(By.ID, "step").click()
            wait.until(lambda d, n=i + 1: rows(d) == n and d.find_element(By.ID, "step-count").text == str(n))
            # The page shows the protocol's reward for this step.
            assert float(browser.find_element(By.ID, "reward").text) == pytest.approx(rewards[i], abs=1e-6)
            if i == len(moves) // 2:
                mid = browser.get_screenshot_as_png()
                picture = browser.find_element(By.ID, "picture-body").screenshot_as_png

        assert browser.find_element(By.ID, "terminated").text == "true"
        assert browser.find_element(By.ID, "truncated").text == "false"
        assert float(browser.find_element(By.ID, "return").text) == pytest.approx(sum(rewards), abs=1e-5)
        assert browser.find_element(By.ID, "step").get_attribute("disabled") is not None  # the episode is over
        assert browser.find_element(By.ID, "error").get_attribute("hidden") is not None

        # The state button asks the session's state over the same /ws protocol.
        browser.find_element(By.ID, "state-btn").click()
        wait.until(lambda d: "TERMINATED" in d.find_element(By.ID, "state").text)

    # The mid-episode screenshot: saved, and not blank (many colours, the maze's among them).
    path = _save("playground.png", mid, tmp_path)
    px = read_png(path.read_bytes())
    assert px.shape[0] > 400 and px.shape[1] > 600
    colours = {tuple(c) for c in px.reshape(-1, px.shape[2])[::7, :3].tolist()}
    assert len(colours) > 16, f"the screenshot looks blank ({len(colours)} colours)"
    assert _has_colour(px, AGENT_RGB) and _has_colour(px, GOAL_RGB)
    pic = read_png(picture)
    assert _has_colour(pic, AGENT_RGB), "the agent is not drawn"
    assert _has_colour(pic, GOAL_RGB), "the goal is not drawn"


def test_the_page_shows_a_refused_action_and_keeps_the_session(browser: Any, tmp_path: Path) -> None:
    """A bad action (free JSON the schema refuses) is shown as an error; the next good step works."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    with openenv_serve("gridworld.server:GridWorldEnvironment", tmp_path) as (_address, url, _proc):
        browser.get(f"{url}/web/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        browser.find_element(By.ID, "reset").click()
        wait.until(lambda d: d.find_element(By.ID, "episode-id").text != NO_VALUE)
        browser.find_element(By.CSS_SELECTOR, "#raw-box summary").click()
        raw = browser.find_element(By.ID, "raw-action")
        raw.clear()
        raw.send_keys('{"move": "MOVE_SIDEWAYS"}')
        browser.find_element(By.ID, "step").click()
        wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
        assert "INVALID_ARGUMENT" in browser.find_element(By.ID, "error").text
        raw.clear()
        raw.send_keys('{"move": "MOVE_UP"}')
        browser.find_element(By.ID, "step").click()
        wait.until(lambda d: d.find_element(By.ID, "step-count").text == "1")
        assert not browser.find_element(By.ID, "error").is_displayed()


def test_a_tool_environment_is_played_from_its_tool_list(browser: Any, tmp_path: Path) -> None:
    """A tool environment: the form is a tool picker and the chosen tool's input schema."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    with openenv_serve("echo_env.server:EchoEnvironment", tmp_path) as (_address, url, _proc):
        browser.get(f"{url}/web/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        tool = Select(browser.find_element(By.CSS_SELECTOR, "select[name=tool]"))
        assert [o.text for o in tool.options] == ["echo_message", "echo_with_length"]
        browser.find_element(By.ID, "reset").click()
        wait.until(lambda d: d.find_element(By.ID, "episode-id").text != NO_VALUE)
        tool.select_by_visible_text("echo_message")
        message = browser.find_element(By.CSS_SELECTOR, "#action-fields [name=message]")
        message.send_keys("hello")
        browser.find_element(By.ID, "step").click()
        wait.until(lambda d: d.find_element(By.ID, "step-count").text == "1")
        assert float(browser.find_element(By.ID, "reward").text) == pytest.approx(0.5)  # 0.1 per character
        assert '"hello"' in browser.find_element(By.ID, "observation").text
        assert browser.find_element(By.CSS_SELECTOR, "#history tbody tr td:nth-child(2)").text == (
            '{"type":"call_tool","tool_name":"echo_message","arguments":{"message":"hello"}}'
        )


def _pixel(browser: Any, index: int) -> list[int]:
    """The top-left pixel (RGBA) of the ``index``-th canvas of the picture."""
    return list(
        browser.execute_script(
            "const c = document.querySelectorAll('#picture-body canvas')[arguments[0]];"
            "return Array.from(c.getContext('2d').getImageData(0, 0, 1, 1).data);",
            index,
        )
    )


def test_rgb_frames_and_array_renders_are_drawn(browser: Any, tmp_path: Path) -> None:
    """An RGB tensor in the observation and an RGBA render hook both become pictures."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    with openenv_serve("render_envs:Frames", tmp_path) as (_address, url, _proc):
        browser.get(f"{url}/web/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        browser.find_element(By.ID, "reset").click()
        canvases = "#picture-body canvas"
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, canvases)) == 2)
        assert browser.find_element(By.ID, "picture-caption").text == "render, observation.frame"
        assert _pixel(browser, 0) == [0, 200, 0, 255]  # the render hook's RGBA array
        assert _pixel(browser, 1) == [255, 0, 0, 255]  # the observation's RGB frame
        browser.find_element(By.CSS_SELECTOR, "#raw-box summary").click()
        raw = browser.find_element(By.ID, "raw-action")
        raw.clear()
        raw.send_keys('{"color": [0, 0, 255]}')
        browser.find_element(By.ID, "step").click()
        wait.until(lambda d: d.find_element(By.ID, "step-count").text == "1")
        wait.until(lambda d: _pixel(d, 1) == [0, 0, 255, 255])


def test_a_grey_frame_observation_is_drawn(browser: Any, tmp_path: Path) -> None:
    """A uint8 HxW tensor observation (a grey screen) becomes a picture, grey in every channel."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    with openenv_serve("render_envs:GreyFrames", tmp_path) as (_address, url, _proc):
        browser.get(f"{url}/web/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        browser.find_element(By.ID, "reset").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#picture-body canvas")) == 1)
        assert browser.find_element(By.ID, "picture-caption").text == "observation"
        assert _pixel(browser, 0) == [40, 40, 40, 255]
        browser.find_element(By.CSS_SELECTOR, "#raw-box summary").click()
        raw = browser.find_element(By.ID, "raw-action")
        raw.clear()
        raw.send_keys("200")
        browser.find_element(By.ID, "step").click()
        wait.until(lambda d: d.find_element(By.ID, "step-count").text == "1")
        wait.until(lambda d: _pixel(d, 0) == [200, 200, 200, 255])
