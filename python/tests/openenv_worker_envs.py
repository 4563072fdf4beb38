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
