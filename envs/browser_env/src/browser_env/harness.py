"""The browser tasks as a tool environment, for agent harnesses (``openenv harness run``).

:class:`BrowserToolEnvironment` serves the same MiniWoB++ tasks, Chromium and reward as
:class:`browser_env.BrowserEnvironment`, but as tools, which is how coding agents act
(``envtool act action="click('13')"``, or the MCP tool ``act``): the reset observation is text
(the goal, the accessibility tree and how to act), each ``act`` call is a step of the episode
(counted, rewarded by MiniWoB++'s checker, ending the episode when the task is done) and answers
the page's new accessibility tree. No screenshot: harnesses read text. The same action rules
apply (:mod:`browser_env.actions`).

Every step is graded (RFC 0015: a grading environment without a grading tool grades every step,
as the non-tool :class:`~browser_env.BrowserEnvironment` does), and ``act`` is how the agent sees
the page, so it is no grading tool whose result strict feedback would replace: ``act`` answers
the page, the reward and whether the task is over, never the checker's state. In a strict
episode (the default) the checker's raw reward and reason are dropped from the step's metadata
(the reason can name the right element); a rich one (asked for at reset) keeps them.

::

    openenv serve browser_env.harness:BrowserToolEnvironment --port 50051 &
    openenv harness run grpc://127.0.0.1:50051 --agent mini-swe-agent --task click-test ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import openenv
from browser_env.server import PUBLIC_METADATA, BrowserEnvironment, Observation

__all__ = ["INSTRUCTIONS", "BrowserToolEnvironment"]

INSTRUCTIONS = (
    "Act on the page with the tool `act`, one BrowserGym action string per call, naming elements by "
    "the [bid] the accessibility tree shows: e.g. `envtool act action=\"click('13')\"`, "
    "`envtool act action=\"fill('14', 'hello')\"`. Each call answers the page's new accessibility "
    "tree, the reward and whether the task is over."
)


def _text(obs: Observation | None, header: str = "") -> str:
    assert obs is not None
    parts = [header] if header else []
    parts.append(f"Goal: {obs.goal}")
    if obs.last_action_error:
        parts.append(f"Last action error: {obs.last_action_error}")
    parts.append(f"Accessibility tree:\n{obs.axtree}")
    return "\n\n".join(parts)


class BrowserToolEnvironment(BrowserEnvironment):
    """MiniWoB++ web tasks in Chromium as tools for agent harnesses: ``act`` with BrowserGym action strings."""

    name = "browser_env_tools"
    description = (
        "MiniWoB++ web tasks in Chromium through BrowserGym, as tools for agent harnesses: the tool `act` "
        "performs BrowserGym action strings; the reward is MiniWoB++'s own checker."
    )
    action_type: ClassVar[Any] = openenv.CallToolAction
    observation_type: ClassVar[Any] = openenv.CallToolObservation
    example_actions: ClassVar[Sequence[Any]] = ()
    # Tool calls are the steps: the base class's dispatch, not BrowserEnvironment's.
    step = openenv.Environment.step
    # Every step graded, act no grading tool (module docstring): strict keeps the page, drops the
    # checker's detail.
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=PUBLIC_METADATA)

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """click-test (one button, the same bid on every instance): clicking it earns 1, waiting
        (``noop``) earns 0."""

        def act(action: str) -> openenv.CallToolAction:
            return openenv.CallToolAction("act", {"action": action})

        return [
            openenv.GradingProbe(
                task_id="click-test", seed=seed, reference=[act("click('13')")], null=[[act("noop(0)")]]
            )
            for seed in (4, 5)
        ]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._last: openenv.StepResult[Observation] | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult[Any]:
        r = super().reset(seed=seed, episode_id=episode_id, options=options)
        self._last = None
        text = f"{_text(r.observation)}\n\n{INSTRUCTIONS}"
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(obs, metadata=r.metadata)

    @openenv.tool
    def act(self, action: str) -> str:
        """Perform a BrowserGym action string on the task's page.

        Args:
            action: one or more calls such as click('13'), fill('14', 'hello'), press('14', 'Enter').
        """
        r = BrowserEnvironment.step(self, action)
        self._last = r
        status = f"reward: {r.reward:g}; task over: {'yes' if r.terminated or r.truncated else 'no'}"
        return _text(r.observation, status)

    def finish_tool_step(self, action: Any, observation: Any) -> openenv.StepResult[Any]:
        r, self._last = self._last, None
        if r is None:  # a refused call (unknown tool, bad arguments): no action ran
            return openenv.StepResult(observation, reward=0.0)
        return openenv.StepResult(
            observation, reward=r.reward, terminated=r.terminated, truncated=r.truncated, metadata=r.metadata
        )
