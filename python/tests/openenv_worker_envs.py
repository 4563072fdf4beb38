"""An environment that says which process serves it, for the tests of ``--workers``
(``openenv serve openenv_worker_envs:WhoServes --workers 2`` from this directory)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import openenv


@dataclasses.dataclass
class Nudge:
    """One step: add ``delta`` to the session's count."""

    delta: int = 1


class WhoServes(openenv.Environment):
    """Every observation is ``{"pid": <the serving process>, "steps": <steps this episode>}``."""

    action_type = Nudge
    max_sessions = 64

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.steps = 0

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.steps = 0
        return {"pid": os.getpid(), "steps": 0}

    def step(self, action: Nudge) -> openenv.StepResult:
        self.steps += action.delta
        return openenv.StepResult({"pid": os.getpid(), "steps": self.steps}, reward=0.0)

    @openenv.tool
    def who(self) -> str:
        """The serving process and this episode's steps, as ``"<pid> <steps>"``."""
        return f"{os.getpid()} {self.steps}"


class BusyLoop(WhoServes):
    """A step of ``delta`` > 1 keeps the event loop working for ``delta`` seconds (a pure-Python
    spin on the loop, as a connect burst keeps it busy), then answers as :class:`WhoServes`."""

    run_in_thread = False  # on the loop: the heartbeat waits for the step
    inline_threshold_s = 0.0

    def step(self, action: Nudge) -> openenv.StepResult:
        if action.delta > 1:
            import time

            end = time.monotonic() + action.delta
            while time.monotonic() < end:
                pass
        return super().step(Nudge(1))
