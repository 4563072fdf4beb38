"""The browser environment: MiniWoB++ tasks in Chromium, through BrowserGym.

An episode is one MiniWoB++ task (RFC 0004 tasks: ``reset(task_id="click-test")``; without a
task id the seed chooses one of the split, without a seed a random one). The observation
(:class:`browser_env.v1.browser_env_pb2.Observation`) is the task's goal, the page's
accessibility tree flattened to text by BrowserGym, a screenshot as a ``uint8`` tensor
``(height, width, 3)``, the focused element and the last action's error. An action is a
BrowserGym action string (``click('13')``, ``fill('14', 'Cheree')``; :mod:`browser_env.actions`
says which functions are allowed and why). The reward is MiniWoB++'s own: after every action
BrowserGym's task validation reads the page's checker (1.0 when its raw reward is positive);
the episode ends when the task says it is done.

A grading environment (RFC 0015) whose actions are not tool calls: every step is graded. In a
strict episode (the default) a step's metadata keeps only :data:`PUBLIC_METADATA`: the
checker's raw reward (``miniwob_raw_reward``) and its reason (``reason``; unicode-test's names
the button that was right) reach only rich episodes, asked for at reset with
``options={"feedback": "rich"}``. The observation is the page (goal, accessibility tree,
screenshot) and never the checker's own state.

The task pages are the HTML files the ``miniwob`` package ships, opened as ``file://`` URLs:
no network is used. Chromium is shared (:mod:`browser_env.browser`): each session has its own
browser context and page; ``max_sessions`` bounds them.
"""

from __future__ import annotations

import argparse
import functools
import io
import logging
import pathlib
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import PIL.Image

import openenv
from browser_env import actions, browser
from browser_env.v1.browser_env_pb2 import Observation
from openenv.errors import Unavailable
from openenv.runtime.codec import tensor_from_proto, tensor_to_proto

__all__ = ["PUBLIC_METADATA", "TASKS", "BrowserEnvironment", "Observation", "screenshot", "task_url"]

log = logging.getLogger(__name__)

TASKS = (
    "click-test",
    "click-test-2",
    "click-button",
    "click-button-sequence",
    "click-link",
    "click-dialog",
    "click-dialog-2",
    "click-checkboxes",
    "click-option",
    "click-tab",
    "click-widget",
    "click-collapsible-nodelay",
    "click-scroll-list",
    "choose-list",
    "enter-text",
    "enter-text-2",
    "enter-password",
    "focus-text",
    "focus-text-2",
    "login-user",
    "simple-arithmetic",
    "odd-or-even",
    "unicode-test",
    "identify-shape",
)
"""The MiniWoB++ tasks served (the ``miniwob`` split), by MiniWoB++'s names."""

VIEWPORT = {"width": 332, "height": 214}
"""BrowserGym's MiniWoB++ viewport, in CSS pixels."""
SCALE = 1.5
"""BrowserGym's MiniWoB++ zoom: screenshot pixels per CSS pixel (coordinate actions divide by it)."""
SCREENSHOT_SHAPE = (321, 498, 3)
"""The screenshot tensor's shape: the viewport at BrowserGym's zoom."""
DEFAULT_TIMEOUT_MS = 30_000
"""Playwright's default timeout in a session's context: the task's setup (navigation, waiting for
MiniWoB++'s ready flag). BrowserGym's 5 s fails resets on a loaded machine; its actions carry
their own, shorter timeouts (:data:`browser_env.actions.ELEMENT_TIMEOUT_MS`)."""
SCREENSHOT_TIMEOUT_MS = 10_000
"""How long a screenshot may wait for the page to paint a frame (it fails the call beyond that)."""
PUBLIC_METADATA = ("task", "seed", "task_error", "browser_crashed")
"""A step's metadata keys that strict feedback keeps: the task and seed (the reset's), why the
task ended without a verdict (the page left the task's URL) and a crashed browser. Not the
checker's raw reward nor its reason."""
SETTLE_S = 0.05
"""Pause after an action before the page is read, for the page's JS events (BrowserGym waits
0.5 s; MiniWoB++'s checkers run in the event handlers themselves)."""


def _html_root() -> pathlib.Path:
    import miniwob

    return pathlib.Path(miniwob.__file__).parent / "html" / "miniwob"


def task_url(task: str) -> str:
    """The ``file://`` URL of a task's page (shipped by the ``miniwob`` package)."""
    return (_html_root() / f"{task}.html").as_uri()


@functools.cache
def _task_classes() -> dict[str, Any]:
    from browsergym.miniwob import ALL_MINIWOB_TASKS

    by_name = {c.subdomain: c for c in ALL_MINIWOB_TASKS}
    return {t: by_name[t] for t in TASKS}


def screenshot(obs: Observation) -> np.ndarray:
    """The observation's screenshot as a NumPy array ``(height, width, 3)`` of ``uint8``."""
    return tensor_from_proto(obs.screenshot)


