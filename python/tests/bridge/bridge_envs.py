"""Environments of the bridge tests and of ``tools/bench_bridge.py`` (our runtime's API).

``BenchCounter`` is the same trivial counter as ``upstream_envs.CounterEnvironment``
(OpenEnv's API), so the two servers can be compared step for step.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import openenv


@dataclasses.dataclass
class CounterAction:
    delta: int = 1


@dataclasses.dataclass
class CounterObservation:
    value: int = 0


class BenchCounter(openenv.Environment):
    """Adds ``delta`` to a counter; reward = delta (sync methods, run in worker threads)."""

    name = "counter"
    action_type = CounterAction
    observation_type = CounterObservation
    max_sessions = 1024
    deterministic = True
    example_actions = (CounterAction(1),)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> openenv.StepResult:
        self.value = 0
        self.steps = 0
        return openenv.StepResult(CounterObservation(0), metadata={"seed": seed})

    def step(self, action: CounterAction) -> openenv.StepResult:
        self.steps += 1
        self.value += action.delta
        return openenv.StepResult(
            CounterObservation(self.value),
            reward=float(action.delta),
            terminated=self.value >= 1_000_000_000,
            metadata={"step": self.steps},
        )

    def state(self) -> dict[str, Any]:
        return {"value": self.value}


class InlineBenchCounter(BenchCounter):
    """The counter with its sync methods run on the event loop (trivial methods need no thread)."""

    run_in_thread = False


class AsyncBenchCounter(BenchCounter):
    """The counter with ``async def`` methods (run on the event loop)."""

    async def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,  # type: ignore[override]
        options: dict[str, Any] | None = None,
    ) -> openenv.StepResult:
        return BenchCounter.reset(self, seed=seed, episode_id=episode_id, options=options)

    async def step(self, action: CounterAction) -> openenv.StepResult:  # type: ignore[override]
        return BenchCounter.step(self, action)


class RandomWalk(openenv.Environment):
    """A seeded random walk with rich time steps: rewards, bool rewards, metadata,
    truncation at ``max_episode_steps`` and termination (for parity checks)."""

    name = "random_walk"
    deterministic = True
    max_episode_steps = 12
    max_sessions = 8

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> openenv.StepResult:
        self.rng = random.Random(seed)
        self.pos = 0
        return openenv.StepResult({"pos": 0, "seed": seed, "opts": dict(options or {})}, metadata={"start": True})

    def step(self, action: dict[str, Any]) -> openenv.StepResult:
        move = int(action.get("move", 0))
        if abs(move) > 3:
            raise openenv.InvalidAction(f"move {move} is larger than 3")
        self.pos += move + self.rng.choice((-1, 0, 1))
        reward: Any = self.rng.random() if self.pos % 2 else (self.pos > 0)
        return openenv.StepResult(
            {"pos": self.pos, "trail": [self.pos, move], "half": self.pos / 2},
            reward=reward,
            terminated=abs(self.pos) >= 8,
            metadata={"noise": self.rng.randint(0, 99), "tags": ["a", "b"]},
        )

    def state(self) -> dict[str, Any]:
        return {"pos": self.pos}
