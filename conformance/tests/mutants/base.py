"""The healthy environment every mutant starts from: a seeded counter with JSON actions.

It uses the features the checks look at: a JSON Schema action (``{"delta": -3..3}``, 0
rejected with InvalidAction), JSON observation and state, episodes that terminate
(|value| >= 6) or truncate (8 steps), rewards in [-3, 3], seeded determinism, snapshots, two tools,
example actions, an action budget and a small capacity (4 sessions).
"""

from __future__ import annotations

import random
from typing import Any

import openenv

ACTION = {
    "type": "object",
    "properties": {"delta": {"type": "integer", "minimum": -3, "maximum": 3}},
    "required": ["delta"],
    "additionalProperties": False,
}
OBSERVATION = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "noise": {"type": "number"}},
    "required": ["value"],
    "additionalProperties": False,
}
STATE = {"type": "object", "properties": {"value": {"type": "integer"}}, "additionalProperties": False}


class Counter(openenv.Environment):
    """A seeded counter: each action adds ``delta``; the reward is ``delta``."""

    name = "counter"
    action_type = ACTION
    observation_type = OBSERVATION
    state_type = STATE
    deterministic = True
    snapshots = True  # RFC 0006, with the default (pickling) hooks
    seeded = True
    max_episode_steps = 8
    reward_range = (-3.0, 3.0)
    max_sessions = 4
    action_budget = 10
    run_in_thread = False
    example_actions = ({"delta": 1}, {"delta": -2})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.value = 0

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        self.rng = random.Random(seed)
        self.value = self.rng.randrange(-2, 3)
        return {"value": self.value}

    def observe(self) -> dict[str, Any]:
        return {"value": self.value}

    def step(self, action: dict[str, Any]) -> openenv.StepResult:
        delta = action["delta"]
        if delta == 0:
            raise openenv.InvalidAction("delta must not be 0")
        self.value += delta
        return openenv.StepResult(self.observe(), reward=self.reward_of(delta), terminated=abs(self.value) >= 6)

    def reward_of(self, delta: int) -> float:
        return float(delta)

    def state(self) -> dict[str, Any]:
        return {"value": self.value}

    @openenv.tool
    def peek(self) -> int:
        """The counter's value."""
        return self.value

    @openenv.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers (a calculator, unrelated to the episode).

        Args:
            a: first term.
            b: second term.
        """
        return a + b


Env = Counter
CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
