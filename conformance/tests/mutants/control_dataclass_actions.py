"""A control, not a mutant: an environment written the way the docs show, with a dataclass
action holding an ``int`` field (guess a seeded secret number). Strict validation refuses
``"7"``, ``true`` and unknown fields as its advertised schema says, so it certifies
(before RFC 0007 the runtime parsed such actions laxly and failed ``schema.invalid_actions``)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import openenv


@dataclasses.dataclass
class Guess:
    guess: int


@dataclasses.dataclass
class Hint:
    hint: str
    guesses: int


class GuessNumber(openenv.Environment):
    """Guess a secret in [1, 100] drawn from the seed; hints say higher or lower."""

    name = "guess-number"
    action_type = Guess
    observation_type = Hint
    deterministic = True
    seeded = True
    reward_range = (0.0, 1.0)
    max_episode_steps = 10
    example_actions = (Guess(50), Guess(25))

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> Hint:
        self.secret = random.Random(seed).randint(1, 100)
        self.guesses = 0
        return Hint("start", 0)

    def step(self, action: Guess) -> openenv.StepResult:
        self.guesses += 1
        if action.guess == self.secret:
            return openenv.StepResult(Hint("correct", self.guesses), reward=1.0, terminated=True)
        hint = "higher" if action.guess < self.secret else "lower"
        return openenv.StepResult(Hint(hint, self.guesses), reward=0.0)

    def state(self) -> dict[str, int]:
        return {"guesses": getattr(self, "guesses", 0)}


Env = GuessNumber
CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