class BrowserEnvironment(openenv.Environment):
    """MiniWoB++ web tasks in Chromium through BrowserGym: act with BrowserGym action strings."""

    name = "browser_env"
    version = "0.1.0"
    description = (
        "MiniWoB++ web tasks in Chromium through BrowserGym: observations are the accessibility tree and a "
        "screenshot, actions BrowserGym action strings, the reward MiniWoB++'s own checker."
    )
    action_type: ClassVar[Any] = {"type": "string", "minLength": 1, "maxLength": actions.MAX_ACTION_CHARS}
    observation_type: ClassVar[Any] = Observation
    state_type: ClassVar[Any] = None
    example_actions: ClassVar[Sequence[Any]] = ("noop(0)", "click('13')", "scroll(0, 100)")
    reward_range = (0.0, 1.0)
    max_episode_steps = 30
    max_sessions = 4
    deterministic = False
    # RFC 0015: graded at every step by the page's checker; strict by default (the reward, the
    # public metadata), rich on request (the checker's raw reward and reason).
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=PUBLIC_METADATA)

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """click-test (one button, the same bid on every instance), as the environment's own
        actions: clicking it earns 1, waiting (``noop``) earns 0 (RFC 0015: a probe of an
        environment whose actions are not tool calls is ``{"action": A}`` steps)."""
        return [
            openenv.GradingProbe(
                task_id="click-test",
                seed=seed,
                reference=[{"action": "click('13')"}],
                null=[[{"action": "noop(0)"}]],
            )
            for seed in (4, 5)
        ]

    task_splits: ClassVar[Mapping[str, str]] = {
        "miniwob": f"{len(TASKS)} MiniWoB++ tasks (clicking, forms, typing), BrowserGym's versions",
    }
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "kind": "browser",
        "tasks": len(TASKS),
        # Every step drives Chromium: `openenv catalog certify` searches with this many examples at
        # most, and waits this long for an answer at least (a burst of sessions queues on the browsers).
        "certify_max_examples": 2,
        "certify_timeout": 60,
        "benchmark": "MiniWoB++ (miniwob 1.1, browsergym-miniwob 0.14)",
        "actions": "BrowserGym high-level action strings: " + ", ".join(actions.ALLOWED),
    }

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [
            openenv.TaskInfo(t, metadata={"description": str(getattr(c, "desc", ""))})
            for t, c in _task_classes().items()
        ]

    @classmethod
    def preflight(cls) -> None:
        if browser.chromium_path() is None:
            raise RuntimeError("browser_env needs Chromium: apt-get install chromium, or set BROWSER_ENV_CHROMIUM")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lane: browser.Lane | None = None
        self._generation = -1
        self._context: Any = None
        self._page: Any = None
        self._task: Any = None
        self._task_id = ""
        self._seed: int | None = None
        self._goal = ""

    # ------------------------------------------------------------------ lane thread only

    def _fresh_page(self) -> Any:
        assert self._lane is not None
        b = self._lane.browser()
        if self._context is not None and self._generation == self._lane.generation and not self._page.is_closed():
            return self._page
        self._drop_context()
        # Rendered at BrowserGym's zoom once and for all (its extract_screenshot switches the
        # device metrics around every capture, two more re-renders a step).
        self._context = b.new_context(
            viewport=VIEWPORT, device_scale_factor=SCALE, locale="en-US", timezone_id="UTC", accept_downloads=False
        )
        self._context.set_default_timeout(DEFAULT_TIMEOUT_MS)
        self._page = self._context.new_page()
        self._generation = self._lane.generation
        return self._page

    def _drop_context(self) -> None:
        ctx, self._context, self._page = self._context, None, None
        if ctx is not None and self._lane is not None and self._generation == self._lane.generation:
            try:
                ctx.close()
            except Exception as e:  # noqa: BLE001 - its page or browser may be gone already
                log.debug("closing a browser context: %s", e)

    def _alive(self) -> bool:
        return (
            self._lane is not None
            and self._page is not None
            and self._generation == self._lane.generation
            and self._lane.browser().is_connected()
            and not self._page.is_closed()
        )

    def _observe(self, error: str = "") -> Observation:
        from browsergym.core.observation import (
            _post_extract,
            _pre_extract,
            extract_focused_element_bid,
            extract_merged_axtree,
        )
        from browsergym.utils.obs import flatten_axtree_to_str

        page = self._page
        for tries in (2, 1, 0):
            try:
                _pre_extract(page, tags_to_mark="standard_html", lenient=tries == 0)
                axtree = extract_merged_axtree(page)
                focused = extract_focused_element_bid(page)
                break
            except Exception:
                _post_extract(page)
                if tries == 0:
                    raise
        _post_extract(page)
        with PIL.Image.open(io.BytesIO(page.screenshot(type="png", timeout=SCREENSHOT_TIMEOUT_MS))) as img:
            shot = np.asarray(img.convert("RGB"))
        obs = Observation(
            goal=self._goal,
            axtree=flatten_axtree_to_str(axtree),
            last_action_error=error,
            task=self._task_id,
            focused_element_bid=focused or "",
        )
        tensor_to_proto(np.ascontiguousarray(shot, dtype=np.uint8), obs.screenshot)
        return obs

    def _reset_on_lane(self, task_id: str, seed: int) -> openenv.StepResult[Observation]:
        page = self._fresh_page()
        cls = _task_classes()[task_id]
        self._task = cls(seed=seed, base_url=_html_root().as_uri() + "/")
        self._goal, _info = self._task.setup(page=page)
        self._task_id, self._seed = task_id, seed
        return openenv.StepResult(self._observe(), metadata={"task": task_id, "seed": seed})

    def _lost(self) -> openenv.StepResult[Observation]:
        """The step of an episode whose page is gone (its Chromium or renderer crashed)."""
        obs = Observation(
            goal=self._goal,
            task=self._task_id,
            last_action_error="the browser page crashed; this episode is over: reset to start another",
        )
        tensor_to_proto(np.zeros(SCREENSHOT_SHAPE, np.uint8), obs.screenshot)
        self._task = None
        return openenv.StepResult(obs, reward=0.0, truncated=True, metadata={"browser_crashed": True})

    def _step_on_lane(self, action: str) -> openenv.StepResult[Observation]:
        if not self._alive():
            return self._lost()
        page = self._page
        error = ""
        try:
            program = actions.compile_action(action)
        except actions.ActionRefused as e:
            program, error = None, f"refused: {e}"
        if program is not None:
            try:
                actions.run(program, page)
            except Exception as e:  # noqa: BLE001 - the page's answer to the action, reported in-band as BrowserGym does
                error = f"{type(e).__name__}: {e}"
            if not self._alive():
                return self._lost()
            page.wait_for_timeout(SETTLE_S * 1000)
            # Pages the action opened (popups) are closed: the task is its one page.
            for other in list(self._context.pages):
                if other is not page:
                    other.close()
        reward, done, _msg, info = self._task.validate(page, [])
        meta = {"miniwob_raw_reward": info.get("RAW_REWARD_GLOBAL"), "reason": info.get("REWARD_REASON")}
        if "error" in info:  # BrowserGym's validation ended the task (the page left the task's URL)
            meta["task_error"] = info["error"]
        meta = {k: v for k, v in meta.items() if v is not None}
        return openenv.StepResult(self._observe(error), reward=float(reward), terminated=bool(done), metadata=meta)

    # ------------------------------------------------------------------ hooks

    def _ensure_lane(self) -> browser.Lane:
        if self._lane is None:
            self._lane = browser.lane_for()
        return self._lane

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult[Observation]:
        options = options or {}
        rng = random.Random(seed)
        task_id = options.get("task_id")
        if task_id is None:
            task_id = TASKS[seed % len(TASKS)] if seed is not None else rng.choice(TASKS)
        elif task_id not in TASKS:
            raise openenv.InvalidArgument(f"unknown task {task_id!r}; tasks: {', '.join(TASKS)}")
        task_seed = rng.randrange(2**31) if seed is not None else random.randrange(2**31)
        lane = self._ensure_lane()
        for attempt in (1, 2):
            generation = lane.generation
            try:
                return lane.call(lambda: self._reset_on_lane(str(task_id), task_seed))
            except browser.BrowserUnavailable as e:
                raise Unavailable(str(e)) from e
            except Exception as e:
                # A crashed page or browser: the next reset starts with a new context.
                lane.call(self._drop_context)
                timed_out = _is_timeout(e)
                # Chromium died under this reset (a crash, the watchdog), or the page did not load
                # in time (a loaded machine): once more, on a new context (and a new Chromium).
                crashed = lane.call(lambda: lane.browser() and lane.generation) != generation
                if attempt == 1 and (timed_out or crashed):
                    continue
                if timed_out:  # not the environment's fault, nor the client's: try again later
                    raise Unavailable(
                        f"the task's page did not load within {DEFAULT_TIMEOUT_MS / 1000:g} s, twice, each time "
                        f"in a new browser context (the machine is overloaded?); reset again later: {e}"
                    ) from e
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def step(self, action: Any) -> openenv.StepResult[Observation]:
        lane = self._ensure_lane()
        if self._task is None:
            return lane.call(self._lost)
        return lane.call(lambda: self._step_on_lane(str(action)))

    def state(self) -> dict[str, Any] | None:
        if not self._task_id:
            return None
        return {"task": self._task_id, "seed": self._seed, "goal": self._goal}

    def close(self) -> None:
        lane = self._lane
        if lane is None:
            return
        try:
            # While self._lane is still set: _drop_context closes the context only when it
            # belongs to the lane's running Chromium (clearing the lane first leaked every
            # session's context and its renderers until the container ran out of memory).
            lane.call(self._drop_context)
        finally:
            self._lane = None
            browser.release(lane)


def _is_timeout(e: BaseException) -> bool:
    """Whether ``e`` is Playwright's timeout (a navigation or wait that took too long)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    return isinstance(e, PlaywrightTimeout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the browser environment (MiniWoB++ through BrowserGym).")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(BrowserEnvironment, ns.host, ns.port, ready=lambda s: print(f"browser_env serving on {s.address}"))


if __name__ == "__main__":
    main()
